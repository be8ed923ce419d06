"""compile=native|eager|compiled and batch_size=auto (issue 38): `cells` and `kept_summary` gain
`compile` and `batch_search`, and kept_metrics (the `results` view) `auto_batch`.

A cell at `native` (each framework's usual form, as every cell made before) and at a fixed batch
stores null for both, so every cell keeps its id and its row. kept_summary's order index takes the new setting and is filled again
by the view's own select, and kept_metrics too (0017, 0019 and 0020 leave both empty: their selects read
the columns added since). env.py rebuilds the views.
"""
import sqlalchemy as sa
from alembic import op

from orchestrator.store import result_rows, schema

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None
ADDED = ("compile", "batch_search")

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "b94a2a464a0e7e97"


def upgrade() -> None:
    for table in ("cells", "kept_summary"):
        for name in ADDED:
            op.add_column(table, sa.Column(name, sa.String, nullable=True))
    op.add_column("kept_metrics", sa.Column("auto_batch", sa.Float, nullable=True))
    op.drop_index("ix_kept_summary_order", "kept_summary")
    op.create_index("ix_kept_summary_order", "kept_summary", [*schema.SUMMARY_CELL, "cell"])
    result_rows.rebuild_summary(op.get_bind())
    result_rows.rebuild_metrics(op.get_bind())


def downgrade() -> None:
    """What the upgrade added, taken away (the views first dropped by the caller)."""
    op.drop_index("ix_kept_summary_order", "kept_summary")
    op.execute("ALTER TABLE kept_metrics DROP COLUMN auto_batch")
    for table in ("cells", "kept_summary"):
        for name in ADDED:
            op.execute(f"ALTER TABLE {table} DROP COLUMN {name}")
    op.create_index("ix_kept_summary_order", "kept_summary",
                    [*(name for name in schema.SUMMARY_CELL if name not in ADDED), "cell"])
