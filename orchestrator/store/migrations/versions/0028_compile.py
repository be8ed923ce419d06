"""compile=native|eager|compiled and batch_size=auto (issue 38): `cells` gains `compile` and
`batch_search`, the `results` view and kept_metrics `auto_batch`, the summary the two settings.

A cell at `native` (each framework's usual form, as every cell made before) and at a fixed batch
stores null for both, so every cell keeps its id and its row. The kept tables gain their columns
by the upgrade's remake after the last revision (`rebuilds`). env.py rebuilds the views.
"""
import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "242b3e1be1ec8092"
#: The kept tables the upgrade remakes once every revision has run (result_rows.remake).
rebuilds = ("kept_summary", "kept_metrics")

ADDED = ("compile", "batch_search")


def upgrade() -> None:
    for name in ADDED:
        op.add_column("cells", sa.Column(name, sa.String, nullable=True))


def downgrade() -> None:
    """The columns taken away (the views first dropped by the caller); the kept tables keep theirs
    until the next upgrade remakes them."""
    for name in ADDED:
        op.execute(f"ALTER TABLE cells DROP COLUMN {name}")
