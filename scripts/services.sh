# Sourced by test.sh: the real parts the tests run against, started (or found running) one by one.
#
#   start_parts [part ...]   # default: every part in PARTS; exports ORCHESTRATOR_TEST_POSTGRES, SLURM_CONF
#   stop_parts               # lets go of the parts; the last user of one a test.sh started stops it
#   stop_parts_at_exit       # stop_parts when the shell exits, SIGTERM, SIGHUP and SIGINT included
#
# Several test.sh may run side by side on one machine: each holds a shared flock on a part's
# users.lock (in its state directory) from before it looks for the part until stop_parts, and the
# part is stopped only by one that takes the lock exclusively (nobody else uses it) and finds the
# mark that a test.sh started it (never one the machine's owner started). The lock lives in a
# holder process (`tail --pid`, gone with this shell even on SIGKILL), so that the daemons a part
# starts do not inherit it.
#
# Under CI=true (what CI services set) a part that does not start fails: start_parts returns 1 after
# trying every part, its last line naming each with its reason. Why: its tests would only skip, and a
# green run with them skipped proves nothing (tests/ci_skips.py fails such skips too). Elsewhere it
# is a warning, and those tests skip loudly. Starting needs root where a part is not yet installed.

#: The parts, in the order they start: trainer environments and images first (the slowest).
PARTS=(frameworks images slurm postgres sharedfs chromium modules)
#: How each part that test.sh may start is stopped (relative to ROOT), and where its users.lock is.
declare -A STOP=([slurm]="slurm/stop.sh" [postgres]="scripts/postgres.sh stop" [sharedfs]="scripts/sharedfs.sh stop")
users_lock() {
  case "$1" in
    slurm) echo "${SLURM_TEST_DIR:-/tmp/orchestrator-slurm}/users.lock" ;;
    postgres) echo "${POSTGRES_TEST_DIR:-/tmp/orchestrator-postgres}/users.lock" ;;
    sharedfs) echo "${SHAREDFS_TEST_DIR:-/tmp/orchestrator-sharedfs}/users.lock" ;;
  esac
}
#: The marks, beside users.lock, that a test.sh started the part (so the last user stops it).
started_mark() { echo "$(dirname "$(users_lock "$1")")/started-by-test.sh"; }
declare -A HOLDER=()  # part -> the pid of the process that holds its shared lock

# Whether this is a CI run: CI, trimmed and lower-cased, is true, 1 or yes (the rule of
# tests/ci_skips.py's under_ci, word for word).
under_ci() {
  local v="${CI:-}"
  v="${v#"${v%%[![:space:]]*}"}"
  v="${v%"${v##*[![:space:]]}"}"
  case "${v,,}" in true|1|yes) return 0 ;; *) return 1 ;; esac
}

# Takes a shared lock on PART's users.lock (waiting while a stopper holds it) and hands it to a holder
# process that lives as long as this shell; this shell keeps no descriptor of it.
hold_part() {
  local file fd
  file="$(users_lock "$1")"
  [ -n "$file" ] || return 0
  mkdir -p "$(dirname "$file")"
  exec {fd}>>"$file"
  flock -s "$fd"
  tail --pid=$$ -f /dev/null >/dev/null 2>&1 </dev/null &
  HOLDER[$1]=$!
  exec {fd}>&-
}

# Marks PART as started by a test.sh, for the last of its users to stop.
mark_started() { : >"$(started_mark "$1")"; }

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
    mark_started slurm
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
    mark_started postgres
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
    mark_started sharedfs
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

part_modules() {  # Lmod and the test module tree over two trainer environments (tests/test_modules.py)
  local tree
  tree="$(bash "$ROOT/scripts/modules.sh" 2>"$SAID" | tail -n1)"
  cat "$SAID" >&2
  [ -n "$tree" ] || return 1
  export ORCHESTRATOR_TEST_MODULES="$tree"
}

start_parts() {
  local - part why failed=() parts=("$@")
  set -o pipefail  # a step's status, not its tee's
  [ $# -gt 0 ] || parts=("${PARTS[@]}")
  SAID="$(mktemp /tmp/test-part.XXXXXX)"
  for part in "${parts[@]}"; do
    : >"$SAID"
    [ "$part" != slurm ] || export SLURM_TEST_DIR="${SLURM_TEST_DIR:-/tmp/orchestrator-slurm}"
    hold_part "$part"
    "part_$part" && continue
    why="$(last_said "$SAID")"
    why="${why:-it failed (above)}"
    if under_ci; then
      echo "[test] ERROR: $part did not start: $why" >&2
    else
      echo "[test] WARNING: $part did not start: $why; its tests will skip or fail, each saying why" >&2
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

stop_parts() {  # lets go of each part held; stops one a test.sh started if nobody else holds it
  local part file stop
  for part in "${!HOLDER[@]}"; do
    kill -KILL "${HOLDER[$part]}" 2>/dev/null || true  # KILL: a TERM that lands before its exec is lost
    { wait "${HOLDER[$part]}"; } 2>/dev/null || true
    unset "HOLDER[$part]"
    file="$(users_lock "$part")"
    [ -e "$(started_mark "$part")" ] && [ -n "${STOP[$part]:-}" ] || continue
    read -ra stop <<<"${STOP[$part]}"
    # shellcheck disable=SC2016  # the inner shell's $1 and $@
    flock -n -x "$file" bash -c '[ -e "$1" ] || exit 0; rm -f "$1"; shift; bash "$@" >/dev/null 2>&1 || true' \
      _ "$(started_mark "$part")" "$ROOT/${stop[0]}" "${stop[@]:1}" || true
  done
}

stop_parts_at_exit() {  # stop_parts however the shell ends: EXIT, and the signals made exits
  trap stop_parts EXIT
  trap 'exit 129' HUP
  trap 'exit 130' INT
  trap 'exit 143' TERM
}
