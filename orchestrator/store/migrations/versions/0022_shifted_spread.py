"""The spread of a cell's repeats from their distances to its lowest (cell_stats.stats): the views'
sd, and `kept_summary` rebuilt with it.

Sums of squares of the values themselves cancelled where the mean dwarfs the spread (repeats of
1e9 + 1, 2 and 3 images/s had an sd of 0), and on PostgreSQL the square of a figure near 1e-300
underflowed, which the server refuses: every collect that refreshed such a cell failed. The views
are made again by every upgrade; the kept rows are computed again by the new select, in the
upgrade's remake after the last revision (`rebuilds`).
"""
revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "db75356577385e2d"
#: The kept tables the upgrade remakes once every revision has run (result_rows.remake).
rebuilds = ("kept_summary",)


def upgrade() -> None:
    """Nothing beyond the views (env.py) and the kept rows (`rebuilds`)."""


def downgrade() -> None:
    """The kept rows stay as this revision computed them: the older spread was the wrong one."""
