"""Cells that span nodes (issue 26): `cells` and `refusals` gain `nodes`, and the views show it.

A cell on one node stores null (the setting's default, which every cell made before this
revision is), so its id and its rows are unchanged. env.py rebuilds the views.
"""
import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "6cb7758deb86a900"


def upgrade() -> None:
    for table in ("cells", "refusals"):
        op.add_column(table, sa.Column("nodes", sa.Integer, nullable=True))


def downgrade() -> None:
    """What the upgrade added, taken away (the views first dropped by the caller)."""
    for table in ("cells", "refusals"):
        op.execute(f"ALTER TABLE {table} DROP COLUMN nodes")
