"""Model FLOPs utilisation (issue 28): the `results` view gains the column `mfu`, the run's
images/s x training FLOPs per image (trainers/common/flops.py) over its hardware's peak FLOP/s
(conf/hardware/*.yaml `peak_tflops`), which the job computes into result.json's metrics.

No table changes: a metric is a row of `metrics`, so only the views change, and env.py rebuilds
them. Runs measured before carry no `mfu` row and show null.
"""
revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "5ed8557828bfd79f"


def upgrade() -> None:
    """Nothing beyond the views, which env.py drops before and creates after every upgrade."""


def downgrade() -> None:
    """Nothing to take away: the caller drops the views, and the one before rebuilds its own."""
