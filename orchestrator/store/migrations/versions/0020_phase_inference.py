"""phase=inference (issue 38): `cells` and `kept_summary` gain `phase`, `min_batches` and `min_seconds`;
the `results` view and `kept_metrics` gain the latency columns (latency_p50_s, latency_p99_s,
latency_p999_s, latency_batches, first_batch_s, below_rule).

A cell in the train phase stores null for all three (the phase's default; the rule is inference's), so
every cell made before keeps its id and its row. kept_summary's order index takes the new settings; both
kept tables are filled by 0021 (their selects read `compile`, which that revision adds). env.py rebuilds
the views.
"""
import sqlalchemy as sa
from alembic import op

from orchestrator.store import schema

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "d6660c6f40b5151a"

SETTINGS = (("phase", sa.String), ("min_batches", sa.Integer), ("min_seconds", sa.Float))
#: The settings added after this revision (0021: compile), whose columns do not exist yet.
LATER = ("compile", "batch_search")
METRIC_COLUMNS = ("latency_p50_s", "latency_p99_s", "latency_p999_s", "latency_batches", "first_batch_s",
                  "below_rule")


def upgrade() -> None:
    for table in ("cells", "kept_summary"):
        for name, kind in SETTINGS:
            op.add_column(table, sa.Column(name, kind, nullable=True))
    for name in METRIC_COLUMNS:
        op.add_column("kept_metrics", sa.Column(name, sa.Float, nullable=True))
    op.drop_index("ix_kept_summary_order", "kept_summary")
    op.create_index("ix_kept_summary_order", "kept_summary", [*(n for n in schema.SUMMARY_CELL if n not in LATER),
                                                             "cell"])


def downgrade() -> None:
    """What the upgrade added, taken away (the views first dropped by the caller)."""
    op.drop_index("ix_kept_summary_order", "kept_summary")
    for name in METRIC_COLUMNS:
        op.execute(f"ALTER TABLE kept_metrics DROP COLUMN {name}")
    for table in ("cells", "kept_summary"):
        for name, _ in SETTINGS:
            op.execute(f"ALTER TABLE {table} DROP COLUMN {name}")
    added = {name for name, _ in SETTINGS} | set(LATER)
    op.create_index("ix_kept_summary_order", "kept_summary",
                    [*(name for name in schema.SUMMARY_CELL if name not in added), "cell"])
