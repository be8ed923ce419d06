"""Baseline: the tables of the last release without migrations (5f8e814, its "schema 2").

A database that release made has all of them and no version table; this revision finds
nothing to do there, and the revision is recorded. One made by the release before it (its
"schema 1") lacks sweep_cells.config and the runs' provenance columns: they are added, nullable,
as that release did. An empty database gets every table. Rows are never touched.
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_layout = sa.MetaData()
sa.Table(
    "sweeps", _layout,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("argv", sa.JSON, nullable=False),
    sa.Column("overrides", sa.JSON, nullable=False),
    sa.Column("n_cells", sa.Integer, nullable=False),
    sa.Column("note", sa.String),
)
sa.Table(
    "cells", _layout,
    sa.Column("id", sa.String, primary_key=True),
    *(sa.Column(name, sa.String, nullable=False) for name in ("framework", "model", "dataset")),
    sa.Column("like", sa.String),
    sa.Column("hardware", sa.String, nullable=False),
    *(sa.Column(name, sa.Integer, nullable=False) for name in ("gpus", "threads", "batch_size")),
    sa.Column("scaling", sa.String, nullable=False),
    *(sa.Column(name, sa.Integer, nullable=False) for name in ("iterations", "warmup", "seed")),
    sa.Column("precision", sa.String, nullable=False),
    sa.Column("settings", sa.JSON, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Index("ix_cells_fmd", "framework", "model", "dataset"),
)
sa.Table(
    "sweep_cells", _layout,
    sa.Column("sweep_id", sa.String, sa.ForeignKey("sweeps.id"), primary_key=True),
    sa.Column("cell_id", sa.String, sa.ForeignKey("cells.id"), primary_key=True),
    sa.Column("config", sa.JSON),
)
sa.Table(
    "runs", _layout,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uid", sa.String, nullable=False, unique=True),
    sa.Column("sweep_id", sa.String, sa.ForeignKey("sweeps.id"), nullable=False, index=True),
    sa.Column("cell_id", sa.String, sa.ForeignKey("cells.id"), nullable=False, index=True),
    sa.Column("repeat", sa.Integer, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("state", sa.String, nullable=False, index=True),
    *(sa.Column(name, sa.String) for name in ("state_detail", "job_id", "executor", "node")),
    *(sa.Column(name, sa.Float) for name in ("submitted_at", "started_at", "ended_at", "collected_at")),
    *(sa.Column(name, sa.String) for name in ("error_class", "error_message", "run_dir", "log_path",
                                              "result_path")),
    sa.Column("params", sa.Integer),
    sa.Column("framework_version", sa.String),
    # the provenance columns (added to schema-1 databases)
    sa.Column("framework_build", sa.JSON),
    sa.Column("environment", sa.String),
    sa.Column("cpu_model", sa.String),
    sa.Column("cpu_cores", sa.Integer),
    sa.Column("cpu_threads", sa.Integer),
    *(sa.Column(name, sa.String) for name in ("gpu_name", "gpu_uuids", "gpu_driver", "cuda_driver",
                                              "git_revision")),
    sa.Column("git_dirty", sa.Boolean),
    sa.Column("slurm_job_id", sa.String),
    sa.Column("exclusive", sa.Boolean),
    sa.Column("energy_method", sa.String),
    sa.Column("provenance", sa.JSON),
    # the run states of that release, as its CHECK constraint spelled them
    sa.CheckConstraint("state IN ('pending', 'submitted', 'running', 'done', 'failed', 'lost', 'cancelled')",
                       name="ck_runs_state"),
    sa.Index("ix_runs_cell_repeat", "sweep_id", "cell_id", "repeat", "attempt"),
)
sa.Table(
    "metrics", _layout,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("value", sa.Float, nullable=False),
    sa.Column("unit", sa.String),
)


def upgrade() -> None:
    bind = op.get_bind()
    insp = sa.inspect(bind)
    for table in _layout.sorted_tables:
        if not insp.has_table(table.name):
            table.create(bind)
            continue
        have = {c["name"] for c in insp.get_columns(table.name)}
        for col in table.columns:
            if col.name not in have:
                if not col.nullable:
                    raise RuntimeError(f"table {table.name} lacks its NOT NULL column {col.name}: this is "
                                       f"not a database the orchestrator made; start a fresh database file")
                op.add_column(table.name, sa.Column(col.name, col.type, nullable=True))
        for index in table.indexes:
            index.create(bind, checkfirst=True)
