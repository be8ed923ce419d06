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

from orchestrator.store import schema

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()): unchanged.
views_sha256 = "7ea9a9cc5fe42974"


#: The settings added after this revision (0020: phase=inference; 0021: compile), whose `cells` columns do
#: not exist yet: the table is made as it was, and the revisions that add them add their columns; 0021 fills it.
LATER = ("phase", "min_batches", "min_seconds", "compile", "batch_search")


def upgrade() -> None:
    settings = {c.name: c.type for c in schema.KeptSummary.__table__.c}
    then = [name for name in schema.SUMMARY_CELL if name not in LATER]
    op.create_table(
        "kept_summary",
        sa.Column("cell", sa.String, sa.ForeignKey("cells.id"), primary_key=True),
        *(sa.Column(name, settings[name]) for name in then),
        sa.Column("n", sa.Integer, nullable=False),
        *(sa.Column(name, sa.Float) for name in schema.KEPT_COLUMNS[len(schema.SUMMARY_CELL) + 2:]),
    )
    op.create_index("ix_kept_summary_order", "kept_summary", [*then, "cell"])
    op.create_index("ix_kept_summary_cv", "kept_summary", ["images_per_sec_cv"])
    # filled by 0021, once the cells have every column the summary's select reads


def downgrade() -> None:
    op.drop_index("ix_kept_summary_cv", "kept_summary")
    op.drop_index("ix_kept_summary_order", "kept_summary")
    op.drop_table("kept_summary")
