"""Who submitted each sweep and run, and from which host: `sweeps` and `runs` gain `submit_user` and
`submit_host`, and the `results` view shows them (issue 30: a group sharing one database asks
`results --where user=alice`, which `--where` reads as submit_user).

Sweeps and runs recorded before stay null: their submitter was never written down, and a guess
(the user upgrading the file) would be wrong for every other member of a group. env.py rebuilds
the views.
"""
import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "05c2fba3b0ea8a4c"


def upgrade() -> None:
    for table in ("sweeps", "runs"):
        op.add_column(table, sa.Column("submit_user", sa.String, nullable=True))
        op.add_column(table, sa.Column("submit_host", sa.String, nullable=True))


def downgrade() -> None:
    """What the upgrade added, taken away (the views first dropped by the caller)."""
    for table in ("sweeps", "runs"):
        for name in ("submit_user", "submit_host"):
            op.execute(f"ALTER TABLE {table} DROP COLUMN {name}")
