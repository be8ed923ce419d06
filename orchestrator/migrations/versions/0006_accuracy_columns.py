"""Accuracy mode's columns in the `results` view; no table changes.

`results` gains `mode` (throughput or accuracy: the cell's setting where it records one, else
accuracy where the run measured a test top-1) and the accuracy metrics' columns from
metric_registry (`top1`, `top5`, `top1_best`, `epoch_s`, `epochs_to_target`, `time_to_target_s`,
`wall_to_target_s`). The views are rebuilt by env.py; rows untouched.
"""

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.migrations.views_sha256()).
views_sha256 = "3ce2e659f72e7953"


def upgrade() -> None:
    pass  # the views are rebuilt after every upgrade (env.py)
