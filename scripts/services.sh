# Sourced by test.sh: the real parts the tests run against, started (or found running) one by one.
#
#   start_parts [part ...]   # default: every part in PARTS; exports ORCHESTRATOR_TEST_POSTGRES, SLURM_CONF
#   stop_parts               # stops what start_parts started (never what it found running)
#
# Under CI=true (what CI services set) a part that does not start fails: start_parts returns 1 after
# trying every part, its last line naming each with its reason. Why: its tests would only skip, and a
# green run with them skipped proves nothing (tests/ci_skips.py fails such skips too). Elsewhere it
# is a warning, and those tests skip loudly. Starting needs root where a part is not yet installed.

#: The parts, in the order they start: trainer environments and images first (the slowest).
PARTS=(frameworks images slurm postgres sharedfs chromium)
STARTED=()

# Whether this is a CI run (CI=true; 1 or yes too), as tests/ci_skips.py reads it.
under_ci() { case "${CI:-}" in true|TRUE|True|1|yes) return 0 ;; *) return 1 ;; esac; }

# The last line a step said on FILE, without its `[name] ` or `[name] ERROR: ` prefix.
last_said() { tail -n1 "$1" | sed -E 's/^\[[a-z/]+\] (ERROR: |NOT READY: |not ready: )?//'; }

part_frameworks() {  # every framework's trainer environment, as a job makes it (reused when there)
  "$ROOT/scripts/frameworks.sh" 2>&1 | tee "$SAID"
}

part_images() {  # the torch and CNTK container images (tests/test_container.py), reused when unchanged
  "$ROOT/scripts/images.sh" 2>&1 | tee "$SAID"
}

part_slurm() {  # the four-node test Slurm cluster of slurm/
  export SLURM_TEST_DIR="${SLURM_TEST_DIR:-/tmp/orchestrator-slurm}"
  export SLURM_CONF="$SLURM_TEST_DIR/slurm.conf"
  if bash "$ROOT/slurm/check.sh" -q 2>/dev/null; then
    echo "[test] using the running test Slurm cluster ($SLURM_CONF)"
  elif [ "$(id -u)" != 0 ]; then
    echo "not root: start it yourself (sudo slurm/install.sh && sudo slurm/start.sh)" >"$SAID"
    return 1
  else
    { bash "$ROOT/slurm/install.sh" && bash "$ROOT/slurm/start.sh"; } 2>&1 | tee "$SAID" || return 1
    STARTED+=(slurm)
  fi
}

part_postgres() {  # the private PostgreSQL server of scripts/postgres.sh (tests/conftest.py `db_url`)
  local url
  if url="$(bash "$ROOT/scripts/postgres.sh" url 2>/dev/null | tail -n1)" && [ -n "$url" ]; then
    echo "[test] using the running test PostgreSQL server ($url)"
  else  # installs Debian's postgresql where missing (as root; elsewhere it says so)
    url="$(bash "$ROOT/scripts/postgres.sh" start 2>"$SAID" | tail -n1)"
    cat "$SAID" >&2
    [ -n "$url" ] || return 1
    STARTED+=(postgres)
  fi
  export ORCHESTRATOR_TEST_POSTGRES="$url"
}

part_sharedfs() {  # GlusterFS, one volume mounted twice (tests/test_shared_fs.py)
  if bash "$ROOT/scripts/sharedfs.sh" status >/dev/null 2>&1; then
    echo "[test] using the running shared file system (scripts/sharedfs.sh)"
  elif [ "$(id -u)" != 0 ]; then
    echo "not root: start it yourself (sudo scripts/sharedfs.sh start)" >"$SAID"
    return 1
  else
    bash "$ROOT/scripts/sharedfs.sh" start 2>&1 >/dev/null | tee "$SAID" || return 1
    STARTED+=(sharedfs)
  fi
}

part_chromium() {  # headless Chromium (Debian's package) for the report page's test
  command -v chromium >/dev/null 2>&1 && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "no chromium and not root (sudo apt-get install chromium)" >"$SAID"
    return 1
  fi
  echo "[test] installing chromium (headless browser for the report page's test)"
  source "$ROOT/scripts/apt.sh"
  apt_install chromium >/dev/null 2>"$SAID" && return 0
  cat "$SAID" >&2
  echo "apt-get install chromium failed: $(tail -n1 "$SAID")" >"$SAID"
  return 1
}

start_parts() {
  local - part why failed=() parts=("$@")
  set -o pipefail  # a step's status, not its tee's
  [ $# -gt 0 ] || parts=("${PARTS[@]}")
  SAID="$(mktemp /tmp/test-part.XXXXXX)"
  for part in "${parts[@]}"; do
    : >"$SAID"
    "part_$part" && continue
    why="$(last_said "$SAID")"
    why="${why:-it failed (above)}"
    if under_ci; then
      echo "[test] ERROR: $part did not start: $why" >&2
    else
      echo "[test] WARNING: $part did not start: $why; its tests will skip" >&2
    fi
    failed+=("$part ($why)")
  done
  rm -f "$SAID"
  if under_ci && [ ${#failed[@]} -gt 0 ]; then
    echo "[test] CI=true: ${#failed[@]} real part(s) did not start, so their tests cannot prove them:" \
         "$(printf '%s; ' "${failed[@]}" | sed 's/; $//')" >&2
    return 1
  fi
  return 0
}

stop_parts() {
  local part
  for part in ${STARTED[@]+"${STARTED[@]}"}; do
    case "$part" in
      slurm) bash "$ROOT/slurm/stop.sh" >/dev/null 2>&1 || true ;;
      postgres) bash "$ROOT/scripts/postgres.sh" stop >/dev/null 2>&1 || true ;;
      sharedfs) bash "$ROOT/scripts/sharedfs.sh" stop >/dev/null 2>&1 || true ;;
    esac
  done
  STARTED=()
}
