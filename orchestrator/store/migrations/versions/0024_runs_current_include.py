"""ix_runs_current with its INCLUDE (id) on PostgreSQL, where an earlier 0021 made it without.

0021 made the index from schema.py's Index, which carries its PostgreSQL INCLUDE only in a process
that made a `runs` table (schema._where_on_postgresql): a database upgraded past 0021 before that
revision named the INCLUDE itself has the index without it, and no later revision touched it. Made
again here as schema.py declares it, on PostgreSQL alone (SQLite has no INCLUDE). Views unchanged.
"""
from alembic import op

from orchestrator.store import schema

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()): unchanged.
views_sha256 = "db75356577385e2d"

#: The index made again, and its columns as 0021 gives them.
INDEX = "ix_runs_current"
COLUMNS = ["latest", "sweep_id", "state", "error_class", "state_detail"]


def upgrade() -> None:
    """Only where the index lacks its INCLUDE: a database 0021 made it right for is left as it is
    (making the index again reads every run, under a lock of `runs`)."""
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    made = bind.exec_driver_sql("SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                                f"AND indexname = '{INDEX}'").scalar()
    if made is None or " INCLUDE " not in made:
        op.execute(f"DROP INDEX IF EXISTS {INDEX}")
        op.create_index(INDEX, "runs", COLUMNS, postgresql_include=schema.INCLUDED[INDEX])


def downgrade() -> None:
    """Nothing: the index with its INCLUDE is what 0021 makes now."""
