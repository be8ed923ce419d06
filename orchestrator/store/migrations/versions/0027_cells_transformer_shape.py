"""The Transformer language model (issue 37): `cells` gains `layers`, `width` and `heads` (a
Transformer's shape; its context is 0026's seq_len), and the views and the summary show them.

Every cell made before this revision is another network's, which has no such shape: it stores
null, so its id and its rows are unchanged. kept_summary gains the columns (and its order index
them) by the upgrade's remake after the last revision (`rebuilds`). env.py rebuilds the views.
"""
import sqlalchemy as sa
from alembic import op

from orchestrator.store import migrations
from trainers.common.settings import TRANSFORMER_SHAPE

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "85a81a34e5c47456"
#: The kept tables the upgrade remakes once every revision has run (result_rows.remake).
rebuilds = ("kept_summary", "kept_lines")
#: The settings it adds, each a nullable `cells` column (migrations.add_settings).
COLUMNS = tuple((name, sa.Integer) for name in TRANSFORMER_SHAPE)


def upgrade() -> None:
    migrations.add_settings(op, COLUMNS)


def downgrade() -> None:
    migrations.drop_settings(op, COLUMNS)
