"""compile=native|eager|compiled and batch_size=auto (issue 38): `cells` gains `compile` and
`batch_search`, the `results` view and kept_metrics `auto_batch`, the summary the two settings.

A cell at `native` (each framework's usual form, as every cell made before) and at a fixed batch
stores null for both, so every cell keeps its id and its row. The kept tables gain their columns
by the upgrade's remake after the last revision (`rebuilds`). env.py rebuilds the views.
"""
import sqlalchemy as sa
from alembic import op

from orchestrator.store import migrations

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "242b3e1be1ec8092"
#: The kept tables the upgrade remakes once every revision has run (result_rows.remake).
rebuilds = ("kept_summary", "kept_metrics", "kept_lines")
#: The settings it adds, each a nullable `cells` column (migrations.add_settings).
COLUMNS = (("compile", sa.String), ("batch_search", sa.String))


def upgrade() -> None:
    migrations.add_settings(op, COLUMNS)


def downgrade() -> None:
    migrations.drop_settings(op, COLUMNS)
