#!/usr/bin/env bash
# A private PostgreSQL server on loopback, for the tests that run the results database on a
# server (tests/conftest.py `db_url`) and for benchmarks/scale.py --db. No systemd, no init script.
#
#   scripts/postgres.sh start    # install PostgreSQL if missing (root), start it; last line: its URL
#   scripts/postgres.sh url      # the URL if it answers (exit 1 if not)
#   scripts/postgres.sh stop     # stop it (pg_ctl stop -m fast, by the pid in its postmaster.pid)
#   scripts/postgres.sh stop --purge   # ... and delete its state directory
#
# Everything it owns lives under one state directory:
#   POSTGRES_TEST_DIR   state directory: data/ (the cluster), log/, lock  [/tmp/orchestrator-postgres]
#   POSTGRES_TEST_PORT  TCP port on 127.0.0.1, the only address it listens on        [55432]
#   POSTGRES_TEST_BIN   PostgreSQL's bin directory       [/usr/lib/postgresql/15/bin, else the newest]
#   POSTGRES_TEST_TIMEOUT  seconds pg_ctl waits for the server to start or stop            [60]
#
# `start` installs Debian's `postgresql` (15 on bookworm) when no server binaries are found
# (root only; apt-get update only if the install fails; no service is started by the install),
# makes the cluster on first use (initdb), and starts it as Debian's `postgres` user when run as
# root, as the calling user otherwise. The role `bench` (LOGIN CREATEDB) and its database `bench`
# are made if missing. Authentication is `trust`, from 127.0.0.1 only: a scratch server for tests,
# never one for data that matters; commits do not wait for their WAL flush (synchronous_commit=off,
# as the SQLite files run with synchronous=NORMAL). Idempotent: a server already answering is reused; after `stop`
# (without --purge) the next `start` comes back on the same data.
#
#   URL: postgresql+psycopg://bench@127.0.0.1:$POSTGRES_TEST_PORT/bench   (pip install 'psycopg[binary]')
set -euo pipefail

STATE="${POSTGRES_TEST_DIR:-/tmp/orchestrator-postgres}"
PORT="${POSTGRES_TEST_PORT:-55432}"
TIMEOUT="${POSTGRES_TEST_TIMEOUT:-60}"
DATA="$STATE/data"
LOG_DIR="$STATE/log"
ROLE=bench
URL="postgresql+psycopg://$ROLE@127.0.0.1:$PORT/$ROLE"

log() { printf '[postgres] %s\n' "$*" >&2; }
die() { printf '[postgres] ERROR: %s\n' "$*" >&2; exit 1; }

# PostgreSQL's bin directory (initdb, pg_ctl, postgres, psql, pg_isready), or nothing.
find_bin() {
  local d
  for d in ${POSTGRES_TEST_BIN:-} /usr/lib/postgresql/15/bin $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ] && [ -x "$d/psql" ]; then
      printf '%s\n' "$d"
      return 0
    fi
  done
  if command -v pg_config >/dev/null 2>&1; then
    d="$(pg_config --bindir 2>/dev/null || true)"
    [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/psql" ] && { printf '%s\n' "$d"; return 0; }
  fi
  return 1
}

# Installs Debian's postgresql without starting its service (a policy-rc.d answering 101, as
# slurm/install.sh does); the cluster Debian makes in /var/lib/postgresql is left unused.
install_postgres() {
  [ "$(id -u)" -eq 0 ] || die "PostgreSQL is not installed and installing it needs root: sudo apt-get install postgresql (or set POSTGRES_TEST_BIN)"
  command -v apt-get >/dev/null 2>&1 || die "PostgreSQL is not installed and there is no apt-get here: install PostgreSQL 15 and set POSTGRES_TEST_BIN"
  log "installing PostgreSQL (Debian's postgresql package)"
  local policy=/usr/sbin/policy-rc.d backup=""
  if [ -e "$policy" ]; then backup="$(mktemp /tmp/policy-rc.d.XXXXXX)"; cp -p "$policy" "$backup"; fi
  # shellcheck disable=SC2064
  trap "if [ -n '$backup' ]; then cp -p '$backup' '$policy'; rm -f '$backup'; else rm -f '$policy'; fi" EXIT
  printf '#!/bin/sh\n# written by scripts/postgres.sh for the duration of apt-get install\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  # waits for another apt-get or dpkg; refreshes the package lists and tries again where the install fails
  source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
  apt_install -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold postgresql \
      >"$STATE/install.log" 2>&1 \
    || { tail -n 20 "$STATE/install.log" >&2; die "apt-get install postgresql failed (log: $STATE/install.log)"; }
  trap - EXIT
  if [ -n "$backup" ]; then cp -p "$backup" "$policy"; rm -f "$backup"; else rm -f "$policy"; fi
}

# Runs a command as the server's owner (Debian's postgres user when we are root, else ourselves).
OWNER="$(id -un)"
if [ "$(id -u)" -eq 0 ]; then OWNER=postgres; fi
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "$OWNER" -- "$@"
  else
    "$@"
  fi
}

# The postmaster's pid if its postmaster.pid names a live postgres process (root or owner only).
live_pid() {
  local f="$DATA/postmaster.pid" pid comm
  [ -r "$f" ] || return 1
  pid="$(head -n1 "$f" 2>/dev/null | tr -dc '0-9')"
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
  comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
  [[ "$comm" == postgres || "$comm" == postmaster ]] || return 1
  if grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null; then return 1; fi
  printf '%s\n' "$pid"
}

# Whether the server answers on 127.0.0.1:$PORT and lets `bench` into its database.
answers() {
  "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -U "$ROLE" -d "$ROLE" -t 2 >/dev/null 2>&1 || return 1
  PGCONNECT_TIMEOUT=5 "$BIN/psql" -X -q -h 127.0.0.1 -p "$PORT" -U "$ROLE" -d "$ROLE" -tAc 'SELECT 1' 2>/dev/null | grep -x 1 >/dev/null
}

superuser_sql() {
  PGCONNECT_TIMEOUT=5 "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -tA "$@"
}

ensure_role() {
  if [ "$(superuser_sql -c "SELECT 1 FROM pg_roles WHERE rolname = '$ROLE'")" != 1 ]; then
    superuser_sql -c "CREATE ROLE $ROLE LOGIN CREATEDB" >/dev/null
    log "made role '$ROLE' (LOGIN CREATEDB)"
  fi
  if [ "$(superuser_sql -c "SELECT 1 FROM pg_database WHERE datname = '$ROLE'")" != 1 ]; then
    superuser_sql -c "CREATE DATABASE $ROLE OWNER $ROLE" >/dev/null
    log "made database '$ROLE'"
  fi
  # The tests drop their databases WITH (FORCE). An autovacuum worker busy in one (it has no role)
  # may be ended only by a member of pg_signal_backend; without it the drop fails now and then.
  if [ "$(superuser_sql -c "SELECT pg_has_role('$ROLE', 'pg_signal_backend', 'MEMBER')")" != t ]; then
    superuser_sql -c "GRANT pg_signal_backend TO $ROLE" >/dev/null
  fi
}

cmd_start() {
  local t0=$SECONDS
  mkdir -p "$STATE"
  exec 9>"$STATE/lock"
  flock -w 300 9 || die "another scripts/postgres.sh holds $STATE/lock"
  if ! BIN="$(find_bin)"; then
    install_postgres
    BIN="$(find_bin)" || die "PostgreSQL installed, but no initdb/pg_ctl/postgres/psql found under /usr/lib/postgresql/*/bin"
    log "installed in $((SECONDS - t0)) s ($BIN)"
  fi
  local pid=""
  if "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -t 2 >/dev/null 2>&1; then
    ensure_role || die "a server answers on 127.0.0.1:$PORT but the role '$ROLE' could not be made there: is it another server? Pick another port with POSTGRES_TEST_PORT"
    answers || die "a server answers on 127.0.0.1:$PORT but '$ROLE' cannot connect to it"
    pid="$(live_pid || true)"
    log "already running on 127.0.0.1:$PORT (state: $STATE${pid:+, pid $pid})"
    # a server started before its package was upgraded runs the old binary, which cannot load the
    # new one's libraries (plpgsql.so: "undefined symbol"): say so
    local running installed
    running="$(superuser_sql -c 'SHOW server_version' 2>/dev/null | cut -d' ' -f1 || true)"
    installed="$("$BIN/postgres" --version 2>/dev/null | sed -n 's/.*(PostgreSQL) \([0-9.]*\).*/\1/p')"
    if [ -n "$running" ] && [ -n "$installed" ] && [ "$running" != "$installed" ]; then
      log "WARNING: it runs PostgreSQL $running, but $installed is installed (upgraded since it started): restart it with scripts/postgres.sh stop && scripts/postgres.sh start"
    fi
    echo "$URL"
    return 0
  fi
  if pid="$(live_pid)"; then
    die "a postgres (pid $pid) runs on $DATA but does not answer on 127.0.0.1:$PORT: stop it first (scripts/postgres.sh stop), or set POSTGRES_TEST_PORT to its port"
  fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    die "127.0.0.1:$PORT is already in use by another process; pick another port with POSTGRES_TEST_PORT"
  fi
  id -u "$OWNER" >/dev/null 2>&1 || die "no user '$OWNER' to run the server as (Debian's postgresql package makes it)"
  chmod 755 "$STATE"
  mkdir -p "$LOG_DIR"
  if [ "$(id -u)" -eq 0 ]; then chown "$OWNER" "$LOG_DIR"; fi
  as_owner test -w "$LOG_DIR" || die "user $OWNER cannot write $LOG_DIR (is a parent of $STATE closed to it?): set POSTGRES_TEST_DIR elsewhere"
  if [ ! -s "$DATA/PG_VERSION" ]; then
    log "initialising the cluster in $DATA"
    rm -rf "$DATA"
    mkdir -p "$DATA"
    if [ "$(id -u)" -eq 0 ]; then chown "$OWNER" "$DATA"; fi
    chmod 700 "$DATA"
    as_owner "$BIN/initdb" -D "$DATA" -U postgres -E UTF8 --locale=C --auth=trust --no-sync \
        >"$LOG_DIR/initdb.log" 2>&1 || { tail -n 20 "$LOG_DIR/initdb.log" >&2; die "initdb failed (log: $LOG_DIR/initdb.log)"; }
    # only loopback, and trust there (a scratch server for tests): no other host, no unix socket
    as_owner sh -c "printf '%s\n' \
      '# Written by scripts/postgres.sh: loopback only, trust (a scratch server for tests).' \
      'host all all 127.0.0.1/32 trust' >'$DATA/pg_hba.conf'"
    as_owner sh -c "printf '\n# scripts/postgres.sh: its settings (rewritten at every start)\ninclude_if_exists = '\''orchestrator.conf'\''\n' >>'$DATA/postgresql.conf'"
  fi
  # Rewritten at every start, so that POSTGRES_TEST_PORT is the port it listens on.
  # synchronous_commit=off: a commit does not wait for its WAL flush, much as the SQLite files
  # run (WAL, synchronous=NORMAL); a crash loses the last commits, never the database.
  as_owner sh -c "cat >'$DATA/orchestrator.conf'" <<EOF
# Written by scripts/postgres.sh at every start; edits are overwritten.
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = ''
max_connections = 100
synchronous_commit = off
logging_collector = off
log_min_messages = warning
EOF
  as_owner "$BIN/pg_ctl" start -D "$DATA" -l "$LOG_DIR/postgres.log" -w -t "$TIMEOUT" -s </dev/null >/dev/null 2>&1 9>&- || {
    echo "---- last lines of $LOG_DIR/postgres.log ----" >&2
    tail -n 25 "$LOG_DIR/postgres.log" >&2 || true
    die "the server did not start (log: $LOG_DIR/postgres.log)"
  }
  ensure_role
  answers || die "the server started but '$ROLE' cannot connect on 127.0.0.1:$PORT (log: $LOG_DIR/postgres.log)"
  log "up in $((SECONDS - t0)) s: pid $(live_pid || echo '?'), 127.0.0.1:$PORT, data $DATA, PostgreSQL $(cat "$DATA/PG_VERSION")"
  echo "$URL"
}

cmd_stop() {
  local purge=0 a pid
  for a in "$@"; do
    case "$a" in
      --purge) purge=1 ;;
      *) die "unknown argument: $a (use --purge)" ;;
    esac
  done
  if [ -d "$STATE" ]; then
    exec 9>"$STATE/lock"
    flock -w 300 9 || die "another scripts/postgres.sh holds $STATE/lock"
  fi
  if pid="$(live_pid)"; then
    BIN="$(find_bin)" || die "no pg_ctl found to stop pid $pid"
    as_owner "$BIN/pg_ctl" stop -D "$DATA" -m fast -w -t "$TIMEOUT" -s 9>&- \
      || die "pg_ctl stop failed for pid $pid (log: $LOG_DIR/postgres.log)"
    log "stopped (pid $pid)"
  elif [ -e "$DATA/postmaster.pid" ] && [ ! -r "$DATA/postmaster.pid" ]; then
    die "cannot read $DATA/postmaster.pid: run as root or as its owner"
  else
    log "nothing running (state: $STATE)"
  fi
  if [ $purge -eq 1 ] && [ -d "$STATE" ]; then
    case "$(cd "$STATE" && pwd -P)" in
      /|/tmp|/root|/home|/usr|/etc|/var) die "refusing to purge $STATE" ;;
    esac
    [ -e "$DATA/PG_VERSION" ] || [ -d "$LOG_DIR" ] || die "$STATE does not look like this script's state directory; not purging"
    rm -rf "$STATE"
    log "purged $STATE"
  fi
}

cmd_url() {
  BIN="$(find_bin)" || { log "PostgreSQL is not installed: scripts/postgres.sh start (as root)"; exit 1; }
  if answers; then
    echo "$URL"
  else
    log "no server answers on 127.0.0.1:$PORT for '$ROLE': scripts/postgres.sh start (as root)"
    exit 1
  fi
}

case "${1:-}" in
  start) shift; cmd_start "$@" ;;
  stop)  shift; cmd_stop "$@" ;;
  url)   shift; cmd_url "$@" ;;
  -h|--help|help) sed -n '2,25p' "$0" ;;
  *) sed -n '2,8p' "$0" >&2; exit 2 ;;
esac
