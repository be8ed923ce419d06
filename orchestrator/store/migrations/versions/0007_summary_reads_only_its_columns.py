"""The `cell_summary` view reads only the columns it uses (db.results_columns), not the whole
`results` view: each metric it needs is joined by (run_id, name), the metrics' primary key, for the
latest attempts only, instead of pivoting every metric row of every run (1.1 million rows at
100,000 runs: docs/scale.md). Same columns, same values; env.py rebuilds the views. Rows untouched.
"""
revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "03fb3d0929e0dc88"


def upgrade() -> None:
    pass  # the views only: rebuilt by env.py after every upgrade
