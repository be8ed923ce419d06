"""kept_metrics.csv_text: each run's metric fields as `results --csv` writes them (issue 36).

`results --csv` formatted 61 Python values a row (28 s of CPU at a million runs); the metric
floats, whose text only Python's repr gives, are now written once as they land, by csv itself
(store/csv_lines.py), and the CSV's lines are text the database joins. The column added here;
its text for the runs already there comes from the upgrade's remake (`rebuilds`). Views unchanged.
"""
import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()): unchanged.
views_sha256 = "7ea9a9cc5fe42974"
#: The kept tables the upgrade remakes once every revision has run (result_rows.remake).
rebuilds = ("kept_metrics",)


def upgrade() -> None:
    op.add_column("kept_metrics", sa.Column("csv_text", sa.String))


def downgrade() -> None:
    with op.batch_alter_table("kept_metrics") as batch:
        batch.drop_column("csv_text")
