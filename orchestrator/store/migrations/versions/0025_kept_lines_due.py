"""kept_lines_due: the runs without their kept_lines row (issue 36).

A launch no longer writes its runs' kept_lines rows (10,000 cells: ~0.4 s of CPU): a run gets its
row where it lands, and until then `results --csv` reads it from runs and cells, finding it here
(store/kept_lines.py: KeptLinesDue). The table and its rows come from the upgrade's remake
(`rebuilds`: migrations/__init__.py says why): none after 0023, which kept every run. Views
unchanged.
"""
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()): unchanged.
views_sha256 = "db75356577385e2d"
#: The kept tables the upgrade remakes once every revision has run (result_rows.remake).
rebuilds = ("kept_lines_due",)


def upgrade() -> None:
    """Nothing here: the remake makes the table (as schema.py declares it then) and fills it."""


def downgrade() -> None:
    op.drop_table("kept_lines_due")
