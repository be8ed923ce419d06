"""How one SQLite results file is opened so that any number of commands may share it.

Two problems, two mechanisms (README, "Shared results"; the measurements behind them:
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
  is broken; on the holder's own host, at once when its process is gone.
- each holder sees what the previous one wrote: the releasing holder leaves the file's change
  counter and size in the *name* of a file, `<file>.written-<inode>-<counter>-<pages>` (a
  directory listing is fresh on another host where a file's content may not be: measured), and
  the next, once it holds the lease, drops this host's cached pages of the file and waits until
  it sees that counter and size, or refuses before reading or writing anything.
The lease is taken where SQLite itself prepares a statement (an authorizer on every connection
to such a file, with the statement cache off so that every statement is prepared), so no command
reads or writes without it.

`ORCHESTRATOR_SQLITE_JOURNAL` (wal, delete, truncate or persist) overrides the journal mode
for a site that knows better, said once; with `wal` there is no lease (WAL cannot work across
hosts at all, so choosing it says one host writes). This module imports only the standard library
(status reads through it without SQLAlchemy).
"""
from __future__ import annotations

import fcntl
import getpass
import json
import os
import socket
import sqlite3
import sys
import threading
import time
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Iterator, NamedTuple, Optional

from .filesystems import FileSystem, filesystem_of

#: How long a connection waits for another writer (SQLite's busy timeout, the setup lock and the
#: writer lease alike) before giving up.
BUSY_TIMEOUT_S = 30.0
#: How much of a SQLite file on a local disk reads map into memory.
MMAP_BYTES = 1 << 30
#: The override of the journal mode, and the modes it may name.
JOURNAL_ENV = "ORCHESTRATOR_SQLITE_JOURNAL"
JOURNAL_MODES = ("wal", "delete", "truncate", "persist")
#: A lease's holder refreshes it this often; a lease unchanged for LEASE_STALE_S is abandoned.
LEASE_HEARTBEAT_S = 2.0
LEASE_STALE_S = 20.0
#: How long a new lease holder waits for this host's view of the file to show the last commit.
FRESH_WAIT_S = 5.0


class Policy(NamedTuple):
    """How a SQLite file is opened: its journal mode, whether reads map it into memory, whether
    writers take the cross-host lease, and the file system that decided it."""

    path: str
    filesystem: FileSystem
    journal: str
    mmap: bool
    lease: bool


class LeaseRefused(sqlite3.OperationalError):
    """Another host (or process) holds the lease past the wait, or this host's view of the file
    lags behind the last holder's: nothing was read or written. The message names who and what
    to do."""


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
    policy = Policy(path, fs, journal, mmap=not fs.network, lease=fs.network and journal != "wal")
    if override:
        _say(f"{path}: journal mode {journal}, as {JOURNAL_ENV} says (the file system is {fs.name})"
             + ("; no writer lease: only one host may write it" if fs.network and journal == "wal" else ""))
    elif fs.network:
        _say(f"{path} lies on {fs.name}, a network file system: commands take turns through "
             f"{os.path.basename(path)}.writer (rollback journal, no WAL); a group that shares results "
             f"should use a database server (README, \"Shared results\")")
    return policy


def _say(line: str) -> None:
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
    # summary over 100,000 runs visits ~180 MB of pages (its query 2.4 s -> 1.7 s; README, "Scale").
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
            if isinstance(exc, LeaseRefused) or "locked" not in str(exc) and "busy" not in str(exc):
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


# --- the writer lease: one writer at a time, across hosts ---------------------------------------

def _header_state(path: str, drop_cache: bool) -> tuple[int, int, int]:
    """(inode, change counter, size in pages) of a SQLite file as this host sees it now, from its
    header (a rollback-journal file keeps both there); with `drop_cache`, this host's cached pages
    of it are dropped first, so that the read goes to the file system."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return (0, 0, 0)
    try:
        if drop_cache:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        header = os.pread(fd, 32, 0)
        if len(header) < 32:
            return (os.fstat(fd).st_ino, 0, 0)
        return (os.fstat(fd).st_ino, int.from_bytes(header[24:28], "big"), int.from_bytes(header[28:32], "big"))
    finally:
        os.close(fd)


class _Lease:
    """This process's hold on `<path>.writer`, counted per connection that holds it."""

    def __init__(self, path: str) -> None:
        self.path, self.file = path, path + ".writer"
        self.folder, base = os.path.split(path)
        self.record = base + ".written-"  # + "<inode>-<change counter>-<pages>"
        self.holders = 0
        self.token = ""
        self.guard = threading.Lock()
        self.stop: Optional[threading.Event] = None

    def acquire(self, wait_s: Optional[float] = None) -> None:
        with self.guard:
            if self.holders:
                self.holders += 1
                return
            self._take(BUSY_TIMEOUT_S if wait_s is None else wait_s)
            try:
                self._check_fresh()
            except BaseException:
                self._drop()
                raise
            self.holders = 1

    def release(self) -> None:
        with self.guard:
            if not self.holders:
                return
            self.holders -= 1
            if self.holders:
                return
            self._record()
            self._drop()

    def _record(self) -> None:
        """Leaves what this writer left the file at for the next, in a file's *name*: another
        host's client may show a replaced or rewritten file's old content for a while (measured
        on GlusterFS: a file replaced by rename read stale on the other mount 199 times in 200,
        one rewritten in place 1 in 200), while a directory's listing was never stale."""
        state = "-".join(str(v) for v in _header_state(self.path, drop_cache=False))
        user, host = who()
        try:
            records = self._records()
            if [name for _, _, name in records] == [self.record + state]:
                return  # a reader's turn: the file is as the last holder left it
            with open(os.path.join(self.folder, self.record + state), "w") as f:
                json.dump({"host": host, "pid": os.getpid(), "user": user, "at": time.time()}, f)
            for _, _, name in records:
                if name != self.record + state:
                    os.unlink(os.path.join(self.folder, name))
        except OSError:
            pass  # the next writer then checks nothing, or an older state; it still writes alone

    def _records(self) -> list[tuple[tuple[int, int, int], str, str]]:
        """The states the last writers recorded: (inode, counter, pages), the file's name, its path."""
        found = []
        for name in os.listdir(self.folder or "."):
            if name.startswith(self.record):
                try:
                    ino, counter, pages = (int(v) for v in name[len(self.record):].split("-"))
                except ValueError:
                    continue
                found.append(((ino, counter, pages), os.path.join(self.folder, name), name))
        return found

    def _take(self, wait_s: float) -> None:
        user, host = who()
        me = {"host": host, "pid": os.getpid(), "user": user, "since": time.time()}
        deadline, pause = time.monotonic() + wait_s, 0.01
        seen, seen_at = None, time.monotonic()
        while True:
            me["token"] = os.urandom(8).hex()
            try:
                fd = os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                holder, stamp = _read_lease(self.file)
                if holder is None:  # removed between the two calls: try again
                    continue
                now = time.monotonic()
                if stamp != seen:
                    seen, seen_at = stamp, now
                gone = holder.get("host") == socket.gethostname() and not _alive(holder.get("pid"))
                if gone or now - seen_at > LEASE_STALE_S:
                    _break(self.file, holder)
                    continue
                if now > deadline:
                    raise LeaseRefused(_refusal(self.path, holder, wait_s))
                time.sleep(pause)
                pause = min(pause * 2, 0.25)
                continue
            except OSError as exc:
                raise LeaseRefused(
                    f"cannot make the lease {self.file} ({exc.strerror}): nothing was read or written; make "
                    f"its directory writable for every user who collects, or use a database server "
                    f"(README, \"Shared results\")") from exc
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.token = me["token"]
            self.stop = threading.Event()
            threading.Thread(target=_heartbeat, args=(self.file, self.stop), daemon=True,
                             name="writer-lease").start()
            return

    def _check_fresh(self) -> None:
        """Waits until this host sees the file as the last writer left it (its recorded change
        counter and size, or a later one), dropping cached pages before each look; refuses after
        FRESH_WAIT_S. A record of another file (another inode: the file was moved away and made
        again) is no measure."""
        records = self._records()
        if not records:
            return  # no writer recorded one yet
        want, record, _ = max(records)
        deadline = time.monotonic() + FRESH_WAIT_S
        while True:
            seen = _header_state(self.path, drop_cache=True)
            if seen[0] != want[0] or seen[1:] == want[1:] or seen[1] > want[1]:
                return
            if time.monotonic() > deadline:
                try:
                    with open(record) as f:
                        last = json.load(f).get("host", "?")
                except (OSError, ValueError):
                    last = "?"
                raise LeaseRefused(
                    f"this host's view of {self.path} lags behind the last writer's ({last}: change {want[1]}, "
                    f"{want[2]} pages; seen here: change {seen[1]}, {seen[2]} pages, after {FRESH_WAIT_S:.0f} s): "
                    f"nothing was read or written; try again, or write from {last}, or use a database server "
                    f"(README, \"Shared results\")")
            time.sleep(0.1)

    def _drop(self) -> None:
        if self.stop is not None:
            self.stop.set()
            self.stop = None
        holder, _ = _read_lease(self.file)
        if holder is not None and holder.get("token") == self.token:
            try:
                os.unlink(self.file)
            except FileNotFoundError:
                pass
        self.token = ""


def who() -> tuple[str, str]:
    """This process's user and host, as a lease names its holder and the database its submitter."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no name for this uid
        user = str(os.getuid())
    return user, socket.gethostname()


def _alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError, OverflowError):
        return True  # another user's process, or not a pid: assume alive
    return True


def _read_lease(file: str) -> tuple[Optional[dict[str, Any]], Any]:
    """The lease's holder and a stamp that changes whenever it is refreshed or replaced."""
    try:
        with open(file) as f:
            st = os.fstat(f.fileno())
            text = f.read()
    except FileNotFoundError:
        return None, None
    try:
        holder = json.loads(text)
    except ValueError:  # being written right now
        holder = {}
    return holder, (st.st_ino, st.st_mtime_ns, st.st_size)


def _break(file: str, holder: dict[str, Any]) -> None:
    """Removes an abandoned lease: renamed aside first, so that of two processes breaking it at
    once only one removes it."""
    aside = f"{file}.broken.{os.getpid()}.{os.urandom(4).hex()}"
    try:
        os.rename(file, aside)
    except FileNotFoundError:
        return
    _say(f"broke the abandoned lease of {holder.get('host')} (pid {holder.get('pid')})")
    try:
        os.unlink(aside)
    except OSError:
        pass


def _heartbeat(file: str, stop: threading.Event) -> None:
    while not stop.wait(LEASE_HEARTBEAT_S):
        try:
            os.utime(file)
        except OSError:
            return


def _refusal(path: str, holder: dict[str, Any], wait_s: float) -> str:
    since = holder.get("since")
    held = f", for {time.time() - since:.0f} s" if isinstance(since, (int, float)) else ""
    return (f"{path} is in use by {holder.get('host', '?')} (pid {holder.get('pid', '?')}, user "
            f"{holder.get('user', '?')}{held}); waited {wait_s:.0f} s, read and wrote nothing: try again when it "
            f"ends, or give this host its own results file (ORCHESTRATOR_DB=sqlite:////local/disk/results.db), "
            f"or share results through a database server (README, \"Shared results\")")


_leases: dict[str, _Lease] = {}
_leases_guard = threading.Lock()


def lease_of(path: str) -> _Lease:
    path = os.path.realpath(path)
    with _leases_guard:
        if path not in _leases:
            _leases[path] = _Lease(path)
        return _leases[path]


@contextmanager
def lease_held(path: str) -> Iterator[None]:
    """Holds the writer lease of the file at `path` for the block, where its policy takes one
    (making or upgrading the schema: what a reader on another host must not see half done)."""
    if not policy_for(path).lease:
        yield
        return
    lease = lease_of(path)
    lease.acquire()
    try:
        yield
    finally:
        lease.release()


class LeasedConnection(sqlite3.Connection):
    """A connection to a file on a network file system: takes the lease when it first prepares a
    statement (SQLite's authorizer is asked at every prepare; connect_args turns the statement
    cache off, so that none is skipped), gives it back after its commit, rollback or close."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lease: Optional[_Lease] = None
        self._holds = False
        self._refused: Optional[LeaseRefused] = None
        path = path_of(self)
        if path:
            self._lease = lease_of(path)
            self.set_authorizer(self._authorize)

    def _authorize(self, action: int, arg1: Any, arg2: Any, dbname: Any, source: Any) -> int:
        if not self._holds and self._lease is not None:
            try:
                self._lease.acquire()
            except LeaseRefused as exc:  # an authorizer cannot raise: said by execute instead
                self._refused = exc
                return sqlite3.SQLITE_DENY
            self._holds = True
        return sqlite3.SQLITE_OK

    def _give_back(self) -> None:
        if self._holds and self._lease is not None:
            self._holds = False
            self._lease.release()

    def commit(self) -> None:
        try:
            super().commit()
        finally:
            if not self.in_transaction:
                self._give_back()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self._give_back()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._give_back()

    def cursor(self, factory: Any = None) -> sqlite3.Cursor:
        return super().cursor(factory or LeasedCursor)

    def execute(self, *args: Any) -> sqlite3.Cursor:
        return self.cursor().execute(*args)

    def executemany(self, *args: Any) -> sqlite3.Cursor:
        return self.cursor().executemany(*args)

    def refused(self, exc: sqlite3.DatabaseError) -> BaseException:
        """What a statement's failure means: the lease's refusal where that denied it."""
        refused, self._refused = self._refused, None
        return refused if refused is not None else exc


class LeasedCursor(sqlite3.Cursor):
    """Says a refused lease as itself, not as SQLite's 'not authorized'."""

    def execute(self, *args: Any) -> "LeasedCursor":
        try:
            return super().execute(*args)
        except sqlite3.DatabaseError as exc:
            said = self.connection.refused(exc)
            if said is exc:
                raise
            raise said from None

    def executemany(self, *args: Any) -> "LeasedCursor":
        try:
            return super().executemany(*args)
        except sqlite3.DatabaseError as exc:
            said = self.connection.refused(exc)
            if said is exc:
                raise
            raise said from None


def connect_args(path: str) -> dict[str, Any]:
    """sqlite3.connect's extra arguments for the file at `path`: the leased connection where
    the policy takes a lease."""
    return {"factory": LeasedConnection, "cached_statements": 0} if policy_for(path).lease else {}


def damaged(message: str) -> bool:
    """Whether SQLite's message says the file itself is damaged."""
    return "malformed" in message


def damaged_way_out(path: str) -> str:
    return (f"{path} is damaged (SQLite: database disk image is malformed); nothing was changed: keep a copy, "
            f"then recover what it holds (sqlite3 {path} .recover | sqlite3 recovered.db) or restore a "
            f"backup, and move the damaged file away (a new one is made in its place); "
            f"`orchestrator collect` lands every run again from its result.json")
