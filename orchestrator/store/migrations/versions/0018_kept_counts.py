"""kept_counts, ix_runs_open: what `status` reads over a million runs, kept small (issue 36).

kept_counts: each sweep's latest attempts counted per state and error class, kept by triggers on
`runs` (`status` counted the latest runs' index each time, ~0.2 s of CPU): the table on every
database, its triggers (orchestrator.store.kept_counts) and its rows on SQLite, built here from the
runs already there. ix_runs_open: a partial index of the open runs alone (queries.OPEN_RUNS), which
`status` reconciles (10,000 of a million were found by scanning the table). Views unchanged.
"""
import sqlalchemy as sa
from alembic import op

from orchestrator.store import kept_counts, queries

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()): unchanged.
views_sha256 = "7ea9a9cc5fe42974"


def upgrade() -> None:
    op.create_table(
        "kept_counts",
        sa.Column("sweep_id", sa.String, primary_key=True),
        sa.Column("state", sa.String, primary_key=True),
        sa.Column("error_class", sa.String, primary_key=True),
        sa.Column("n", sa.Integer, nullable=False),
    )
    kept_counts.create(op.execute, op.get_bind().dialect.name, count=True)
    where = sa.text(queries.OPEN_RUNS)
    op.create_index("ix_runs_open", "runs", ["state", "sweep_id"], sqlite_where=where, postgresql_where=where)


def downgrade() -> None:
    op.drop_index("ix_runs_open", "runs")
    kept_counts.drop(op.execute, op.get_bind().dialect.name)
    op.drop_table("kept_counts")
