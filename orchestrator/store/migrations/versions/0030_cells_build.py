"""build= (issue 39): `cells` and `refusals` gain `build`, the build of the framework a cell ran
(a variant of its recipe, orchestrator/envs/builds.py); the `results` view and the summary gain it.

A cell at the `default` build (the recipe itself, as every cell made before) stores null, so every
cell keeps its id and its row. The kept tables gain their columns by the upgrade's remake after the
last revision (`rebuilds`). env.py rebuilds the views.
"""
import sqlalchemy as sa
from alembic import op

from orchestrator.store import migrations

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "ca26f407abf81dd4"
#: The kept tables the upgrade remakes once every revision has run (result_rows.remake).
rebuilds = ("kept_summary", "kept_metrics", "kept_lines")
#: The settings it adds, each a nullable `cells` column (migrations.add_settings).
COLUMNS = (("build", sa.String),)


def upgrade() -> None:
    migrations.add_settings(op, COLUMNS)
    op.add_column("refusals", sa.Column("build", sa.String, nullable=True))  # a headline setting


def downgrade() -> None:
    migrations.drop_settings(op, COLUMNS)
    op.execute("ALTER TABLE refusals DROP COLUMN build")
