"""kept_summary: `cell_summary`'s row of each cell, kept as runs land (issue 36).

`results --summary` ranked every latest run to find each cell's median: 15 s over a million runs.
The collector (and a launch's new attempts, and a copy) now refresh the rows of the cells whose
runs they change, in the same transaction (result_rows.refresh_summary), and `results --summary`
reads a page of this table in its order (ix_kept_summary_order) and counts its noisy cells
from ix_kept_summary_cv. Built here for the runs already
there, by the view's own select. Views unchanged.
"""
import sqlalchemy as sa
from alembic import op

from orchestrator.store import result_rows, schema

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()): unchanged.
views_sha256 = "7ea9a9cc5fe42974"


def upgrade() -> None:
    """The table with the settings `cells` has at this revision: a setting a later revision adds
    (0020's seq_len) is added to it, and the rows built, by that revision (the select reads every
    setting schema.py declares now, which these cells do not have yet)."""
    settings = {c.name: c.type for c in schema.KeptSummary.__table__.c}
    present = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("cells")}
    cell = [name for name in schema.SUMMARY_CELL if name in present]
    op.create_table(
        "kept_summary",
        sa.Column("cell", sa.String, sa.ForeignKey("cells.id"), primary_key=True),
        *(sa.Column(name, settings[name]) for name in cell),
        sa.Column("n", sa.Integer, nullable=False),
        *(sa.Column(name, sa.Float) for name in schema.KEPT_COLUMNS[len(schema.SUMMARY_CELL) + 2:]),
    )
    op.create_index("ix_kept_summary_order", "kept_summary", [*cell, "cell"])
    op.create_index("ix_kept_summary_cv", "kept_summary", ["images_per_sec_cv"])
    if len(cell) == len(schema.SUMMARY_CELL):
        result_rows.rebuild_summary(op.get_bind())


def downgrade() -> None:
    op.drop_index("ix_kept_summary_cv", "kept_summary")
    op.drop_index("ix_kept_summary_order", "kept_summary")
    op.drop_table("kept_summary")
