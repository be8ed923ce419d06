#!/usr/bin/env bash
# The README's second command: set up everything the tests need, then run them.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# Every framework's trainer environment, exactly as a job makes it (reused when already there).
"$ROOT/scripts/frameworks.sh" || echo "[test] WARNING: some trainer environments are not ready (see above); their tests will say so" >&2
# The container images of torch and CNTK (tests/test_container.py), from the same recipes (reused when unchanged).
"$ROOT/scripts/images.sh" || echo "[test] WARNING: the container images are not ready; the container tests will skip" >&2
# The real four-node Slurm cluster of slurm/ (needs root; the Slurm tests skip loudly without it).
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
# The private PostgreSQL server of scripts/postgres.sh: the database tests run on it as well as on
# SQLite (tests/conftest.py `db_url`; they skip loudly without it). Installing needs root.
started_postgres=""
if ORCHESTRATOR_TEST_POSTGRES="$(bash "$ROOT/scripts/postgres.sh" url 2>/dev/null | tail -n1)" \
    && [ -n "$ORCHESTRATOR_TEST_POSTGRES" ]; then
  echo "[test] using the running test PostgreSQL server ($ORCHESTRATOR_TEST_POSTGRES)"
  export ORCHESTRATOR_TEST_POSTGRES
elif [ "$(id -u)" = 0 ]; then
  if ORCHESTRATOR_TEST_POSTGRES="$(bash "$ROOT/scripts/postgres.sh" start | tail -n1)" \
      && [ -n "$ORCHESTRATOR_TEST_POSTGRES" ]; then
    started_postgres=1
    export ORCHESTRATOR_TEST_POSTGRES
  else
    unset ORCHESTRATOR_TEST_POSTGRES
    echo "[test] WARNING: the test PostgreSQL server did not start; the PostgreSQL tests will skip" >&2
  fi
else
  unset ORCHESTRATOR_TEST_POSTGRES
  echo "[test] WARNING: not root and no test PostgreSQL server; the PostgreSQL tests will skip" \
       "(run as root, or start it yourself: sudo scripts/postgres.sh start)" >&2
fi
# GlusterFS, one volume mounted twice (scripts/sharedfs.sh): two login nodes sharing one results file
# (tests/test_shared_fs.py; it skips loudly without it). Needs root and /dev/fuse.
started_sharedfs=""
if bash "$ROOT/scripts/sharedfs.sh" status >/dev/null 2>&1; then
  echo "[test] using the running shared file system (scripts/sharedfs.sh)"
elif [ "$(id -u)" = 0 ]; then
  if bash "$ROOT/scripts/sharedfs.sh" start >/dev/null; then
    started_sharedfs=1
  else
    echo "[test] WARNING: the shared file system did not start; its test will skip" >&2
  fi
else
  echo "[test] WARNING: not root, so no shared file system; its test will skip" \
       "(run as root, or: sudo scripts/sharedfs.sh start)" >&2
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
[ -z "$started_sharedfs" ] || bash "$ROOT/scripts/sharedfs.sh" stop >/dev/null 2>&1 || true
[ -z "$started_postgres" ] || bash "$ROOT/scripts/postgres.sh" stop >/dev/null 2>&1 || true
exit $status
