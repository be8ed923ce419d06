"""Sequence networks (issue 37): `cells` and `kept_summary` gain `seq_len` (a sequence network's
tokens per sequence), `kept_metrics` and the `results` view `tokens_per_sec`, and the views show
them (`refusals` keeps seq_len in its settings, as every setting that is no headline).

Every cell made before this revision is an image network's, which has no sequence length: it
stores null, so its id and its rows are unchanged. kept_summary's order index covers every
setting, so it is made again with the new column. A table built by its own revision during this
same upgrade (0017, 0019) already has what schema.py declares now, or (kept_summary: 0017 builds
only the settings `cells` has at its revision) lacks it: each column is added where absent, and
the kept rows are built again here. env.py rebuilds the views.
"""
import sqlalchemy as sa
from alembic import op

from orchestrator import metric_registry
from orchestrator.store import result_rows, schema

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "2cf4194323b75079"


def _columns(table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    op.add_column("cells", sa.Column("seq_len", sa.Integer, nullable=True))
    if "seq_len" not in _columns("kept_summary"):
        op.add_column("kept_summary", sa.Column("seq_len", sa.Integer, nullable=True))
    op.drop_index("ix_kept_summary_order", "kept_summary")
    # the settings `cells` has at this revision: a later one (0021's Transformer shape) adds its own
    cell = [name for name in schema.SUMMARY_CELL if name in _columns("cells")]
    op.create_index("ix_kept_summary_order", "kept_summary", [*cell, "cell"])
    if len(cell) == len(schema.SUMMARY_CELL):
        result_rows.rebuild_summary(op.get_bind())
    missing = [m.column for m in metric_registry.VIEW_METRICS if m.column not in _columns("kept_metrics")]
    for column in missing:
        op.add_column("kept_metrics", sa.Column(column, sa.Float))
    if missing:
        result_rows.rebuild_metrics(op.get_bind())


def downgrade() -> None:
    """What the upgrade added, taken away (the views first dropped by the caller)."""
    op.drop_index("ix_kept_summary_order", "kept_summary")
    for table, column in (("cells", "seq_len"), ("kept_summary", "seq_len"), ("kept_metrics", "tokens_per_sec")):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    present = _columns("cells")
    op.create_index("ix_kept_summary_order", "kept_summary", [c for c in (*schema.SUMMARY_CELL, "cell")
                                                              if c != "seq_len" and c in present | {"cell"}])
