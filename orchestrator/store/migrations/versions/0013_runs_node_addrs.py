"""Where a run's nodes were (issue 26): `runs` gains `node_addrs`, each node's address (Slurm's
NodeAddr, result.json's `nodes[].addr`) in rank order, comma-separated; null for a run on one node.

The report reads it to tell a run whose nodes shared one host (the test cluster's emulated nodes,
all 127.0.0.1), whose scaling efficiency says nothing about a network, from one across real
nodes. Runs collected before stay null: the report says nothing of a placement it does not
know. The views read the latest runs (all their columns), so env.py rebuilds them.
"""
import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

#: The views this revision defines (orchestrator.store.migrations.views_sha256()).
views_sha256 = "75ba5e0e712f6ae1"


def upgrade() -> None:
    op.add_column("runs", sa.Column("node_addrs", sa.String, nullable=True))


def downgrade() -> None:
    """What the upgrade added, taken away (the views first dropped by the caller)."""
    op.execute("ALTER TABLE runs DROP COLUMN node_addrs")
