"""refusals: the cells a sweep's expansion refused, with the reason (issue 14).

A cell its hardware or its framework cannot hold (`gpus=2` on a CPU node, a framework whose GPU
build needs a newer GPU, a bad value only that cell has) never becomes a cell, a run or a job;
until now the launcher only printed it. A report names every cell of a study, and one that was
refused reads `n/a` with the reason, so the launcher records each here: the override line, the
reason as it printed it, and what the config said of the cell's settings as far as it resolved
(columns for those a report groups by; the whole best-effort record in `settings`). A new table
only: rows elsewhere untouched.
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()): unchanged.
views_sha256 = "4a605cad413a86cf"


def upgrade() -> None:
    op.create_table(
        "refusals",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("sweep_id", sa.String, sa.ForeignKey("sweeps.id"), nullable=False),
        sa.Column("overrides", sa.String, nullable=False),
        sa.Column("reason", sa.String, nullable=False),
        *(sa.Column(name, sa.String) for name in ("framework", "model", "dataset", "hardware")),
        *(sa.Column(name, sa.Integer) for name in ("gpus", "threads", "batch_size")),
        sa.Column("precision", sa.String),
        sa.Column("settings", sa.JSON),
    )
    op.create_index("ix_refusals_sweep_id", "refusals", ["sweep_id"])
