"""The views follow the metric registry and the one latest-attempt query; no table changes.

`cell_summary` takes the latest attempt of each repeat (db.latest_runs) when that attempt is
done, where the release before took each repeat's latest *done* attempt, so a repeat whose
newest attempt failed or is still running no longer counts an older measurement. `results`
shows its metric columns in metric_registry's order. Both are rebuilt by env.py.
"""

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "b1054cbd1731d727"


def upgrade() -> None:
    pass  # the views are rebuilt after every upgrade (env.py)
