"""How one SQLite results file is opened so that any number of commands may share it.

Two problems, two mechanisms (docs/shared-results.md; the measurements behind them:
../shared/site-facts.md):

**Processes on one host, at one instant.** Switching a file's journal mode (a new file, or one
made by a release that did not use WAL) needs the file to itself, and SQLite does *not* wait for
that with its busy timeout: the loser of two processes opening one file together failed at once
with "database is locked" (1 run in 7 of the upgrade test, 1 in 80 of two `collect` on a new
file). So the mode is read first (nothing to do in the steady state, which costs nothing), and
where it must change it is changed by one process at a time — an advisory `flock` on
`<file>.lock` (setup_lock) — retried while a reader without that lock still holds the file, up
to the busy timeout. open_db makes or upgrades the schema under the same lock.

**Hosts that share a network file system.** There no journal mode is safe for writers on two
hosts (WAL lost half the rows on every cluster file system tried; the rollback journal lost
commits through each client's page cache, and POSIX locks are only local on some), and a reader
on one host can see another's commit half (measured on GlusterFS: "database disk image is
malformed" in a collector reading while the other host committed). So on a network file system
(filesystems.py):
- the journal is the rollback journal (`delete`), synchronous FULL, no memory mapping;
- a connection first takes the **lease**, `<file>.writer`, a file made with O_EXCL (atomic on
  NFS v3+, Lustre, GPFS, BeeGFS and the FUSE cluster file systems, whatever their locks do),
  naming its host, process and user; it keeps its mtime fresh while held, and removes it after
  the transaction (commit, rollback or close). Another process, on any host, waits for it (up
  to the busy timeout) and is then refused in one line that names the holder and the way out:
  hosts take turns, one at a time. A lease nobody refreshes for LEASE_STALE_S (its holder died)
  is broken; on the holder's own host, at once when its process is gone. Only the lease judged
  is ever broken (compare-and-break), and a holder whose lease was broken or could not be
  refreshed rolls its transaction back before the commit (its fence).
- each holder sees what the previous one wrote: the releasing holder leaves the file's change
  counter and size in the *name* of a file, `<file>.written-<inode>-<counter>-<pages>` (a
  directory listing is fresh on another host where a file's content may not be: measured), and
  the next, once it holds the lease, drops this host's cached pages of the file and waits until
  it sees that counter and size, or refuses before reading or writing anything.
- where the file system's POSIX locks are each host's own (sshfs, smbnetfs, NFS
  `local_lock=all`, Lustre `localflock`: filesystems.py), SQLite's own locks guard nothing between
  hosts, and a holder stopped between its fence and its commit (milliseconds) could commit after
  another host broke its lease: there only the host that wrote last (named in the `.written-`
  record) may write; another is refused before it writes, with the way out (`one_host`).
  On GlusterFS, CephFS and MooseFS that same gap is covered by SQLite's locks, shared there.
The lease is taken where SQLite itself prepares a statement (an authorizer on every connection
to such a file, with the statement cache off so that every statement is prepared), so no command
reads or writes without it: sqlite_lease.py.

`ORCHESTRATOR_SQLITE_JOURNAL` (wal, delete, truncate or persist) overrides the journal mode
for a site that knows better, said once; with `wal` there is no lease (WAL cannot work across
hosts at all, so choosing it says one host writes). This module imports only the standard library
(status reads through it without SQLAlchemy).
"""
from __future__ import annotations

import fcntl
import os
import sqlite3
import sys
import threading
import time
from contextlib import contextmanager
from functools import lru_cache
from typing import Iterator, NamedTuple

from orchestrator.store.filesystems import FileSystem, filesystem_of

#: How long a connection waits for another writer (SQLite's busy timeout, the setup lock and the
#: writer lease alike) before giving up.
BUSY_TIMEOUT_S = 30.0
#: How much of a SQLite file on a local disk reads map into memory: mapped pages a command reads
#: count as its resident memory, so a scan of a million runs' file (2 GB) stayed within 200 MB
#: only with a small map (issue 36); the summary it once sped up is kept as runs land (kept_summary).
MMAP_BYTES = 64 << 20
#: The override of the journal mode, and the modes it may name.
JOURNAL_ENV = "ORCHESTRATOR_SQLITE_JOURNAL"
JOURNAL_MODES = ("wal", "delete", "truncate", "persist")
class Policy(NamedTuple):
    """How a SQLite file is opened: its journal mode, whether reads map it into memory, whether
    writers take the cross-host lease, and the file system that decided it."""

    path: str
    filesystem: FileSystem
    journal: str
    mmap: bool
    lease: bool
    #: writes only from the host that wrote last (the file system's locks are each host's own)
    one_host: bool = False


def policy_for(path: str) -> Policy:
    """The policy for the SQLite file at `path`, from the file system under it and the override;
    says once per process what a network file system changes."""
    return _policy(os.path.realpath(path), os.environ.get(JOURNAL_ENV, "").strip().lower())


@lru_cache(maxsize=32)
def _policy(path: str, override: str) -> Policy:
    fs = filesystem_of(path)
    if override and override not in JOURNAL_MODES:
        raise sqlite3.OperationalError(
            f"{JOURNAL_ENV}={override} is not a journal mode; use one of {', '.join(JOURNAL_MODES)}, "
            f"or unset it")
    journal = override or ("delete" if fs.network else "wal")
    lease = fs.network and journal != "wal"
    policy = Policy(path, fs, journal, mmap=not fs.network, lease=lease, one_host=lease and fs.local_locks)
    if override:
        say(f"{path}: journal mode {journal}, as {JOURNAL_ENV} says (the file system is {fs.name})"
             + ("; no writer lease: only one host may write it" if fs.network and journal == "wal" else ""))
    elif fs.network:
        say(f"{path} lies on {fs.name}, a network file system: commands take turns through "
             f"{os.path.basename(path)}.writer (rollback journal, no WAL); a group that shares results "
             f"should use a database server (docs/shared-results.md)"
             + ("; its locks are each host's own, so only one host may write it" if policy.one_host else ""))
    return policy


def say(line: str) -> None:
    """One line to stderr, as the orchestrator's own."""
    print(f"[orchestrator] {line}", file=sys.stderr)


def path_of(conn: sqlite3.Connection) -> str:
    """The file of a connection's main database ('' in memory)."""
    for _, name, file in conn.execute("PRAGMA database_list"):
        if name == "main":
            return file or ""
    return ""


def apply_pragmas(conn: sqlite3.Connection) -> None:
    """Per connection: wait for locks rather than fail, the policy's journal mode (switched by one
    process at a time), durability to match, foreign keys, memory-mapped reads where safe."""
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    path = path_of(conn)
    policy = policy_for(path) if path else None
    journal = policy.journal if policy else "wal"
    if path and conn.execute("PRAGMA journal_mode").fetchone()[0] != journal:
        with setup_lock(path):
            _switch_journal(conn, path, journal)
    # WAL with NORMAL cannot corrupt the file; a commit lost to a power cut only leaves its run
    # uncollected, and the next `collect` lands it again from its result.json. The rollback
    # journal needs FULL for that.
    conn.execute(f"PRAGMA synchronous = {'NORMAL' if journal == 'wal' else 'FULL'}")
    conn.execute("PRAGMA foreign_keys = ON")
    # Reads through memory-mapped pages instead of copies into SQLite's small page cache: a
    # summary over 100,000 runs visits ~180 MB of pages (its query 2.4 s -> 1.7 s; docs/scale.md).
    # Never on a network file system, whose pages another host may change under the map.
    conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES if policy is None or policy.mmap else 0}")


def _switch_journal(conn: sqlite3.Connection, path: str, journal: str) -> None:
    """Sets the journal mode, retried while another connection holds the file (SQLite answers
    BUSY at once here, without its busy handler), up to BUSY_TIMEOUT_S."""
    deadline, pause, why = time.monotonic() + BUSY_TIMEOUT_S, 0.005, ""
    while True:
        try:
            mode = conn.execute(f"PRAGMA journal_mode = {journal}").fetchone()[0]
            conn.commit()  # ends the lease, if the switch took one
            if mode == journal:
                return
            why = f"it stayed {mode}"
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):  # (a refused lease says neither)
                raise
            why = str(exc)
        if time.monotonic() > deadline:
            raise sqlite3.OperationalError(
                f"could not switch {path} to journal mode {journal} in {BUSY_TIMEOUT_S:.0f} s ({why}): "
                f"another process keeps it open; try again when it ends")
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


# --- the setup lock: one process at a time switches a journal or makes or upgrades the schema ---

_setup_held: dict[str, tuple[int, int]] = {}
_setup_guard = threading.RLock()


@contextmanager
def setup_lock(path: str) -> Iterator[None]:
    """Holds `<path>.lock` (flock, exclusive) for the block; re-entrant within a process. Where
    the lock file cannot be made (a read-only directory: nobody writes there) or the file system
    has no flock, the block runs without it — the retries and the writer lease still hold."""
    path = os.path.realpath(path)
    with _setup_guard:
        fd, depth = _setup_held.get(path, (-1, 0))
        if depth == 0:
            fd = _take_flock(path + ".lock")
        _setup_held[path] = (fd, depth + 1)
        try:
            yield
        finally:
            fd, depth = _setup_held.pop(path)
            if depth > 1:
                _setup_held[path] = (fd, depth - 1)
            elif fd >= 0:
                os.close(fd)  # releases the flock


def _take_flock(lock_path: str) -> int:
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_CREAT, 0o666)
    except OSError:
        return -1
    deadline, pause = time.monotonic() + BUSY_TIMEOUT_S, 0.002
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise sqlite3.OperationalError(
                    f"{lock_path} was held for {BUSY_TIMEOUT_S:.0f} s by another process setting up the "
                    f"database; try again when it ends") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
        except OSError:  # ENOLCK, ENOSYS, EOPNOTSUPP: no flock on this file system
            os.close(fd)
            return -1


def damaged(message: str) -> bool:
    """Whether SQLite's message says the file itself is damaged."""
    return "malformed" in message


def damaged_way_out(path: str) -> str:
    return (f"{path} is damaged (SQLite: database disk image is malformed); nothing was changed: keep a copy, "
            f"then recover what it holds (sqlite3 {path} .recover | sqlite3 recovered.db) or restore a "
            f"backup, and move the damaged file away (a new one is made in its place); "
            f"then `orchestrator collect --all` lands every run again from its result.json")
