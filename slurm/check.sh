#!/usr/bin/env bash
# Is the test Slurm cluster up?  Exit 0 when `sinfo` answers with its slurm.conf, 1 if not.
#
#   slurm/check.sh        # prints each daemon's pid-file status, then sinfo
#   slurm/check.sh -q     # silent; just the exit status
set -uo pipefail

SCRIPT_NAME=check
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
. "$HERE/common.sh"

QUIET=0
[ "${1:-}" = "-q" ] && QUIET=1

if [ ! -f "$SLURM_CONF" ]; then
  [ $QUIET -eq 1 ] || log "down: no $SLURM_CONF (run slurm/start.sh)"
  exit 1
fi

missing=()
for d in "${DAEMONS[@]}"; do
  if pid="$(live_pid "$d")"; then
    [ $QUIET -eq 1 ] || printf '  %-10s running (pid %s)\n' "$d" "$pid"
  else
    [ $QUIET -eq 1 ] || printf '  %-10s not running\n' "$d"
    missing+=("$d")
  fi
done

if pid="$(live_pid "$LEGACY_SLURMD")"; then
  [ $QUIET -eq 1 ] || log "warning: the one-node cluster of an older start.sh runs here (slurmd pid $pid): slurm/stop.sh, then slurm/start.sh, for the four nodes"
fi

# Without our slurmctld there is nothing to ask (and sinfo would retry for ~10 s).
if live_pid slurmctld >/dev/null && cluster_answers; then
  if [ $QUIET -eq 0 ]; then
    log "up: cluster '$CLUSTER' answers (export SLURM_CONF=$SLURM_CONF)"
    [ ${#missing[@]} -eq 0 ] || log "warning: degraded, not running: ${missing[*]} (slurm/start.sh starts what is missing)"
    sinfo
  fi
  exit 0
fi
[ $QUIET -eq 1 ] || log "down: sinfo does not answer (logs in $LOG_DIR)"
exit 1
