#!/usr/bin/env bash
# Install the packages the single-node test Slurm cluster needs (Debian/Ubuntu, as root).
#
#   slurm/install.sh
#
# Idempotent: when every package is already installed it does nothing (about a second).
# No service is started: a policy-rc.d that answers 101 ("action forbidden") is in place
# for the duration of the install, and whatever policy-rc.d was there before is put back.
# The daemons are started, without systemd or init scripts, by slurm/start.sh.
set -euo pipefail

PACKAGES=(
  slurmctld slurmd slurmdbd slurm-client   # Slurm 22.05 on bookworm
  munge                                    # authentication between the Slurm daemons/commands
  mariadb-server mariadb-client            # slurmdbd's accounting store (private instance)
  procps                                   # pgrep/ps, used by start/stop/check for pid checks
)

log() { printf '[slurm/install] %s\n' "$*"; }

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep '^install ok installed$' >/dev/null; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  log "all packages already installed: ${PACKAGES[*]}"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  log "need root to install: ${missing[*]}" >&2
  exit 1
fi

log "installing: ${missing[*]}"

POLICY=/usr/sbin/policy-rc.d
BACKUP=""
if [ -e "$POLICY" ]; then
  BACKUP="$(mktemp /tmp/policy-rc.d.XXXXXX)"
  cp -p "$POLICY" "$BACKUP"
fi
restore_policy() {
  if [ -n "$BACKUP" ]; then
    cp -p "$BACKUP" "$POLICY"
    rm -f "$BACKUP"
  else
    rm -f "$POLICY"
  fi
}
trap restore_policy EXIT
printf '#!/bin/sh\n# written by slurm/install.sh for the duration of apt-get install\nexit 101\n' >"$POLICY"
chmod 755 "$POLICY"

# waits for another apt-get or dpkg; refreshes the package lists and tries again where the install fails
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/apt.sh"
apt_install -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}"

log "done"
