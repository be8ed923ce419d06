"""runs.observed_at: when the run's scheduler last answered about it.

While a scheduler does not answer, tracking changes no state; `status` then says how old the
states it shows are ("states as of HH:MM"), which this column records. Nullable: runs made
before it, and runs no scheduler follows (foreground, collected), have none.
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()): unchanged.
views_sha256 = "4a605cad413a86cf"


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("observed_at", sa.Float, nullable=True))
