#!/usr/bin/env bash
# The README's second command: set up everything the tests need, then run them.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# Every framework's trainer environment, exactly as a job makes it (reused when already there).
"$ROOT/scripts/frameworks.sh" || echo "[test] WARNING: some trainer environments are not ready (see above); their tests will say so" >&2
# The real single-node Slurm cluster of slurm/ (needs root; the Slurm tests skip loudly without it).
export SLURM_TEST_DIR="${SLURM_TEST_DIR:-/tmp/orchestrator-slurm}"
export SLURM_CONF="$SLURM_TEST_DIR/slurm.conf"
started_slurm=""
if bash "$ROOT/slurm/check.sh" -q 2>/dev/null; then
  echo "[test] using the running test Slurm cluster ($SLURM_CONF)"
elif [ "$(id -u)" = 0 ]; then
  if bash "$ROOT/slurm/install.sh" && bash "$ROOT/slurm/start.sh"; then
    started_slurm=1
  else
    echo "[test] WARNING: the test Slurm cluster did not start; the Slurm tests will skip" >&2
  fi
else
  echo "[test] WARNING: not root, so no test Slurm cluster; the Slurm tests will skip" \
       "(run as root, or start it yourself: sudo slurm/install.sh && sudo slurm/start.sh)" >&2
fi
status=0
python -m pytest -ra "$@" || status=$?
[ -z "$started_slurm" ] || bash "$ROOT/slurm/stop.sh" >/dev/null 2>&1 || true
exit $status
