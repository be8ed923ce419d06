# Source this to point Slurm commands (and submitit) at the test cluster:
#   . slurm/env.sh
# Same effect as sourcing "$SLURM_TEST_DIR/env.sh", which slurm/start.sh writes.
export SLURM_CONF="${SLURM_TEST_DIR:-/tmp/orchestrator-slurm}/slurm.conf"
