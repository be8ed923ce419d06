"""kept_lines: what `results --csv` writes of a run that never changes, in the CSV's order (issue 36).

A million-run CSV spent SQLite's time sorting each (framework, model, dataset) and reading the
`cells` table at random to format every run's settings again. Each run's name and its cell's
settings never change once written: they are kept here, as values indexed in the CSV's order
and as csv's text (store/kept_lines.py). Built for the runs there by kept_lines.rebuild, the
one function a later revision calls to build it again. The table is this code's declaration (as
0019's kept_metrics). Views unchanged.
"""
from alembic import op
from sqlalchemy.schema import CreateTable

from orchestrator.store import kept_lines

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()): unchanged.
views_sha256 = "db75356577385e2d"


def upgrade() -> None:
    conn = op.get_bind()
    conn.execute(CreateTable(kept_lines.KeptLines))
    kept_lines.rebuild(conn)
    for index in kept_lines.KeptLines.indexes:  # after the rows: one sort, not a million inserts into it
        index.create(conn)


def downgrade() -> None:
    op.drop_table("kept_lines")
