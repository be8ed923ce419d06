"""phase=inference (issue 38): `cells` gains `phase`, `min_batches` and `min_seconds`; the `results`
view and kept_metrics the latency columns (latency_p50_s, latency_p99_s, latency_p999_s,
latency_batches, first_batch_s, below_rule), the summary the three settings.

A cell in the train phase stores null for all three (the phase's default; the rule is inference's),
so every cell made before keeps its id and its row. The kept tables gain their columns by the
upgrade's remake after the last revision (`rebuilds`: migrations/__init__.py says why). env.py
rebuilds the views.
"""
import sqlalchemy as sa
from alembic import op

from orchestrator.store import migrations

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "0a197dd3372071a1"
#: The kept tables the upgrade remakes once every revision has run (result_rows.remake).
rebuilds = ("kept_summary", "kept_metrics", "kept_lines")
#: The settings it adds, each a nullable `cells` column (migrations.add_settings).
COLUMNS = (("phase", sa.String), ("min_batches", sa.Integer), ("min_seconds", sa.Float))


def upgrade() -> None:
    migrations.add_settings(op, COLUMNS)


def downgrade() -> None:
    migrations.drop_settings(op, COLUMNS)
