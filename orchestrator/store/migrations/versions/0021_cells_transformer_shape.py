"""The Transformer language model (issue 37): `cells` and `kept_summary` gain `layers`, `width` and
`heads` (a Transformer's shape; its context is 0020's seq_len), and the views show them.

Every cell made before this revision is another network's, which has no such shape: it stores
null, so its id and its rows are unchanged. kept_summary's order index covers every setting, so it
is made again with the new columns and the kept rows built again. env.py rebuilds the views.
"""
import sqlalchemy as sa
from alembic import op

from orchestrator.store import result_rows, schema
from trainers.common.settings import TRANSFORMER_SHAPE

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "2b99ee7a69efbac0"


def _columns(table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    for table in ("cells", "kept_summary"):
        for column in TRANSFORMER_SHAPE:
            if column not in _columns(table):
                op.add_column(table, sa.Column(column, sa.Integer, nullable=True))
    op.drop_index("ix_kept_summary_order", "kept_summary")
    op.create_index("ix_kept_summary_order", "kept_summary", [*schema.SUMMARY_CELL, "cell"])
    result_rows.rebuild_summary(op.get_bind())


def downgrade() -> None:
    """What the upgrade added, taken away (the views first dropped by the caller)."""
    op.drop_index("ix_kept_summary_order", "kept_summary")
    for table in ("cells", "kept_summary"):
        for column in TRANSFORMER_SHAPE:
            op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    op.create_index("ix_kept_summary_order", "kept_summary",
                    [c for c in (*schema.SUMMARY_CELL, "cell") if c not in TRANSFORMER_SHAPE])
