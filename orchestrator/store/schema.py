"""The results database's schema: its tables (sweeps, cells, runs and their metrics, refusals)
and the columns of its two views, declared once here as SQLAlchemy models.

db.py opens, makes and upgrades a database from these; the migrations (orchestrator/store/migrations)
build the same tables revision by revision. Both depend on this module and neither on the other,
which is why it is its own. What the views select (and every other read) is the read layer's:
cell_stats.py in SQLAlchemy Core against these tables, queries.py for `status`'s SQL text.

Two views, their columns declared here: `results`, one row per run with its metrics pivoted
into columns (names and scales: metric_registry.py), and `cell_summary`, one row per cell over
its repeats: n, median, mean, standard deviation, coefficient of variation, min and max of
images/s, and `noisy` when the CV exceeds `NOISY_CV`.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

from sqlalchemy import (JSON, Boolean, CheckConstraint, Column, Float, ForeignKey, Index, Integer, String, Table,
                        bindparam, cast, event, func, select, text, true as sa_true, update)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, validates
from sqlalchemy.sql import column, table

from orchestrator import metric_registry, runstate, setting_registry
from orchestrator.store import queries

#: The partial indexes of `runs` (migrations 0016, 0018): the runs each holds, by name. SQLite's
#: condition goes to each Index (sqlite_where); PostgreSQL's is set only where a PostgreSQL database
#: is made (_where_on_postgresql): `postgresql_where` at construction makes SQLAlchemy import its
#: whole PostgreSQL dialect, every driver's module with it, in each process that imports this
#: schema (a launch on SQLite among them: issue 36, item 6).
PARTIAL = {"ix_runs_uncollected": "collected_at IS NULL", "ix_runs_landed": "collected_at IS NOT NULL",
           "ix_runs_open": queries.OPEN_RUNS}
#: The indexes of `runs` that carry more columns on PostgreSQL (INCLUDE, migration 0021), set there
#: for the same reason as PARTIAL's conditions.
INCLUDED = {"ix_runs_current": ["id"]}

#: A cell whose repeats' coefficient of variation (std/mean of images/s) exceeds this is noisy.
NOISY_CV = 0.05


class SchemaError(RuntimeError):
    """The database is at a revision this orchestrator does not know (a newer one wrote it)."""


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
    #: Who typed it, and on which host (migration 0011): null in sweeps recorded before.
    submit_user: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    submit_host: Mapped[Optional[str]] = mapped_column(String, nullable=True)

    runs: Mapped[list["Run"]] = relationship(back_populates="sweep")


#: A setting's column type, by its declared kind.
_SQL_TYPES = {str: String, int: Integer, float: Float}


def _setting_columns(all_nullable: bool = False) -> list[Column]:
    """A column per cell setting (setting_registry), null where a cell may lack the value."""
    return [Column(s.name, _SQL_TYPES[s.kind](),
                   nullable=all_nullable or s.nullable or s.hashed != setting_registry.ALWAYS)
            for s in setting_registry.SETTINGS]


class Cell(Base):
    """One measurement's settings; the id is their hash, so equal settings share a row across sweeps.

    A column per setting (setting_registry: accuracy mode's from migration 0006, `input` from
    0010, null in cells made before), and the whole resolved settings dict, so settings added
    later are kept before they get a column."""

    __table__ = Table(
        "cells", Base.metadata,
        Column("id", String, primary_key=True),
        *_setting_columns(),
        Column("settings", JSON, nullable=False),
        Column("created_at", Float, nullable=False),
        Index("ix_cells_fmd", "framework", "model", "dataset"),
    )


class SweepCell(Base):
    """Which cells a sweep named; a cell typed again in a later sweep belongs to both."""

    __tablename__ = "sweep_cells"

    sweep_id: Mapped[str] = mapped_column(ForeignKey("sweeps.id"), primary_key=True)
    cell_id: Mapped[str] = mapped_column(ForeignKey("cells.id"), primary_key=True)
    #: The cell's whole resolved config as this sweep composed it (paths, hardware, cluster):
    #: what `orchestrator rerun` resubmits, with more time or memory if asked. Null where the
    #: sweep skipped the cell (done or in flight already): no run of this sweep needs it.
    config: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON(none_as_null=True), nullable=True)


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
    #: A run across nodes: each node's address (Slurm's NodeAddr) in rank order, comma-separated
    #: (migration 0013); null on one node. Addresses that repeat, or loopback ones, are nodes that
    #: shared one host (the test cluster's), which the report says.
    node_addrs: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    submitted_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    started_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    ended_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    #: Who submitted this attempt (its sweep's typist, or whoever reran it), and from which host
    #: (migration 0011): null in runs recorded before, and in runs only a result file told of.
    submit_user: Mapped[Optional[str]] = mapped_column(String, nullable=True)
    submit_host: Mapped[Optional[str]] = mapped_column(String, nullable=True)
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
    #: When the run's scheduler last answered about it (tracking); states are as of then.
    observed_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    exclusive: Mapped[Optional[bool]] = mapped_column(Boolean, nullable=True)
    energy_method: Mapped[Optional[str]] = mapped_column(String, nullable=True)  # counter | trapezoid
    provenance: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON, nullable=True)
    #: Whether this is the latest attempt of its (cell, repeat): the current word on that
    #: measurement, which status, rerun, reports and cell_summary read (latest_runs). Kept by
    #: mark_latest wherever runs are inserted (launch, collector).
    latest: Mapped[bool] = mapped_column(Boolean, default=True, server_default=sa_true(), nullable=False)

    sweep: Mapped[Sweep] = relationship(back_populates="runs")
    cell: Mapped[Cell] = relationship()
    metrics: Mapped[list["Metric"]] = relationship(back_populates="run", cascade="all, delete-orphan")

    __table_args__ = (
        CheckConstraint(
            "state IN (" + ", ".join(f"'{s}'" for s in runstate.STATES) + ")", name="ck_runs_state"),
        Index("ix_runs_cell_repeat", "sweep_id", "cell_id", "repeat", "attempt"),
        # latest_runs and what `status` counts of those runs, read from this index alone (migration
        # 0009); with each run's id on PostgreSQL too, as SQLite's rowid is in every index, so that
        # queries.first_runs reads no table row there either (migration 0021: 22 ms a group, 1 ms)
        Index("ix_runs_current", "latest", "sweep_id", "state", "error_class", "state_detail"),
        # the sweeps with runs still to collect, from the few runs that are (migration 0016)
        Index("ix_runs_uncollected", "sweep_id", sqlite_where=text(PARTIAL["ix_runs_uncollected"])),
        # which result files are landed, read from the index alone (migration 0016)
        Index("ix_runs_landed", "result_path", sqlite_where=text(PARTIAL["ix_runs_landed"])),
        # the open runs `status` reconciles, from an index of only them (queries.OPEN_RUNS, migration 0018)
        Index("ix_runs_open", "state", "sweep_id", sqlite_where=text(PARTIAL["ix_runs_open"])),
    )

    @validates("state")
    def _check_state(self, key: str, state: str) -> str:
        """Every write of a run's state is a move the run-state model allows (runstate.py)."""
        return runstate.check_move(self.state, state)


@event.listens_for(Run.__table__, "before_create")
def _where_on_postgresql(runs: Table, connection: Any, **_: Any) -> None:
    """The partial indexes' conditions and the included columns for PostgreSQL, given as its `runs`
    table is made (the dialect is loaded there anyway): the same every time, so a second database
    made changes nothing."""
    if connection.dialect.name == "postgresql":
        for index in runs.indexes:
            if index.name in PARTIAL:
                index.dialect_options["postgresql"]["where"] = text(PARTIAL[index.name])
            if index.name in INCLUDED:
                index.dialect_options["postgresql"]["include"] = INCLUDED[index.name]


class Metric(Base):
    """One named number a run measured (names and units: metric_registry.py)."""

    __tablename__ = "metrics"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[float] = mapped_column(Float)
    unit: Mapped[Optional[str]] = mapped_column(String, nullable=True)

    run: Mapped[Run] = relationship(back_populates="metrics")


class Refusal(Base):
    """A cell a sweep's expansion refused (its hardware or framework cannot hold it, or a bad value
    only it has): never a cell, a run or a job, recorded so that a report can say why it has no
    number. The settings are what the config said, as far as it resolved (None where it did not):
    the headline ones (setting_registry.HEADLINE) as columns, every one in `settings`."""

    __table__ = Table(
        "refusals", Base.metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("sweep_id", ForeignKey("sweeps.id"), index=True, nullable=False),
        #: The cell's override line, as the launcher printed it beside the reason.
        Column("overrides", String, nullable=False),
        Column("reason", String, nullable=False),
        *(c for c in _setting_columns(all_nullable=True) if c.name in setting_registry.HEADLINE),
        Column("settings", JSON, nullable=True),
    )


def latest_runs() -> Any:
    """The latest attempt of each repeat of each cell, as a subquery of `runs` rows.

    Attempts are numbered per (cell, repeat) across sweeps (a rerun or a forced sweep adds
    attempt n+1), so the highest attempt is the current word on that measurement. The condition
    is queries.LATEST, the one `status` asks as SQL text; `rerun`, the report and the
    `cell_summary` view read it through this: the runs whose `latest` flag mark_latest set, read
    from one index (at 100,000 runs, `status`'s counts in 0.03 s instead of 0.3 s grouping every
    attempt to find the highest).
    """
    return select(Run).where(text(queries.LATEST).bindparams(**queries.LATEST_PARAMS)).subquery("latest_runs")


def mark_latest(conn: Any, keys: Iterable[tuple[str, int]]) -> None:
    """Sets `latest` on the runs of each (cell id, repeat) in `keys`: true for its highest
    attempt, false for the others. Called in the transaction that inserted runs of those keys
    (launch, rerun, the collector's unrecorded runs), so the flag never disagrees with the
    attempts; migration 0009 set it the same way for every run before it."""
    params = [{"key_cell": cell_id, "key_repeat": repeat} for cell_id, repeat in sorted(set(keys))]
    if params:
        conn.execute(_MARK_LATEST, params)


_runs, _other = Run.__table__, Run.__table__.alias("other")
#: mark_latest's statement, one (cell, repeat) per parameter set.
_MARK_LATEST = (update(_runs)
                .where(_runs.c.cell_id == bindparam("key_cell"), _runs.c.repeat == bindparam("key_repeat"))
                .values(latest=_runs.c.attempt == select(func.max(_other.c.attempt))
                        .where(_other.c.cell_id == _runs.c.cell_id, _other.c.repeat == _runs.c.repeat)
                        .scalar_subquery()))


# --- the views' columns ------------------------------------------------------------------------
# What they select is cell_stats.py's (results_select, summary_select), compiled into CREATE VIEW
# by the migrations (migrations/env.py rebuilds them after every upgrade).

#: The `results` view's columns from runs and cells: these come before the metric columns (every
#: setting's: `mode` comes after them, the cell's or what the run measured) ...
RESULTS_HEAD = {
    "run": Run.uid, "sweep": Run.sweep_id, "cell": Run.cell_id, "repeat": Run.repeat, "attempt": Run.attempt,
    "state": Run.state, **{name: getattr(Cell, name) for name in setting_registry.NAMES if name != "mode"},
    "params": Run.params,
}
#: ... and these after them.
RESULTS_TAIL = {
    "node": Run.node, "error_class": Run.error_class, "error_message": Run.error_message,
    "log_path": Run.log_path, "energy_method": Run.energy_method, "gpu_name": Run.gpu_name,
    "framework_version": Run.framework_version, "git_revision": Run.git_revision, "git_dirty": Run.git_dirty,
    "submit_user": Run.submit_user, "submit_host": Run.submit_host,
}

#: The `results` view as a selectable (`select(results_view)`), its columns typed as their sources.
results_view = table("results", *(column(name, attr.type) for name, attr in RESULTS_HEAD.items()),
                     column("mode", String),
                     *(column(m.column, Float) for m in metric_registry.VIEW_METRICS),
                     *(column(name, attr.type) for name, attr in RESULTS_TAIL.items()))
#: The `results` view's columns, in order: a run, its cell, its metrics (metric_registry), its details.
RESULTS_COLUMNS = tuple(results_view.c.keys())


def setting_value(attr: Any) -> Any:
    """A `cells` column as the views show it: a setting's declared default (setting_registry) where
    the cell stores None for being at it (`nodes` 1, so that `where nodes = 1` finds one-node runs);
    any other column as it is. The cells keep None: their ids and rows stay as they were."""
    definition = setting_registry.BY_NAME.get(attr.key) if attr.class_ is Cell else None
    if definition is None or definition.default is None:
        return attr
    # cast: the column's type kept, so that SQLite compares `nodes = '2'` as a number, as PostgreSQL does
    return cast(func.coalesce(attr, definition.default), attr.type)


#: The cell's settings the summary shows, every one (defaults filled in), in the order it sorts on:
#: two cells that differ in `iterations` alone must not look alike.
SUMMARY_CELL = setting_registry.SORTED_BY
#: The `cell_summary` view's columns, in order.
SUMMARY_COLUMNS = (
    "cell", *SUMMARY_CELL, "n", "images_per_sec_median", "images_per_sec_mean", "images_per_sec_std",
    "images_per_sec_cv", "images_per_sec_min", "images_per_sec_max", "noisy", "gpu_power_avg_w",
    "energy_per_image_j", "gpu_mem_peak_mb",
)


#: The summary's figures kept per cell (kept_summary): every `cell_summary` column but `noisy`, which
#: the reader's threshold decides (from the kept CV: its index counts the noisy cells).
KEPT_COLUMNS = tuple(c for c in SUMMARY_COLUMNS if c != "noisy")


class KeptSummary(Base):
    """`cell_summary`'s row of each cell, kept as runs land (migration 0017): `results --summary`
    over a million runs reads a page of it in its order (ix_kept_summary_order) instead of ranking
    every run. Written only by result_rows.refresh_summary, in the transaction that changed the
    cell's runs (the collector's landing, a launch's new attempts, a copy); its settings, defaults
    filled in, are the cell's, which never change. A cell without a measured latest repeat has no row."""

    __table__ = Table(
        "kept_summary", Base.metadata,
        Column("cell", ForeignKey("cells.id"), primary_key=True),
        *(Column(c.name, c.type) for c in _setting_columns(all_nullable=True) if c.name in SUMMARY_CELL),
        Column("n", Integer, nullable=False),
        *(Column(name, Float) for name in KEPT_COLUMNS[len(SUMMARY_CELL) + 2:]),
        Index("ix_kept_summary_order", *SUMMARY_CELL, "cell"),
        Index("ix_kept_summary_cv", "images_per_sec_cv"),
    )


def _counted(key: bool) -> list[Column]:
    """A count's columns, declared once for both ways of keeping it: its sweep, state and error
    class ('' for none: a key column is never NULL), the table's key if `key`, and the number."""
    return [*(Column(name, String, primary_key=key, nullable=False) for name in ("sweep_id", "state", "error_class")),
            Column("n", Integer, nullable=False)]


class KeptCount(Base):
    """How many latest attempts each sweep has per state and error class ('' for none), kept by
    SQLite's triggers as runs change (orchestrator.store.kept_counts, migration 0018): `status`
    reads these few rows instead of counting a million runs. Empty on PostgreSQL, which keeps
    KeptCountDelta instead (why: kept_counts)."""

    __table__ = Table("kept_counts", Base.metadata, *_counted(key=True))


class KeptCountDelta(Base):
    """What a statement added to or took from a count of KeptCount's key, kept by PostgreSQL's
    statement triggers on runs (orchestrator.store.kept_counts, migration 0021): writers only
    insert rows, `status` sums them, a trigger sums them into one row per key now and then.
    Empty on SQLite."""

    __table__ = Table("kept_count_deltas", Base.metadata, Column("id", Integer, primary_key=True), *_counted(key=False))


class KeptMetrics(Base):
    """Each run's metrics pivoted into the `results` view's metric columns (divided by their
    divisors), kept as they land (migration 0019): `results --csv` over a million runs reads one
    row per run by its key instead of pivoting 11 million metric rows (25 look-ups or a grouping
    per run, most of its time). Written only by result_rows.keep_metrics, with the view's own
    pivot, in the transaction that wrote the run's metrics rows (the collector's landing, a copy).
    A run without metrics rows has no row, as it has none in the view's pivot. `csv_text`: the
    same values as csv writes them in `results --csv` (migration 0020, store/csv_lines.py), so
    that the CSV's lines are text the database joins, not Python values formatted per row."""

    __table__ = Table(
        "kept_metrics", Base.metadata,
        Column("run_id", ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True, autoincrement=False),
        *(Column(m.column, Float) for m in metric_registry.VIEW_METRICS),
        Column("csv_text", String),
    )
