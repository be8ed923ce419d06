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
`open_db` only creates what is missing (`CREATE TABLE/VIEW IF NOT EXISTS`) and never alters an
existing table or view, so a change to a column or to the view's SQL needs a new version and a
migration (or a fresh database file).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from sqlalchemy import (
    JSON,
    CheckConstraint,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    create_engine,
    event,
    inspect,
)
from sqlalchemy.engine import Connection, Dialect, make_url
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, sessionmaker, validates
from sqlalchemy.sql import column, table

#: Version of the layout below; bump it (and add a migration) whenever a table or the view changes.
SCHEMA_VERSION = 1

#: A run's life: pending = recorded, not yet handed to the executor.
RUN_STATES = ("pending", "submitted", "running", "done", "failed", "lost", "cancelled")
#: States a run does not leave on its own.
FINAL_STATES = ("done", "failed", "lost", "cancelled")

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

    sweep: Mapped[Sweep] = relationship(back_populates="runs")
    cell: Mapped[Cell] = relationship()
    metrics: Mapped[list["Metric"]] = relationship(back_populates="run", cascade="all, delete-orphan")

    __table_args__ = (
        CheckConstraint(
            "state IN (" + ", ".join(f"'{s}'" for s in RUN_STATES) + ")", name="ck_runs_state"),
        Index("ix_runs_cell_repeat", "sweep_id", "cell_id", "repeat", "attempt"),
    )

    @validates("state")
    def _check_state(self, key: str, state: str) -> str:
        if state not in RUN_STATES:
            raise ValueError(f"run state {state!r} is not one of {', '.join(RUN_STATES)}")
        return state


class Metric(Base):
    """One named number a run measured (names and units: metrics.METRIC_UNITS)."""

    __tablename__ = "metrics"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[float] = mapped_column(Float)
    unit: Mapped[Optional[str]] = mapped_column(String, nullable=True)

    run: Mapped[Run] = relationship(back_populates="metrics")


#: The `results` view's columns, in order; metric columns are pivoted from the metrics table.
RESULTS_COLUMNS = (
    "run", "sweep", "cell", "repeat", "attempt", "state", "framework", "model", "dataset",
    "hardware", "gpus", "threads", "batch_size", "precision", "params",
    "images_per_sec", "images_per_sec_median", "images_per_sec_std", "images_per_sec_mad",
    "cpu_percent", "peak_rss_mb", "gpu_mem_peak_mb", "gpu_power_avg_w", "energy_j",
    "energy_per_image_j", "node", "error_class", "error_message", "log_path",
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
                "log_path": "r.log_path"}
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
    if create:
        _create_schema(engine)
    elif not inspect(engine).has_table("runs"):
        engine.dispose()
        raise NoDatabase(f"{path or url} holds no orchestrator tables")
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
    cursor.close()


def _create_schema(engine: Engine) -> None:
    """Creates what is missing, safely when two processes open a fresh database together.

    `create_all` looks, then creates; two processes doing that at once can both find a table
    missing. On SQLite the creator first takes the write lock (BEGIN IMMEDIATE), so the other
    waits and then finds everything in place; elsewhere the loser's "already exists" error is
    retried once.
    """
    insp = inspect(engine)
    if all(insp.has_table(t) for t in Base.metadata.tables) and "results" in insp.get_view_names():
        return
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            Base.metadata.create_all(conn)
            _create_results_view(conn)
            conn.commit()
        return
    for attempt in (1, 2):
        try:
            with engine.begin() as conn:
                Base.metadata.create_all(conn)
                _create_results_view(conn)
            return
        except (OperationalError, ProgrammingError):
            if attempt == 2:
                raise


def _create_results_view(conn: Connection) -> None:
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("CREATE VIEW IF NOT EXISTS results AS\n" + results_view_sql(conn.dialect))
    elif "results" not in inspect(conn).get_view_names():
        conn.exec_driver_sql("CREATE VIEW results AS\n" + results_view_sql(conn.dialect))
