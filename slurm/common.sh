# Shared settings and helpers for slurm/start.sh, stop.sh and check.sh. Sourced, not run.
#
# Everything the test cluster owns lives under one state directory:
#   SLURM_TEST_DIR        state directory                      [/tmp/orchestrator-slurm]
#   SLURM_TEST_CTLD_PORT  slurmctld port (127.0.0.1)           [16817]
#   SLURM_TEST_SLURMD_PORT slurmd port (127.0.0.1)             [16818]
#   SLURM_TEST_DBD_PORT   slurmdbd port (127.0.0.1)            [16819]
#   SLURM_TEST_DB_PORT    private MariaDB port (127.0.0.1)     [16306]
#   SLURM_TEST_TIMEOUT    seconds to wait for each daemon      [60]

STATE="${SLURM_TEST_DIR:-/tmp/orchestrator-slurm}"
CTLD_PORT="${SLURM_TEST_CTLD_PORT:-16817}"
SLURMD_PORT="${SLURM_TEST_SLURMD_PORT:-16818}"
DBD_PORT="${SLURM_TEST_DBD_PORT:-16819}"
DB_PORT="${SLURM_TEST_DB_PORT:-16306}"
TIMEOUT="${SLURM_TEST_TIMEOUT:-60}"

CLUSTER=orchtest
NODE=localhost

RUN_DIR="$STATE/run"            # pid files
LOG_DIR="$STATE/log"            # one log per daemon
MUNGE_DIR="$STATE/munge"        # key, socket, seed
DB_DIR="$STATE/mysql"           # MariaDB datadir + socket
SPOOL_DIR="$STATE/spool"        # slurmctld state, slurmd spool

MUNGE_SOCKET="$MUNGE_DIR/munge.socket.2"
MUNGE_KEY="$MUNGE_DIR/munge.key"
DB_SOCKET="$DB_DIR/mysqld.sock"
DB_DATA="$DB_DIR/data"

export SLURM_CONF="$STATE/slurm.conf"

# Daemons in start order; stop.sh walks this list backwards.
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)

pid_file() { printf '%s/%s.pid\n' "$RUN_DIR" "$1"; }

# The pid recorded for daemon $1, if that process is alive and really is that daemon
# (guards against a stale pid file whose pid was reused by something else).
live_pid() {
  local name="$1" f pid comm
  f="$(pid_file "$name")"
  [ -s "$f" ] || return 1
  pid="$( { tr -dc '0-9' <"$f"; } 2>/dev/null || true)"
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
  comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
  case "$name" in
    # /proc/PID/comm is at most 15 characters
    mariadbd) [[ "$comm" == mariadbd || "$comm" == mysqld ]] || return 1 ;;
    *)        [[ "$comm" == "$name" ]] || return 1 ;;
  esac
  # A zombie is as good as gone.
  if grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null; then return 1; fi
  printf '%s\n' "$pid"
}

cluster_answers() { sinfo -h -o '%P' >/dev/null 2>&1; }

log() { printf '[slurm/%s] %s\n' "${SCRIPT_NAME:-test-cluster}" "$*"; }
die() { printf '[slurm/%s] ERROR: %s\n' "${SCRIPT_NAME:-test-cluster}" "$*" >&2; exit 1; }
