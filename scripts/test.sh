#!/usr/bin/env bash
# The README's second command: set up everything the tests need, then run them.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# Every framework's trainer environment, exactly as a job makes it (reused when already there).
"$ROOT/scripts/frameworks.sh" || echo "[test] WARNING: some trainer environments are not ready (see above); their tests will say so" >&2
# The container images of torch and CNTK (tests/test_container.py), from the same recipes (reused when unchanged).
"$ROOT/scripts/images.sh" || echo "[test] WARNING: the container images are not ready; the container tests will skip" >&2
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
# Headless Chromium (Debian's package) opens the report's page in tests/test_report.py (needs root;
# that test skips loudly without it).
if command -v chromium >/dev/null 2>&1; then
  :
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[test] installing chromium (headless browser for the report page's test)"
  { apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null; }; } \
    || echo "[test] WARNING: chromium did not install; the report page's browser test will skip" >&2
else
  echo "[test] WARNING: no chromium and not root; the report page's browser test will skip" \
       "(run as root, or: sudo apt-get install chromium)" >&2
fi
status=0
python -m pytest -ra "$@" || status=$?
[ -z "$started_slurm" ] || bash "$ROOT/slurm/stop.sh" >/dev/null 2>&1 || true
exit $status
