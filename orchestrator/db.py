"""The results database: sweeps, cells, runs and their metrics, plus a readable `results` view.

Only the launcher (which records what it hands to the executor) and the collector (which lands
`result.json` files) write here; jobs never do, so a cluster's compute nodes need no database
access. The file is SQLite by default so that a sweep's results are one file to copy, query with
the `sqlite3` shell, or attach to a notebook; any SQLAlchemy URL works for a shared server.

Concurrency: a launcher and one or more collectors may work on the same SQLite file at once.
Each connection switches the file to WAL journaling (readers never block the writer) and waits
up to `BUSY_TIMEOUT_S` for the write lock instead of failing at once with "database is locked".
WAL needs every process on one host (it shares memory through the `-shm` file), which holds
for the login node that launches and collects; jobs on compute nodes never open the database.

Schema changes: `SCHEMA_VERSION` names the layout defined here. Until Alembic migrations exist,
`open_db` creates what is missing, adds a nullable column a newer version defined to an older
database's table (`ALTER TABLE ... ADD COLUMN`, nothing else is ever altered or dropped), and
rebuilds a view whose columns are not the ones defined here (views hold no data). Any other
change (a new NOT NULL column, a changed type) needs a real migration or a fresh database file.

Two views: `results`, one row per run with its metrics pivoted into columns, and
`cell_summary`, one row per cell over its repeats (the latest successful attempt of each):
n, median, mean, standard deviation, coefficient of variation, min and max of images/s, and
`noisy` when the CV exceeds `NOISY_CV`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    create_engine,
    and_,
    event,
    func,
    inspect,
    select,
)
from sqlalchemy.engine import Connection, Dialect, make_url
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, sessionmaker, validates
from sqlalchemy.sql import column, table

from orchestrator import runstate

#: Version of the layout below; bump it (and add a migration) whenever a table or the view changes.
SCHEMA_VERSION = 2

#: A cell whose repeats' coefficient of variation (std/mean of images/s) exceeds this is noisy.
NOISY_CV = 0.05

#: How long a SQLite connection waits for another writer before giving up.
BUSY_TIMEOUT_S = 30.0


class NoDatabase(RuntimeError):
    """The database a read-only command was pointed at does not exist or holds no runs table."""


class Base(DeclarativeBase):
    pass


class Sweep(Base):
    """One `python -m orchestrator -m ...` invocation: what was typed and the cells it expanded to."""

    __tablename__ = "sweeps"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    created_at: Mapped[float] = mapped_column(Float)
    argv: Mapped[list[str]] = mapped_column(JSON, default=list)
    overrides: Mapped[list[list[str]]] = mapped_column(JSON, default=list)
    n_cells: Mapped[int] = mapped_column(Integer, default=0)
    note: Mapped[Optional[str]] = mapped_column(String, nullable=True)

    runs: Mapped[list["Run"]] = relationship(back_populates="sweep")


class Cell(Base):
    """One measurement's settings; the id is their hash, so equal settings share a row across sweeps."""

    __tablename__ = "cells"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    framework: Mapped[str] = mapped_column(String)
    model: Mapped[str] = mapped_column(String)
    dataset: Mapped[str] = mapped_column(String)
    like: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    hardware: Mapped[str] = mapped_column(String)
    gpus: Mapped[int] = mapped_column(Integer)
    threads: Mapped[int] = mapped_column(Integer)
    batch_size: Mapped[int] = mapped_column(Integer)
    scaling: Mapped[str] = mapped_column(String)
    iterations: Mapped[int] = mapped_column(Integer)
    warmup: Mapped[int] = mapped_column(Integer)
    seed: Mapped[int] = mapped_column(Integer)
    precision: Mapped[str] = mapped_column(String)
    #: The whole resolved settings dict, so settings added later are kept before they get a column.
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_cells_fmd", "framework", "model", "dataset"),)


class SweepCell(Base):
    """Which cells a sweep named; a cell typed again in a later sweep belongs to both."""

    __tablename__ = "sweep_cells"

    sweep_id: Mapped[str] = mapped_column(ForeignKey("sweeps.id"), primary_key=True)
    cell_id: Mapped[str] = mapped_column(ForeignKey("cells.id"), primary_key=True)
    #: The cell's whole resolved config as this sweep composed it (paths, hardware, cluster):
    #: what `orchestrator rerun` resubmits, with more time or memory if asked.
    config: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON, nullable=True)


class Run(Base):
    """One attempt at one repeat of one cell within one sweep, from recorded to collected."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: `<sweep_id>:<cell_id>:<repeat>:<attempt>`, the key shared with the job's result.json.
    uid: Mapped[str] = mapped_column(String, unique=True)
    sweep_id: Mapped[str] = mapped_column(ForeignKey("sweeps.id"), index=True)
    cell_id: Mapped[str] = mapped_column(ForeignKey("cells.id"), index=True)
    repeat: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    state: Mapped[str] = mapped_column(String, default="pending", index=True)
    #: Why a run is in its state, in the executor's words (e.g. a scheduler's pending reason).
    state_detail: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    job_id: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    executor: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    node: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    submitted_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    started_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    ended_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    #: Set once, by the collector that claimed this run's result.json (see collector.py).
    collected_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    error_class: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    error_message: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    run_dir: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    log_path: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    result_path: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    params: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    framework_version: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    # Provenance (result.json `provenance`), the parts worth a column; the whole record in `provenance`.
    framework_build: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON, nullable=True)
    environment: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    cpu_model: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    cpu_cores: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    cpu_threads: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)  # hardware threads the job could use
    gpu_name: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    gpu_uuids: Mapped[Optional[str]] = mapped_column(String, nullable=True)      # comma-separated
    gpu_driver: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    cuda_driver: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    git_revision: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    git_dirty: Mapped[Optional[bool]] = mapped_column(Boolean, nullable=True)
    slurm_job_id: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    exclusive: Mapped[Optional[bool]] = mapped_column(Boolean, nullable=True)
    energy_method: Mapped[Optional[str]] = mapped_column(String, nullable=True)  # counter | trapezoid
    provenance: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON, nullable=True)

    sweep: Mapped[Sweep] = relationship(back_populates="runs")
    cell: Mapped[Cell] = relationship()
    metrics: Mapped[list["Metric"]] = relationship(back_populates="run", cascade="all, delete-orphan")

    __table_args__ = (
        CheckConstraint(
            "state IN (" + ", ".join(f"'{s}'" for s in runstate.STATES) + ")", name="ck_runs_state"),
        Index("ix_runs_cell_repeat", "sweep_id", "cell_id", "repeat", "attempt"),
    )

    @validates("state")
    def _check_state(self, key: str, state: str) -> str:
        """Every write of a run's state is a move the run-state model allows (runstate.py)."""
        return runstate.check_move(self.state, state)


class Metric(Base):
    """One named number a run measured (names and units: metrics.METRIC_UNITS)."""

    __tablename__ = "metrics"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[float] = mapped_column(Float)
    unit: Mapped[Optional[str]] = mapped_column(String, nullable=True)

    run: Mapped[Run] = relationship(back_populates="metrics")


def latest_runs() -> Any:
    """The latest attempt of each repeat of each cell, as a subquery of `runs` rows.

    Attempts are numbered per (cell, repeat) across sweeps (a rerun or a forced sweep adds
    attempt n+1), so the highest attempt is the current word on that measurement. This is the
    one definition `status`, `rerun`, the progress bar and the `cell_summary` view all use.
    """
    newest = (select(Run.cell_id, Run.repeat, func.max(Run.attempt).label("attempt"))
              .group_by(Run.cell_id, Run.repeat).subquery("newest"))
    return (select(Run).join(newest, and_(Run.cell_id == newest.c.cell_id, Run.repeat == newest.c.repeat,
                                          Run.attempt == newest.c.attempt))
            .subquery("latest_runs"))


#: The `results` view's columns, in order; metric columns are pivoted from the metrics table.
RESULTS_COLUMNS = (
    "run", "sweep", "cell", "repeat", "attempt", "state", "framework", "model", "dataset",
    "hardware", "gpus", "threads", "batch_size", "precision", "params",
    "images_per_sec", "images_per_sec_median", "images_per_sec_std", "images_per_sec_mad",
    "cpu_percent", "peak_rss_mb", "gpu_mem_peak_mb", "gpu_power_avg_w", "energy_j",
    "energy_per_image_j", "node", "error_class", "error_message", "log_path",
    # added in schema 2
    "gpu_mem_avg_mb", "gpu_proc_mem_peak_mb", "gpu_util", "gpu_power_peak_w", "gpu_idle_power_w",
    "energy_net_j", "images_per_sec_per_w", "energy_method", "gpu_name", "framework_version",
    "git_revision", "git_dirty",
)

#: view column -> (metric name, divisor): how each metric column is read from `metrics`.
_PIVOT = {
    "images_per_sec": ("images_per_sec", None),
    "images_per_sec_median": ("images_per_sec_median", None),
    "images_per_sec_std": ("images_per_sec_std", None),
    "images_per_sec_mad": ("images_per_sec_mad", None),
    "cpu_percent": ("cpu_percent_avg", None),
    "peak_rss_mb": ("rss_peak_bytes", 1048576.0),
    "gpu_mem_peak_mb": ("gpu_mem_peak_bytes", 1048576.0),
    "gpu_power_avg_w": ("gpu_power_avg_w", None),
    "energy_j": ("energy_j", None),
    "energy_per_image_j": ("energy_per_image_j", None),
    "gpu_mem_avg_mb": ("gpu_mem_avg_bytes", 1048576.0),
    "gpu_proc_mem_peak_mb": ("gpu_proc_mem_peak_bytes", 1048576.0),
    "gpu_util": ("gpu_util_avg", None),
    "gpu_power_peak_w": ("gpu_power_peak_w", None),
    "gpu_idle_power_w": ("gpu_idle_power_w", None),
    "energy_net_j": ("energy_net_j", None),
    "images_per_sec_per_w": ("images_per_sec_per_w", None),
}

#: The view as a selectable, for `select(results_view)` without reflecting the database.
results_view = table("results", *(column(name) for name in RESULTS_COLUMNS))


def results_view_sql(dialect: Dialect) -> str:
    """The view's SELECT, quoted for the dialect (`repeat` is a keyword on some databases)."""
    q = dialect.identifier_preparer.quote
    pivot = ",\n           ".join(
        f"MAX(CASE WHEN name = '{metric}' THEN value END)"
        + (f" / {divisor}" if divisor else "") + f" AS {q(col)}"
        for col, (metric, divisor) in _PIVOT.items())
    run_cols = {"run": "r.uid", "sweep": "r.sweep_id", "cell": "r.cell_id", "repeat": f"r.{q('repeat')}",
                "attempt": "r.attempt", "state": "r.state", "params": "r.params", "node": "r.node",
                "error_class": "r.error_class", "error_message": "r.error_message",
                "log_path": "r.log_path", "energy_method": "r.energy_method", "gpu_name": "r.gpu_name",
                "framework_version": "r.framework_version", "git_revision": "r.git_revision",
                "git_dirty": "r.git_dirty"}
    cell_cols = ("framework", "model", "dataset", "hardware", "gpus", "threads", "batch_size", "precision")
    select_list = []
    for name in RESULTS_COLUMNS:
        if name in run_cols:
            select_list.append(f"{run_cols[name]} AS {q(name)}")
        elif name in cell_cols:
            select_list.append(f"c.{q(name)} AS {q(name)}")
        else:
            select_list.append(f"m.{q(name)} AS {q(name)}")
    return (
        "SELECT " + ",\n       ".join(select_list) + "\n"
        "FROM runs r\n"
        "JOIN cells c ON c.id = r.cell_id\n"
        "LEFT JOIN (SELECT run_id,\n           " + pivot + "\n"
        "           FROM metrics GROUP BY run_id) m ON m.run_id = r.id"
    )


#: The `cell_summary` view's columns, in order.
SUMMARY_COLUMNS = (
    "cell", "framework", "model", "dataset", "hardware", "gpus", "threads", "batch_size", "precision",
    "n", "images_per_sec_median", "images_per_sec_mean", "images_per_sec_std", "images_per_sec_cv",
    "images_per_sec_min", "images_per_sec_max", "noisy", "gpu_power_avg_w", "energy_per_image_j",
    "gpu_mem_peak_mb",
)
_SUMMARY_CELL = ("framework", "model", "dataset", "hardware", "gpus", "threads", "batch_size", "precision")

#: The summary view as a selectable.
summary_view = table("cell_summary", *(column(name) for name in SUMMARY_COLUMNS))


def cell_summary_sql(dialect: Dialect) -> str:
    """The summary view's SELECT: per cell, over the latest done attempt of each repeat that
    measured images/s. The median comes from window functions, the standard deviation (n-1)
    from sums of squares; `noisy` is 1 when the CV exceeds NOISY_CV (null for one repeat)."""
    q = dialect.identifier_preparer.quote
    rep = q("repeat")
    cell_cols = ", ".join(f"MIN({q(c)}) AS {q(c)}" for c in _SUMMARY_CELL)
    return f"""WITH latest AS (
    SELECT cell_id, {rep} AS rep, MAX(attempt) AS attempt FROM runs WHERE state = 'done'
    GROUP BY cell_id, {rep}),
ranked AS (
    SELECT x.*, ROW_NUMBER() OVER (PARTITION BY x.cell ORDER BY x.images_per_sec) AS rn,
           COUNT(*) OVER (PARTITION BY x.cell) AS cnt
    FROM results x JOIN latest l ON l.cell_id = x.cell AND l.rep = x.{rep} AND l.attempt = x.attempt
    WHERE x.state = 'done' AND x.images_per_sec IS NOT NULL),
stats AS (
    SELECT cell, {cell_cols}, COUNT(*) AS n,
           AVG(CASE WHEN rn IN ((cnt + 1) / 2, (cnt + 2) / 2) THEN images_per_sec END) AS median,
           AVG(images_per_sec) AS mean, MIN(images_per_sec) AS lo, MAX(images_per_sec) AS hi,
           SUM(images_per_sec * images_per_sec) AS ss, SUM(images_per_sec) AS s,
           AVG(gpu_power_avg_w) AS power, AVG(energy_per_image_j) AS epi, MAX(gpu_mem_peak_mb) AS mem
    FROM ranked GROUP BY cell),
spread AS (
    SELECT stats.*, CASE WHEN n > 1 THEN sqrt(CASE WHEN ss - s * s / n > 0 THEN (ss - s * s / n) / (n - 1)
                                                   ELSE 0 END) END AS sd
    FROM stats)
SELECT cell AS {q("cell")}, {", ".join(q(c) for c in _SUMMARY_CELL)}, n AS {q("n")},
       median AS {q("images_per_sec_median")}, mean AS {q("images_per_sec_mean")},
       sd AS {q("images_per_sec_std")},
       CASE WHEN mean > 0 THEN sd / mean END AS {q("images_per_sec_cv")},
       lo AS {q("images_per_sec_min")}, hi AS {q("images_per_sec_max")},
       CASE WHEN n > 1 AND mean > 0 THEN (CASE WHEN sd / mean > {NOISY_CV!r} THEN 1 ELSE 0 END) END AS {q("noisy")},
       power AS {q("gpu_power_avg_w")}, epi AS {q("energy_per_image_j")}, mem AS {q("gpu_mem_peak_mb")}
FROM spread"""


def summarize(rows: list[Any], noisy_cv: float = NOISY_CV) -> list[dict[str, Any]]:
    """The `cell_summary` rows computed from `results` rows (mappings), as the view computes
    them, for a filtered set of runs and any noise threshold: per cell, the latest done attempt
    of each repeat with images/s. Sorted as the results table is."""
    import statistics

    latest: dict[tuple[str, int], int] = {}
    for r in rows:
        if r["state"] == "done":
            key = (r["cell"], r["repeat"])
            latest[key] = max(latest.get(key, 0), r["attempt"])
    cells: dict[str, list[Any]] = {}
    for r in rows:
        if (r["state"] == "done" and r["images_per_sec"] is not None
                and latest.get((r["cell"], r["repeat"])) == r["attempt"]):
            cells.setdefault(r["cell"], []).append(r)
    out = []
    for cell, runs in cells.items():
        rates = [r["images_per_sec"] for r in runs]
        mean = statistics.fmean(rates)
        sd = statistics.stdev(rates) if len(rates) > 1 else None
        cv = sd / mean if sd is not None and mean > 0 else None

        def avg(key: str) -> Optional[float]:
            vals = [r[key] for r in runs if r.get(key) is not None]
            return statistics.fmean(vals) if vals else None

        mems = [r["gpu_mem_peak_mb"] for r in runs if r.get("gpu_mem_peak_mb") is not None]
        out.append({"cell": cell, **{c: runs[0][c] for c in _SUMMARY_CELL}, "n": len(rates),
                    "images_per_sec_median": statistics.median(rates), "images_per_sec_mean": mean,
                    "images_per_sec_std": sd, "images_per_sec_cv": cv,
                    "images_per_sec_min": min(rates), "images_per_sec_max": max(rates),
                    "noisy": None if cv is None else int(cv > noisy_cv),
                    "gpu_power_avg_w": avg("gpu_power_avg_w"), "energy_per_image_j": avg("energy_per_image_j"),
                    "gpu_mem_peak_mb": max(mems) if mems else None})
    out.sort(key=lambda r: tuple((r[c] is None, r[c]) for c in _SUMMARY_CELL))
    return out


def default_url() -> str:
    """The database the orchestrator uses unless told otherwise (`ORCHESTRATOR_DB`)."""
    return os.environ.get("ORCHESTRATOR_DB", "sqlite:///results.db")


def sqlite_path(url: str) -> Optional[Path]:
    """The file behind a SQLite URL, or None for other databases and in-memory SQLite."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def open_db(url: str, create: bool = True) -> sessionmaker:
    """Connects to `url`, creates missing tables and the `results` view, returns a sessionmaker.

    With `create=False` (commands that only read) a missing SQLite file or a database without
    the orchestrator's tables raises NoDatabase instead of leaving an empty database behind.
    """
    path = sqlite_path(url)
    if not create and path is not None and not path.exists():
        raise NoDatabase(f"no {path} here")
    engine = create_engine(url)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    if not create and not inspect(engine).has_table("runs"):
        engine.dispose()
        raise NoDatabase(f"{path or url} holds no orchestrator tables")
    _create_schema(engine)  # on an existing database: only what an older version lacks
    return sessionmaker(engine, expire_on_commit=False)


def _sqlite_pragmas(dbapi_connection: Any, connection_record: Any) -> None:
    """Per connection: WAL so readers and a writer overlap, and wait for the lock, not fail."""
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    cursor.execute("PRAGMA journal_mode = WAL")
    # In WAL mode NORMAL cannot corrupt the file; a commit lost to a power cut only leaves its
    # run uncollected, and the next `collect` lands it again from its result.json.
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.execute("PRAGMA foreign_keys = ON")
    try:  # cell_summary needs sqrt(); SQLite builds without its math functions get Python's
        cursor.execute("SELECT sqrt(4)")
    except Exception:
        dbapi_connection.create_function("sqrt", 1, _sqrt)
    cursor.close()


def _sqrt(x: Any) -> Optional[float]:
    import math

    return None if x is None or x < 0 else math.sqrt(x)


def _create_schema(engine: Engine) -> None:
    """Creates what is missing, safely when two processes open a fresh database together.

    `create_all` looks, then creates; two processes doing that at once can both find a table
    missing. On SQLite the creator first takes the write lock (BEGIN IMMEDIATE), so the other
    waits and then finds everything in place; elsewhere the loser's "already exists" error is
    retried once.
    """
    if not _outdated(engine):
        return
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            Base.metadata.create_all(conn)
            _add_missing_columns(conn)
            _create_results_view(conn)
            conn.commit()
        return
    for attempt in (1, 2):
        try:
            with engine.begin() as conn:
                Base.metadata.create_all(conn)
                _add_missing_columns(conn)
                _create_results_view(conn)
            return
        except (OperationalError, ProgrammingError):
            if attempt == 2:
                raise


_VIEWS = (("results", RESULTS_COLUMNS, results_view_sql), ("cell_summary", SUMMARY_COLUMNS, cell_summary_sql))


def _outdated(bind: Any) -> bool:
    """Whether a table, a column or a view of this version is missing, or a view is stale."""
    insp = inspect(bind)
    for name, tbl in Base.metadata.tables.items():
        if not insp.has_table(name):
            return True
        if set(tbl.columns.keys()) - {c["name"] for c in insp.get_columns(name)}:
            return True
    views = insp.get_view_names()
    return any(name not in views or tuple(c["name"] for c in insp.get_columns(name)) != columns
               for name, columns, _ in _VIEWS)


def _add_missing_columns(conn: Connection) -> None:
    """Adds the nullable columns a newer version defined to an older database's tables."""
    insp = inspect(conn)
    for name, tbl in Base.metadata.tables.items():
        have = {c["name"] for c in insp.get_columns(name)}
        for col in tbl.columns:
            if col.name in have:
                continue
            if not col.nullable:
                raise RuntimeError(f"table {name} lacks the NOT NULL column {col.name} of schema "
                                   f"{SCHEMA_VERSION}; migrate it by hand or start a fresh database file")
            q = conn.dialect.identifier_preparer.quote
            conn.exec_driver_sql(f"ALTER TABLE {q(name)} ADD COLUMN {q(col.name)} "
                                 f"{col.type.compile(conn.dialect)}")


def _create_results_view(conn: Connection) -> None:
    """Creates the views, rebuilding one whose columns an older version defined differently."""
    insp = inspect(conn)
    views = insp.get_view_names()
    for name, columns, sql in _VIEWS:
        if name in views:
            if tuple(c["name"] for c in insp.get_columns(name)) == columns:
                continue
            conn.exec_driver_sql(f"DROP VIEW {name}")
        conn.exec_driver_sql(f"CREATE VIEW {name} AS\n" + sql(conn.dialect))
