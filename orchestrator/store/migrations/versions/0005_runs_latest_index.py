"""ix_runs_latest: the latest attempt of each repeat, and what `status` counts of it, from one index.

db.latest_runs groups the runs by (cell_id, repeat) for their highest attempt and joins back on
those three; `status` then counts the runs it finds by sweep, state, error class and state
detail. An index on (cell_id, repeat, attempt, sweep_id, state, error_class, state_detail)
answers all of it from the index alone, without a sort for the GROUP BY nor a visit to each
run's row (on 100,000 runs: one pass instead of three, each a fraction of the time; docs/scale.md).
An index only: rows untouched, views unchanged.
"""
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()): unchanged.
views_sha256 = "4a605cad413a86cf"


def upgrade() -> None:
    op.create_index("ix_runs_latest", "runs",
                    ["cell_id", "repeat", "attempt", "sweep_id", "state", "error_class", "state_detail"])
