"""ix_runs_uncollected, ix_runs_landed: what `collect` must look at, from two small indexes (issue 35).

`collect` looks into a sweep's folder under runs/ only where the launcher recorded the sweep and
some run of it is not yet collected (collector.collect): a project's runs/ keeps every earlier
sweep's result files, and walking them all on a network file system took minutes at 20,000 runs.
A partial index on runs(sweep_id) where collected_at is null holds only the runs still to be
collected, so that question reads a few index entries instead of every run's row. Before it reads
a batch of result files it asks which of them are landed (another collector started at once may
have landed them): a partial index on runs(result_path) where collected_at is not null answers
from the index alone. Indexes only: rows untouched, views unchanged.
"""
import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()): unchanged.
views_sha256 = "7ea9a9cc5fe42974"


def upgrade() -> None:
    where = sa.text("collected_at IS NULL")
    op.create_index("ix_runs_uncollected", "runs", ["sweep_id"], sqlite_where=where, postgresql_where=where)
    where = sa.text("collected_at IS NOT NULL")
    op.create_index("ix_runs_landed", "runs", ["result_path"], sqlite_where=where, postgresql_where=where)


def downgrade() -> None:
    op.drop_index("ix_runs_landed", "runs")
    op.drop_index("ix_runs_uncollected", "runs")
