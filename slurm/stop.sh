#!/usr/bin/env bash
# Stop the test Slurm cluster that slurm/start.sh launched.
#
#   slurm/stop.sh            # stop the daemons, keep the state (next start.sh resumes it)
#   slurm/stop.sh --purge    # ... and delete the state directory
#
# Only the processes named in the pid files under $SLURM_TEST_DIR/run are signalled
# (each node's slurmd, slurmctld, slurmdbd, mariadbd, munged, in that order; also the one
# slurmd of a one-node cluster started by an older start.sh), and only when the pid still
# belongs to that daemon; nothing is ever killed by name. Jobs still queued or
# running are cancelled first, through Slurm, so no job step outlives slurmd.
# Idempotent: with nothing running it says so and exits 0.
set -euo pipefail

SCRIPT_NAME=stop
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
. "$HERE/common.sh"

PURGE=0
for a in "$@"; do
  case "$a" in
    --purge) PURGE=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) die "unknown argument: $a (use --purge)" ;;
  esac
done

# Stop order: the daemons in reverse start order, an older layout's slurmd first.
STOP_ORDER=("$LEGACY_SLURMD")
for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do STOP_ORDER+=("${DAEMONS[$i]}"); done

if [ "$(id -u)" -ne 0 ]; then
  for d in "${STOP_ORDER[@]}"; do
    live_pid "$d" >/dev/null && die "run as root: the test cluster's daemons run as root"
  done
  [ $PURGE -eq 0 ] || die "run as root to purge $STATE"
fi

if [ -d "$STATE" ] && [ "$(id -u)" -eq 0 ]; then
  exec 9>"$STATE/lock"
  flock -w 300 9 || die "another slurm/start.sh or stop.sh holds $STATE/lock"
fi

gone() { [ ! -d "/proc/$1" ] || grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

# ---------------------------------------------------------------- cancel jobs
if live_pid slurmctld >/dev/null && cluster_answers; then
  jobs="$(squeue -h -o '%i' 2>/dev/null | tr '\n' ' ' || true)"
  if [ -n "${jobs// /}" ]; then
    log "cancelling jobs still in the queue: $jobs"
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null || true
    deadline=$((SECONDS + 30))
    while [ -n "$(squeue -h -o '%i' 2>/dev/null || true)" ] && [ $SECONDS -lt $deadline ]; do
      sleep 0.5
    done
    left="$(squeue -h -o '%i %T' 2>/dev/null | tr '\n' ';' || true)"
    [ -z "$left" ] || log "warning: jobs still listed after 30 s: $left"
  fi
fi

# ---------------------------------------------------------------- stop daemons
stopped=0
for d in "${STOP_ORDER[@]}"; do
  if pid="$(live_pid "$d")"; then
    kill -TERM "$pid" 2>/dev/null || true
    limit=30
    [ "$d" = mariadbd ] && limit=120
    deadline=$((SECONDS + limit))
    while ! gone "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    if ! gone "$pid"; then
      log "warning: $d (pid $pid) ignored SIGTERM for ${limit}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      deadline=$((SECONDS + 10))
      while ! gone "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
      gone "$pid" || die "$d (pid $pid) is still alive"
    fi
    log "stopped $d (pid $pid)"
    stopped=$((stopped + 1))
  fi
  rm -f "$(pid_file "$d")" 2>/dev/null || true
done
rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock" "$DB_SOCKET" 2>/dev/null || true

if [ $stopped -eq 0 ]; then
  log "nothing running (state: $STATE)"
else
  log "test cluster stopped (state kept in $STATE unless --purge)"
fi

# ---------------------------------------------------------------- purge
if [ $PURGE -eq 1 ]; then
  if [ -d "$STATE" ]; then
    # Refuse to delete anything that is not plainly a test-cluster state directory.
    case "$(cd "$STATE" && pwd -P)" in
      /|/tmp|/root|/home|/usr|/etc|/var) die "refusing to purge $STATE" ;;
    esac
    if [ -e "$STATE/slurm.conf" ] || [ -d "$STATE/run" ] || [ -d "$STATE/munge" ]; then
      rm -rf "$STATE"
      log "purged $STATE"
    else
      die "$STATE does not look like a test-cluster state directory; not purging"
    fi
  else
    log "nothing to purge ($STATE does not exist)"
  fi
fi
