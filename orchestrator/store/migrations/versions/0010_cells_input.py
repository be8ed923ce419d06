"""cells.input and the `results` view's `input` column: how a cell's timed steps take their batches.

`input=pipeline` (issue 15) times each step's read from the ImageNet loader; `memory` (null, the
default) prepares the batches before. Cells made since the setting existed kept it only in their
`settings` JSON; this copies it into the column, so `results --where input=pipeline` and the
results view compare the two. Cells from before the setting stay null (memory). env.py rebuilds
the views.
"""
import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "184dba7efaf20660"


def upgrade() -> None:
    op.add_column("cells", sa.Column("input", sa.String, nullable=True))
    cells = sa.table("cells", sa.column("id", sa.String), sa.column("settings", sa.JSON),
                     sa.column("input", sa.String))
    conn = op.get_bind()
    named = conn.execute(sa.select(cells.c.id, cells.c.settings)
                         .where(sa.cast(cells.c.settings, sa.String).like('%"input"%'))).all()
    updates = [{"cell": cid, "value": settings.get("input")} for cid, settings in named
               if isinstance(settings, dict) and settings.get("input") not in (None, "memory")]
    if updates:
        conn.execute(cells.update().where(cells.c.id == sa.bindparam("cell")).values(input=sa.bindparam("value")),
                     updates)


def downgrade() -> None:
    """What the upgrade added, taken away (the views first dropped by the caller)."""
    op.execute("ALTER TABLE cells DROP COLUMN input")
