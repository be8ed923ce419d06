"""kept_metrics: each run's metrics pivoted into the `results` view's columns, kept as they land (issue 36).

`results --csv` pivoted 11 million metrics rows into columns for a million runs (25 look-ups, or
a grouping, per run: most of its 47 s of CPU). The collector and a copy now pivot the runs whose
metrics rows they write, in the same transaction (result_rows.keep_metrics), and the CSV reads one
row per run by its key. Built here for the runs already there, by the view's own pivot. Views
unchanged.
"""
import sqlalchemy as sa
from alembic import op

from orchestrator import metric_registry

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()): unchanged.
views_sha256 = "7ea9a9cc5fe42974"


#: The view columns added after this revision (0020: inference's latencies; 0021: auto_batch), which those add
#: to the table before it fills it.
LATER = ("latency_p50_s", "latency_p99_s", "latency_p999_s", "latency_batches", "first_batch_s", "below_rule",
         "auto_batch")


def upgrade() -> None:
    op.create_table(
        "kept_metrics",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True,
                  autoincrement=False),
        *(sa.Column(m.column, sa.Float) for m in metric_registry.VIEW_METRICS if m.column not in LATER),
    )
    # filled by 0021, whose pivot reads the settings and metrics added since


def downgrade() -> None:
    op.drop_table("kept_metrics")
