# Sourced by every script here that installs Debian packages (scripts/*.sh, slurm/install.sh): apt-get
# that waits for another apt-get or dpkg instead of failing at once. Why: two of these scripts, or the
# machine's own updates, may run apt-get side by side, and the second died with "Could not get lock
# /var/lib/dpkg/lock-frontend" (under `set -e`, taking every step after it along).
#
#   APT_LOCK_TIMEOUT   seconds to wait for apt's and dpkg's locks                        [600]
#
# dpkg's lock is waited for by apt itself (DPkg::Lock::Timeout). The package lists' lock that
# `apt-get update` takes, and the download cache's, are not (apt 2.6 fails at once on them, whatever
# DPkg::Lock::Timeout says): those are tried again every 2 s until the same timeout has passed.

APT_LOCK_TIMEOUT="${APT_LOCK_TIMEOUT:-600}"

# apt-get ARGS, waiting for the locks (above); its exit status. Says once on stderr that it waits.
apt_get() {
  local deadline=$((SECONDS + APT_LOCK_TIMEOUT)) err status said=""
  err="$(mktemp /tmp/apt-get.XXXXXX)"
  while :; do
    status=0
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$APT_LOCK_TIMEOUT" "$@" 2>"$err" || status=$?
    if [ "$status" -ne 0 ] && grep -q "Could not get lock" "$err" && [ "$SECONDS" -lt "$deadline" ]; then
      [ -n "$said" ] || echo "[apt] waiting up to ${APT_LOCK_TIMEOUT} s: $(grep -m1 'Could not get lock' "$err")" >&2
      said=1
      sleep 2
      continue
    fi
    cat "$err" >&2
    rm -f "$err"
    return "$status"
  done
}

# apt-get install -y -q --no-install-recommends ARGS (options, then packages); where that fails, the
# package lists refreshed (a stale list names versions the mirror no longer has) and one more try.
apt_install() {
  apt_get install -y -q --no-install-recommends "$@" && return 0
  echo "[apt] install failed; refreshing the package lists and trying once more" >&2
  apt_get update -q || true
  apt_get install -y -q --no-install-recommends "$@"
}
