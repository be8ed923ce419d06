"""The `results` view holds every setting's value, defaults included (issue 35): a cell at a
setting's declared default stores None (its id is as it was before the setting existed), which the
view showed as it was, so a one-node run had `nodes` NULL and `where nodes = 1` found nothing. The
view now fills in each setting's `default` from setting_registry (`nodes` 1, `input` memory) and has a
column for every setting (`like`, `scaling`, `iterations`, `warmup`, `seed`, `epochs`,
`target_accuracy` too), so `results` can show the ones that vary; `cell_summary` has every setting
too, filled the same way (two cells differing in `iterations` alone must not look alike). A filled
column keeps its type (a cast), so SQLite compares `nodes = '2'` as a number, as PostgreSQL does.

No table changes: the cells keep None, so their ids and rows are unchanged; env.py rebuilds the views.
"""
revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "7ea9a9cc5fe42974"


def upgrade() -> None:
    """Nothing beyond the views, which env.py drops before and creates after every upgrade."""


def downgrade() -> None:
    """Nothing to take away: the caller drops the views, and the one before rebuilds its own."""
