"""kept_count_deltas: the counts `status` reads, kept on PostgreSQL too (issue 36).

On PostgreSQL `kept_counts` stayed empty (row triggers on shared counter rows would let two
collectors deadlock) and `status` counted a million runs' index. Here writers only INSERT, one
row per key each statement on `runs` moved, by statement-level triggers (orchestrator.store.kept_counts
says why and how they are summed); readers sum the rows. The table on every database, its
function, triggers and first rows (the runs already there, counted) on PostgreSQL. And there
ix_runs_current carries each run's id (INCLUDE), as SQLite's indexes carry the rowid: the first
runs of each failure class `status` shows (queries.first_runs) were read from a million runs'
table, 2,625 rows a class for 3 of them (22 ms a class). Views unchanged.
"""
import sqlalchemy as sa
from alembic import op

from orchestrator.store import kept_counts, schema

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()): unchanged.
views_sha256 = "7ea9a9cc5fe42974"


def upgrade() -> None:
    schema.KeptCountDelta.__table__.create(op.get_bind())  # as db.py's tables define it
    kept_counts.create_deltas(op.execute, op.get_bind().dialect.name, count=True)
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_runs_current", "runs")
        # its INCLUDE named here: schema.py's Index gets it only where this process made a runs table
        # (schema._where_on_postgresql), so an upgrade alone made the index without it
        op.create_index("ix_runs_current", "runs", [c.name for c in _current().columns],
                        postgresql_include=schema.INCLUDED["ix_runs_current"])


def _current() -> sa.Index:
    return next(i for i in schema.Run.__table__.indexes if i.name == "ix_runs_current")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_runs_current", "runs")
        op.create_index("ix_runs_current", "runs", [c.name for c in _current().columns])
    kept_counts.drop_deltas(op.execute, op.get_bind().dialect.name)
    op.drop_table("kept_count_deltas")
