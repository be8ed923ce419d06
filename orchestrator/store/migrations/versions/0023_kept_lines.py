"""kept_lines: what `results --csv` writes of a run that never changes, in the CSV's order (issue 36).

A million-run CSV spent SQLite's time sorting each (framework, model, dataset) and reading the
`cells` table at random to format every run's settings again. Each run's name and its cell's
settings never change once written: they are kept here, as values indexed in the CSV's order
and as csv's text (store/kept_lines.py). The table and its rows come from the upgrade's remake
after the last revision (`rebuilds`: migrations/__init__.py says why), so a later revision's
setting is one of its columns already. Views unchanged.
"""
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()): unchanged.
views_sha256 = "db75356577385e2d"
#: The kept tables the upgrade remakes once every revision has run (result_rows.remake).
rebuilds = ("kept_lines",)


def upgrade() -> None:
    """Nothing here: the remake makes the table (as schema.py declares it then) and fills it."""


def downgrade() -> None:
    op.drop_table("kept_lines")
