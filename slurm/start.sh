#!/usr/bin/env bash
# Start the four-node test Slurm cluster on loopback (as root, no systemd needed).
#
#   slurm/start.sh            # then: source /tmp/orchestrator-slurm/env.sh
#
# Launches, in order, munged -> mariadbd -> slurmdbd -> slurmctld -> one slurmd per node
# (several slurmd on this one host, `slurmd -N <node>`, nodes named in common.sh), each with
# its config, socket, log and pid file under the state directory (SLURM_TEST_DIR, default
# /tmp/orchestrator-slurm), registers the cluster, an account and root in accounting, and
# waits until every node is idle. Idempotent: when the cluster already answers `sinfo` it
# says so and exits 0; a daemon whose pid file names a live process is not started again,
# so a half-up cluster is completed rather than duplicated. After stop.sh (without
# --purge) it comes back on the same state: same munge key, same accounting database.
# See slurm/README.md.
set -euo pipefail

SCRIPT_NAME=start
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
. "$HERE/common.sh"

ACCOUNT=orchestrator

[ "$(id -u)" -eq 0 ] || die "run as root (the test cluster runs its daemons as root)"
for b in munged munge mariadbd mariadb-install-db mariadb slurmdbd slurmctld slurmd sinfo sacctmgr scontrol; do
  command -v "$b" >/dev/null 2>&1 || die "'$b' not found: run slurm/install.sh first"
done

write_env() {
  cat >"$STATE/env.sh" <<EOF
# Written by slurm/start.sh. Source it to talk to the test cluster:  . $STATE/env.sh
export SLURM_CONF=$SLURM_CONF
EOF
}

# Cluster, account and users in slurmdbd; adds only what is missing (cheap when all exist).
register_accounting() {
  local assoc u
  # One query for what exists: lines "cluster|account|user" ("orchtest|root|" once the
  # cluster is registered, "orchtest|orchestrator|" for the account, ...).
  assoc="$(sacctmgr -n -P list assoc format=cluster,account,user 2>/dev/null || true)"
  if ! grep -q "^$CLUSTER|" <<<"$assoc"; then
    sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr add cluster $CLUSTER failed"
    log "registered cluster '$CLUSTER' in accounting"
  fi
  if ! grep -qx "$CLUSTER|$ACCOUNT|" <<<"$assoc"; then
    sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" \
        Description="orchestrator test account" Organization=orchestrator >/dev/null \
      || die "sacctmgr add account $ACCOUNT failed"
    log "added account '$ACCOUNT'"
  fi
  USERS=(root)
  if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then USERS+=("$SUDO_USER"); fi
  for u in ${SLURM_TEST_USERS:-}; do USERS+=("$u"); done
  for u in "${USERS[@]}"; do
    if ! grep -qx "$CLUSTER|$ACCOUNT|$u" <<<"$assoc"; then
      sacctmgr -i add user "$u" Account="$ACCOUNT" DefaultAccount="$ACCOUNT" Cluster="$CLUSTER" >/dev/null \
        || die "sacctmgr add user $u failed"
      log "added user '$u' to account '$ACCOUNT'"
    fi
  done
}

# One start/stop at a time (e.g. several pytest-xdist workers calling start.sh at once):
# the later caller waits, then finds the cluster up.
mkdir -p "$STATE"
exec 9>"$STATE/lock"
flock -w 300 9 || die "another slurm/start.sh or stop.sh holds $STATE/lock"

# ---------------------------------------------------------------- already up?
# Up = all five daemons alive per their pid files and sinfo answers. If only some are alive
# (one crashed, or was stopped by hand), fall through: the live ones are left alone and the
# missing ones started. (sinfo is asked only when our slurmctld runs: against a dead
# controller it retries for ~10 s.)
all_live=1
for d in "${DAEMONS[@]}"; do live_pid "$d" >/dev/null || all_live=0; done
if [ -f "$SLURM_CONF" ] && [ $all_live -eq 1 ] && cluster_answers; then
  register_accounting   # e.g. SLURM_TEST_USERS grew since the cluster was started
  write_env
  log "test cluster '$CLUSTER' already up (state: $STATE)"
  sinfo
  echo "export SLURM_CONF=$SLURM_CONF"
  exit 0
fi

# A one-node cluster from before the four-node layout, still running from this state directory:
# its slurmctld knows only 'localhost', so nodes cannot be added beside it.
if pid="$(live_pid "$LEGACY_SLURMD")"; then
  die "the one-node test cluster of an older slurm/start.sh still runs from $STATE (its slurmd: pid $pid); stop it with slurm/stop.sh (it stops that one too), then run slurm/start.sh again"
fi

T0=$SECONDS
mkdir -p "$STATE" "$RUN_DIR" "$LOG_DIR" "$MUNGE_DIR" "$DB_DIR" "$SPOOL_DIR/slurmctld"
chmod 755 "$STATE"
chmod 755 "$MUNGE_DIR"   # munged: socket dir searchable by all, writable by owner only
chmod 700 "$DB_DIR"
chmod 755 "$RUN_DIR" "$LOG_DIR"

# Refuse to start a daemon on a port something else already listens on.
port_free() {
  local port="$1" what="$2"
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    die "127.0.0.1:$port (for $what) is already in use by another process; pick another port with the SLURM_TEST_*_PORT variables (see slurm/README.md)"
  fi
}

# Print the end of a log and fail.
fail_with_log() {
  local what="$1" logf="$2"
  printf '[slurm/start] ERROR: %s; read %s\n' "$what" "$logf" >&2
  if [ -f "$logf" ]; then
    echo "---- last lines of $logf ----" >&2
    tail -n 25 "$logf" >&2
    echo "----" >&2
  fi
  exit 1
}

# wait_for SECONDS CMD...: poll CMD every 0.2 s until it succeeds.
wait_for() {
  local limit="$1"; shift
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

# start_daemon NAME WHERE READY [ARGS...]: start Slurm daemon NAME with ARGS unless its pid file
# names a live one, then wait until the command READY succeeds (WHERE: its address, for messages).
# (NAME: a DAEMONS entry; slurmd-node1 runs slurmd: the program must keep its plain name.)
start_daemon() {
  local name="$1" where="$2" ready="$3" pid; shift 3
  if pid="$(live_pid "$name")"; then
    log "$name already running (pid $pid)"
    return 0
  fi
  rm -f "$(pid_file "$name")"
  "$(daemon_program "$name")" "$@" </dev/null >>"$LOG_DIR/$name.stdout" 2>&1 9>&- \
    || fail_with_log "$name did not start" "$LOG_DIR/$name.log"
  wait_for "$TIMEOUT" "$ready" || fail_with_log "$name does not answer on $where" "$LOG_DIR/$name.log"
  log "$name up (pid $(live_pid "$name"), $where)"
}

# ---------------------------------------------------------------- node resources
# slurmd -C reports what this machine really has; every node declares exactly that, memory a
# bit under (the nodes share it: declared, not divided; SlurmdParameters=config_overrides lets
# the four declare together more than the host has).
HW="$(slurmd -C 2>/dev/null | head -n1)"
hw() { sed -n "s/.*[[:space:]]$1=\([0-9]*\).*/\1/p" <<<"$HW"; }
CPUS="$(hw CPUs)"; BOARDS="$(hw Boards)"; SOCKETS="$(hw SocketsPerBoard)"
CORES="$(hw CoresPerSocket)"; THREADS="$(hw ThreadsPerCore)"; REALMEM="$(hw RealMemory)"
[ -n "$CPUS" ] && [ -n "$REALMEM" ] || die "could not read the node's resources from 'slurmd -C': $HW"
MEM=$(( REALMEM * 95 / 100 ))      # leave ~5% for the OS and the daemons
[ "$MEM" -ge 1024 ] || MEM=$REALMEM

# ---------------------------------------------------------------- config files
MUNGE_AUTHINFO="socket=$MUNGE_SOCKET"

# Every slurmd port must differ from the other daemons' ports.
for n in "${NODES[@]}"; do
  p="$(node_port "$n")"
  case "$p" in
    "$CTLD_PORT"|"$DBD_PORT"|"$DB_PORT")
      die "slurmd of $n would get port $p, which another daemon of the cluster uses: the nodes take SLURM_TEST_SLURMD_PORT=$SLURMD_PORT to $((SLURMD_PORT + ${#NODES[@]} - 1)); set it (or SLURM_TEST_CTLD_PORT/DBD_PORT/DB_PORT) so the ranges do not overlap" ;;
  esac
done

# One NodeName line per node (own Port, all at 127.0.0.1); GPU nodes carry the fake GPUs.
join() { local IFS=,; printf '%s\n' "$*"; }
NODE_LINES=""
for n in "${NODES[@]}"; do
  gres=""
  for g in "${GPU_NODES[@]}"; do [ "$g" = "$n" ] && gres=" Gres=gpu:k20m:2,gpu:p100:2"; done
  NODE_LINES+="NodeName=$n NodeAddr=127.0.0.1 NodeHostname=$n Port=$(node_port "$n") CPUs=$CPUS Boards=$BOARDS SocketsPerBoard=$SOCKETS CoresPerSocket=$CORES ThreadsPerCore=$THREADS RealMemory=$MEM$gres State=UNKNOWN"$'\n'
done

cat >"$SLURM_CONF" <<EOF
# Generated by slurm/start.sh -- four-node test cluster, several slurmd on one host, on loopback.
# Edits are overwritten.
ClusterName=$CLUSTER
SlurmctldHost=$CTLD_HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
# Each node's own Port= (NodeName lines) overrides this.
SlurmdPort=$SLURMD_PORT

AuthType=auth/munge
AuthInfo=$MUNGE_AUTHINFO
CredType=cred/munge
SlurmUser=root
SlurmdUser=root

StateSaveLocation=$SPOOL_DIR/slurmctld
# %n: the node name, so that the slurmd of each node has its own spool, pid file and log.
SlurmdSpoolDir=$SPOOL_DIR/slurmd-%n
SlurmctldPidFile=$(pid_file slurmctld)
SlurmdPidFile=$(pid_file slurmd-%n)
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
# The nodes declare the host's CPUs and memory each: accept more than slurmd finds.
SlurmdParameters=config_overrides
SlurmctldDebug=info
SlurmdDebug=info

# No cgroups: containers/CI runners rarely delegate cgroup v2 controllers.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=10
MpiDefault=none

SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without a default, a job that does not ask for memory gets the whole node's.
DefMemPerCPU=1024
ReturnToService=2
MinJobAge=300
KillWait=5
InactiveLimit=0
SlurmctldTimeout=60
SlurmdTimeout=120
MessageTimeout=10

AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$CTLD_HOST
AccountingStoragePort=$DBD_PORT
# Connections to slurmdbd authenticate through the munge socket named here, not AuthInfo.
AccountingStoragePass=$MUNGE_SOCKET
AccountingStorageEnforce=associations
AccountingStorageTRES=gres/gpu,gres/gpu:k20m,gres/gpu:p100
JobCompType=jobcomp/none
MailProg=/bin/true

GresTypes=gpu
${NODE_LINES}
# OverSubscribe=YES: jobs share the node's free cores/memory/GPUs; --exclusive still gets the whole node.
# Two nodes behind every partition, so that a 2-node job (CPU, or with GPUs) can run in each.
PartitionName=cpu  Nodes=$(join "${CPU_NODES[@]}") Default=YES MaxTime=2-00:00:00 DefaultTime=01:00:00 OverSubscribe=YES State=UP
PartitionName=k20m Nodes=$(join "${GPU_NODES[@]}") Default=NO  MaxTime=2-00:00:00 DefaultTime=01:00:00 OverSubscribe=YES State=UP
PartitionName=p100 Nodes=$(join "${GPU_NODES[@]}") Default=NO  MaxTime=2-00:00:00 DefaultTime=01:00:00 OverSubscribe=YES State=UP
EOF

# Typed fake GPUs. Slurm 22.05's gres/gpu discards a GPU line without File= ("config-only
# GPU"), so each fake GPU gets a "device file": a symlink to /dev/null under the state dir.
# Nothing is bound or constrained (no cgroups); jobs see CUDA_VISIBLE_DEVICES=<index>.
# The GPU nodes share one host, so they share these four files.
mkdir -p "$STATE/dev"
for i in 0 1 2 3; do ln -sfn /dev/null "$STATE/dev/gpu$i"; done
{
  echo "# Generated by slurm/start.sh -- fake typed GPUs (File= are symlinks to /dev/null)."
  echo "AutoDetect=off"
  for n in "${GPU_NODES[@]}"; do
    echo "NodeName=$n Name=gpu Type=k20m File=$STATE/dev/gpu[0-1]"
    echo "NodeName=$n Name=gpu Type=p100 File=$STATE/dev/gpu[2-3]"
  done
} >"$STATE/gres.conf"

# slurmd reads cgroup.conf at start even with proctrack/linuxproc + task/none; nothing is constrained.
cat >"$STATE/cgroup.conf" <<EOF
# Generated by slurm/start.sh -- the test cluster uses no cgroup plugin.
CgroupAutomount=no
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=no
EOF

DB_PASS_FILE="$DB_DIR/slurm.password"
if [ ! -s "$DB_PASS_FILE" ]; then
  pw="$(head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')"
  (umask 077; printf '%s' "${pw:0:24}" >"$DB_PASS_FILE")
fi
DB_PASS="$(cat "$DB_PASS_FILE")"

(umask 077; cat >"$STATE/slurmdbd.conf" <<EOF
# Generated by slurm/start.sh -- accounting daemon for the test cluster.
AuthType=auth/munge
AuthInfo=$MUNGE_AUTHINFO
DbdHost=$CTLD_HOST
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$LOG_DIR/slurmdbd.log
PidFile=$(pid_file slurmdbd)
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
)
chmod 600 "$STATE/slurmdbd.conf"

# Every port a daemon still to be started needs must be free before anything starts.
live_pid mariadbd  >/dev/null || port_free "$DB_PORT" mariadbd
live_pid slurmdbd  >/dev/null || port_free "$DBD_PORT" slurmdbd
live_pid slurmctld >/dev/null || port_free "$CTLD_PORT" slurmctld
for n in "${NODES[@]}"; do
  live_pid "slurmd-$n" >/dev/null || port_free "$(node_port "$n")" "slurmd of $n"
done

# ---------------------------------------------------------------- munged
if pid="$(live_pid munged)"; then
  log "munged already running (pid $pid)"
else
  if [ ! -s "$MUNGE_KEY" ]; then
    (umask 077; head -c 1024 /dev/urandom >"$MUNGE_KEY")
  fi
  chmod 400 "$MUNGE_KEY"
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock" "$(pid_file munged)"
  munged --socket="$MUNGE_SOCKET" --key-file="$MUNGE_KEY" --pid-file="$(pid_file munged)" \
         --log-file="$LOG_DIR/munged.log" --seed-file="$MUNGE_DIR/munged.seed" \
         </dev/null >>"$LOG_DIR/munged.log" 2>&1 9>&- \
    || fail_with_log "munged did not start" "$LOG_DIR/munged.log"
  munge_ok() { munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET"; }
  wait_for "$TIMEOUT" munge_ok || fail_with_log "munged does not answer on $MUNGE_SOCKET" "$LOG_DIR/munged.log"
  log "munged up (pid $(live_pid munged || echo '?'), socket $MUNGE_SOCKET)"
fi

# ---------------------------------------------------------------- mariadbd
db_sql() { mariadb --no-defaults --protocol=socket --socket="$DB_SOCKET" -uroot "$@"; }
if pid="$(live_pid mariadbd)"; then
  log "mariadbd already running (pid $pid)"
else
  if [ ! -d "$DB_DATA/mysql" ]; then
    log "initialising MariaDB datadir $DB_DATA"
    rm -rf "$DB_DATA"
    mariadb-install-db --no-defaults --datadir="$DB_DATA" --user=root --skip-test-db \
      --auth-root-authentication-method=socket >"$LOG_DIR/mariadb-install-db.log" 2>&1 \
      || fail_with_log "mariadb-install-db failed" "$LOG_DIR/mariadb-install-db.log"
  fi
  rm -f "$DB_SOCKET" "$(pid_file mariadbd)"
  # mariadbd does not daemonize: detach it into its own session; it writes its pid file.
  setsid mariadbd --no-defaults --user=root --datadir="$DB_DATA" \
      --socket="$DB_SOCKET" --port="$DB_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
      --pid-file="$(pid_file mariadbd)" --log-error="$LOG_DIR/mariadb.log" \
      --skip-log-bin --performance-schema=OFF \
      --innodb-buffer-pool-size=512M --innodb-log-file-size=64M \
      --innodb-lock-wait-timeout=900 --max-allowed-packet=64M \
      </dev/null >>"$LOG_DIR/mariadb.log" 2>&1 9>&- &
  db_up() { live_pid mariadbd && mariadb-admin --no-defaults --socket="$DB_SOCKET" -uroot ping; }
  wait_for "$TIMEOUT" db_up || fail_with_log "mariadbd did not come up on 127.0.0.1:$DB_PORT" "$LOG_DIR/mariadb.log"
  chmod 644 "$(pid_file mariadbd)"   # mariadbd writes it 0660; let check.sh read it as any user
  log "mariadbd up (pid $(live_pid mariadbd), 127.0.0.1:$DB_PORT, socket $DB_SOCKET)"
fi
# slurmdbd's database user; idempotent, and keeps the password in step with slurmdbd.conf.
db_sql <<EOF || fail_with_log "could not create the slurm database user" "$LOG_DIR/mariadb.log"
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
EOF

# ---------------------------------------------------------------- slurmdbd
dbd_up() { live_pid slurmdbd && sacctmgr -n -P list cluster format=cluster; }
start_daemon slurmdbd "127.0.0.1:$DBD_PORT" dbd_up

# ---------------------------------------------------------------- accounting
# The cluster must exist in slurmdbd before slurmctld registers with it.
register_accounting

# ---------------------------------------------------------------- slurmctld
ctld_up() { live_pid slurmctld && scontrol ping | grep 'is UP' >/dev/null; }
start_daemon slurmctld "127.0.0.1:$CTLD_PORT" ctld_up

# ---------------------------------------------------------------- slurmd, one per node
# -N: the slurmd is that node, whatever the machine's hostname is.
for n in "${NODES[@]}"; do
  mkdir -p "$SPOOL_DIR/slurmd-$n"
  slurmd_up() { live_pid "slurmd-$n"; }
  start_daemon "slurmd-$n" "127.0.0.1:$(node_port "$n")" slurmd_up -N "$n"
done

# ---------------------------------------------------------------- nodes ready
# Every node idle (or running jobs). A node that answers but is down/drained (e.g. the saved
# state of an earlier run says so) is resumed; one INVAL has a config that resuming won't fix.
deadline=$((SECONDS + TIMEOUT))
declare -A resumed
while :; do
  waiting=()
  while IFS='|' read -r n st; do
    [ -n "$n" ] || continue
    case "$st" in
      idle|mixed|allocated|completing) ;;
      inval*)
        fail_with_log "node $n is INVAL: $(sinfo -h -N -n "$n" -o '%E' 2>/dev/null | head -n1)" "$LOG_DIR/slurmd-$n.log" ;;
      down|drained|draining|drain|fail)   # responding (no '*') but not usable
        if [ "${resumed[$n]:-0}" -lt 3 ]; then
          scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
          resumed[$n]=$(( ${resumed[$n]:-0} + 1 ))
        fi
        waiting+=("$n:$st") ;;
      *) waiting+=("$n:$st") ;;
    esac
  done < <(sinfo -h -N -o '%N|%T' 2>/dev/null | sort -u || true)
  seen="$(sinfo -h -N -o '%N' 2>/dev/null | sort -u | wc -l || echo 0)"
  [ ${#waiting[@]} -eq 0 ] && [ "$seen" -eq ${#NODES[@]} ] && break
  if [ $SECONDS -ge $deadline ]; then
    for n in "${NODES[@]}"; do
      live_pid "slurmd-$n" >/dev/null || fail_with_log "slurmd of $n died" "$LOG_DIR/slurmd-$n.log"
    done
    fail_with_log "nodes not idle after ${TIMEOUT}s: ${waiting[*]:-(sinfo lists $seen of ${#NODES[@]} nodes)} (reasons: $(sinfo -h -N -o '%N=%E' 2>/dev/null | sort -u | tr '\n' ' '))" \
      "$LOG_DIR/slurmd-<node>.log (and $LOG_DIR/slurmctld.log)"
  fi
  sleep 0.2
done

write_env
log "test cluster '$CLUSTER' up in $((SECONDS - T0))s (state: $STATE)"
sinfo
echo "export SLURM_CONF=$SLURM_CONF"
