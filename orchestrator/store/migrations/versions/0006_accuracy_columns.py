"""Accuracy mode: its settings as columns of `cells`, its metrics and mode in the `results` view.

`cells` gains `mode` (throughput | accuracy), `epochs` and `target_accuracy`, nullable: cells made
before accuracy mode have none, and a throughput cell has no epochs or target. `results` gains
`mode` (the cell's, else accuracy where the run measured a test top-1, else throughput) and the
accuracy metrics' columns from metric_registry (`top1`, `top5`, `top1_best`, `epoch_s`,
`epochs_to_target`, `time_to_target_s`, `wall_to_target_s`); env.py rebuilds the views. Rows
untouched.
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "db02cf9073d48fb5"


def upgrade() -> None:
    with op.batch_alter_table("cells") as batch:
        batch.add_column(sa.Column("mode", sa.String, nullable=True))
        batch.add_column(sa.Column("epochs", sa.Integer, nullable=True))
        batch.add_column(sa.Column("target_accuracy", sa.Float, nullable=True))
