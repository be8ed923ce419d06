# Shared settings and helpers for slurm/start.sh, stop.sh and check.sh. Sourced, not run.
#
# Everything the test cluster owns lives under one state directory:
#   SLURM_TEST_DIR        state directory                      [/tmp/orchestrator-slurm]
#   SLURM_TEST_CTLD_PORT  slurmctld port (127.0.0.1)           [16817]
#   SLURM_TEST_SLURMD_PORT first slurmd port; node i gets +i-1 [16820]
#   SLURM_TEST_DBD_PORT   slurmdbd port (127.0.0.1)            [16819]
#   SLURM_TEST_DB_PORT    private MariaDB port (127.0.0.1)     [16306]
#   SLURM_TEST_TIMEOUT    seconds to wait for each daemon      [60]

STATE="${SLURM_TEST_DIR:-/tmp/orchestrator-slurm}"
CTLD_PORT="${SLURM_TEST_CTLD_PORT:-16817}"
SLURMD_PORT="${SLURM_TEST_SLURMD_PORT:-16820}"
DBD_PORT="${SLURM_TEST_DBD_PORT:-16819}"
DB_PORT="${SLURM_TEST_DB_PORT:-16306}"
TIMEOUT="${SLURM_TEST_TIMEOUT:-60}"

CLUSTER=orchtest
# The emulated nodes: one slurmd per name, all on this host (slurmd -N NAME), each on its own
# port (SLURMD_PORT, SLURMD_PORT+1, ... in this order). Declared here only; everything else
# (slurm.conf, gres.conf, the daemon list, start/stop/check, the tests) derives from these.
CPU_NODES=(node1 node2)      # partition cpu (the default)
GPU_NODES=(node3 node4)      # partitions k20m and p100; each node 2 fake k20m + 2 fake p100 GPUs
NODES=("${CPU_NODES[@]}" "${GPU_NODES[@]}")
# The slurmctld host's name in slurm.conf (it resolves on every machine).
CTLD_HOST=localhost

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

# Daemons in start order; stop.sh walks this list backwards. One slurmd per node, named
# slurmd-<node>: its pid file is run/slurmd-<node>.pid (SlurmdPidFile=.../slurmd-%n.pid).
DAEMONS=(munged mariadbd slurmdbd slurmctld)
for _node in "${NODES[@]}"; do DAEMONS+=("slurmd-$_node"); done
unset _node
# The one slurmd of the single-node cluster before the four-node layout (run/slurmd.pid): stop.sh
# still stops it, start.sh refuses to start beside it.
LEGACY_SLURMD=slurmd

pid_file() { printf '%s/%s.pid\n' "$RUN_DIR" "$1"; }

# The program behind a daemon's name: slurmd-node1 -> slurmd.
daemon_program() { printf '%s\n' "${1%%-*}"; }

# The port of node $1's slurmd: SLURMD_PORT plus its index in NODES.
node_port() {
  local i
  for i in "${!NODES[@]}"; do
    [ "${NODES[$i]}" = "$1" ] && { printf '%s\n' $((SLURMD_PORT + i)); return 0; }
  done
  return 1
}

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
    *)        [[ "$comm" == "$(daemon_program "$name")" ]] || return 1 ;;
  esac
  # A zombie is as good as gone.
  if grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null; then return 1; fi
  printf '%s\n' "$pid"
}

# Whether slurmctld answers. A live slurmctld on a loaded machine can let one RPC time out
# (MessageTimeout): that is a busy cluster, not a down one, so three tries before saying no.
cluster_answers() {
  local try
  for try in 1 2 3; do
    sinfo -h -o '%P' >/dev/null 2>&1 && return 0
    [ "$try" -lt 3 ] && sleep 2
  done
  return 1
}

log() { printf '[slurm/%s] %s\n' "${SCRIPT_NAME:-test-cluster}" "$*"; }
die() { printf '[slurm/%s] ERROR: %s\n' "${SCRIPT_NAME:-test-cluster}" "$*" >&2; exit 1; }
