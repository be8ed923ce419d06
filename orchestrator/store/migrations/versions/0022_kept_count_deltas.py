"""kept_count_deltas: the counts `status` reads, kept on PostgreSQL too (issue 36).

On PostgreSQL `kept_counts` stayed empty (row triggers on shared counter rows would let two
collectors deadlock) and `status` counted a million runs' index. Here writers only INSERT, one
row per key each statement on `runs` moved, by statement-level triggers (orchestrator.store.kept_counts
says why and how they are summed); readers sum the rows. The table on every database, its
function, triggers and first rows (the runs already there, counted) on PostgreSQL. Views unchanged.
"""
from alembic import op

from orchestrator.store import kept_counts, schema

revision = "0022"
down_revision = "0019"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()): unchanged.
views_sha256 = "7ea9a9cc5fe42974"


def upgrade() -> None:
    schema.KeptCountDelta.__table__.create(op.get_bind())  # as db.py's tables define it
    kept_counts.create_deltas(op.execute, op.get_bind().dialect.name, count=True)


def downgrade() -> None:
    kept_counts.drop_deltas(op.execute, op.get_bind().dialect.name)
    op.drop_table("kept_count_deltas")
