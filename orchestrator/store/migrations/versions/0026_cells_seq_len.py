"""Sequence networks (issue 37): `cells` gains `seq_len` (a sequence network's tokens per sequence),
the `results` view `seq_len` and `tokens_per_sec`, the summary `seq_len`.

Every cell made before this revision is an image network's, which has no sequence length: it
stores null, so its id and its rows are unchanged. The kept tables gain their columns (the
summary's `seq_len`, kept_metrics' `tokens_per_sec`) by the upgrade's remake after the last
revision (`rebuilds`: migrations/__init__.py says why). env.py rebuilds the views.

"""
import sqlalchemy as sa
from alembic import op

from orchestrator.store import migrations

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "4b599e56df6c5e18"
#: The kept tables the upgrade remakes once every revision has run (result_rows.remake).
rebuilds = ("kept_summary", "kept_metrics", "kept_lines")
#: The settings it adds, each a nullable `cells` column (migrations.add_settings).
COLUMNS = (("seq_len", sa.Integer),)


def upgrade() -> None:
    migrations.add_settings(op, COLUMNS)


def downgrade() -> None:
    migrations.drop_settings(op, COLUMNS)
