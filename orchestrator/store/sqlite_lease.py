"""The lease that makes hosts of a network file system take turns with one SQLite file, and the
connection that takes it (the why and the measurements: sqlite_sharing.py, docs/shared-results.md).

- The lease is `<file>.writer`, made with O_EXCL, naming its holder (host, process, user), kept
  fresh by a heartbeat, removed after the holder's transaction; others wait up to the busy
  timeout, then are refused in one line (LeaseRefused). A lease unrefreshed for LEASE_STALE_S
  is broken (on its holder's host, at once when the process is gone), compare-and-break: only
  the lease judged, never one made since. A holder fences itself: a lease broken by another, or
  that its heartbeat could not refresh, aborts the transaction before its commit (LeaseLost).
- The releasing holder leaves the file's state in a file's *name*,
  `<file>.written-<inode>-<counter>-<pages>`; the next holder waits until its view shows it.
- The connection that takes it when SQLite prepares its first statement, and gives it back at
  commit, rollback or close, is sqlite_connection.py's. Only the standard library.
"""
from __future__ import annotations

import errno
import json
import os
import sqlite3
import threading
import time
from contextlib import contextmanager, suppress
from typing import Any, Iterator, Optional

from orchestrator.store import sqlite_sharing
from orchestrator.store.sqlite_break import alive, break_lease as _break, guard_blocks, read_lease, remove_if, who
from orchestrator.store.sqlite_sharing import policy_for

__all__ = ["LeaseLost", "LeaseRefused", "lease_held", "lease_of", "who"]

#: A lease's holder refreshes it this often; a lease unchanged for LEASE_STALE_S is abandoned.
LEASE_HEARTBEAT_S = 2.0
LEASE_STALE_S = 20.0
#: How long a new lease holder waits for this host's view of the file to show the last commit.
FRESH_WAIT_S = 5.0


class LeaseRefused(sqlite3.OperationalError):
    """Another host (or process) holds the lease past the wait, or this host's view of the file
    lags behind the last holder's: nothing was read or written. The message names who and why."""


def _header_state(path: str, drop_cache: bool, span: int = 0) -> tuple[int, int, int]:
    """(inode, change counter, size in pages) of a SQLite file as this host sees it now, from its
    header (a rollback-journal file keeps both there); with `drop_cache`, this host's cached pages
    of it (its first `span` bytes; 0: all) are dropped first, so that the read goes to the file system."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return (0, 0, 0)
    try:
        if drop_cache:
            os.posix_fadvise(fd, 0, span, os.POSIX_FADV_DONTNEED)
        header = os.pread(fd, 32, 0).ljust(32, b"\0")  # a file shorter than a header: 0 and 0
        return (os.fstat(fd).st_ino, int.from_bytes(header[24:28], "big"), int.from_bytes(header[28:32], "big"))
    finally:
        os.close(fd)


class LeaseLost(sqlite3.OperationalError):
    """This process's lease was broken by another (it stalled past LEASE_STALE_S) or could not be
    refreshed (ESTALE, EIO): another host may write, so the transaction was rolled back uncommitted."""


class _Lease:
    """This process's hold on `<path>.writer`, counted per connection that holds it. While held:
    the lease file's descriptor and inode (what is ours: a file at the path with another inode
    is another's lease), and when the heartbeat last refreshed it."""

    def __init__(self, path: str) -> None:
        self.path, self.file = path, path + ".writer"
        self.folder, base = os.path.split(path)
        self.record = base + ".written-"  # + "<inode>-<change counter>-<pages>"
        self.holders = 0
        self.guard = threading.Lock()
        self.stop: Optional[threading.Event] = None
        self.fd, self.ino, self.beat_at, self.lost, self.token = -1, 0, 0.0, "", ""
        self.left = ""  # the record this process left last: while it is the newest, no other wrote since

    def acquire(self, wait_s: Optional[float] = None) -> None:
        with self.guard:
            if self.holders:
                self.holders += 1
                return
            self._take(sqlite_sharing.BUSY_TIMEOUT_S if wait_s is None else wait_s)
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
            if not self.lost:
                self._record()
            self._drop()

    def fence(self) -> None:
        """Raises LeaseLost unless the lease is still ours and was refreshed within half the stale
        time: a commit that follows a stall (or a dead heartbeat) must not land, since another
        host may have judged the lease abandoned, broken it and written since."""
        stalled = time.monotonic() - self.beat_at
        self._beat()
        if not self.lost and stalled > LEASE_STALE_S / 2:
            self.lost = f"unrefreshed for {stalled:.0f} s: this process stalled"
        if self.lost:  # said, as collect lands the batch again in silence (benchmarks/shared_fs.py counts it)
            sqlite_sharing.say(f"{self.path}: lost its writer lease before a commit ({self.lost}); rolled back")
            raise LeaseLost(
                f"{self.path}: this process lost its writer lease ({self.lost}); its transaction was rolled "
                f"back and nothing was written: run the command again")

    def _beat(self) -> None:
        """Refreshes the lease through its own descriptor (never another's file at the path); a
        lease whose path names another file, or that cannot be refreshed, is lost."""
        if self.fd < 0 or self.lost:
            return
        try:
            if os.stat(self.file).st_ino != self.ino:
                self.lost = "another process broke it and took its own"
                return
            os.utime(self.fd)
            self.beat_at = time.monotonic()
        except FileNotFoundError:
            self.lost = "another process broke it"
        except OSError as exc:
            self.lost = f"it could not be refreshed: {exc.strerror or exc}"

    def _heartbeat(self, stop: threading.Event) -> None:
        while not stop.wait(LEASE_HEARTBEAT_S) and not self.lost:
            self._beat()

    def _record(self) -> None:
        """Leaves what this writer left the file at for the next, in a file's *name*: another
        host's client may show a replaced or rewritten file's old content for a while (measured
        on GlusterFS: a file replaced by rename read stale on the other mount 199 times in 200,
        one rewritten in place 1 in 200), while a directory's listing was never stale."""
        state = "-".join(str(v) for v in _header_state(self.path, drop_cache=False))
        user, host = who()
        self.left = self.record + state
        try:
            records = self._records()
            if [name for _, name in records] == [self.record + state]:
                return  # a reader's turn: the file is as the last holder left it
            with open(os.path.join(self.folder, self.record + state), "w") as f:
                json.dump({"host": host, "pid": os.getpid(), "user": user, "at": time.time()}, f)
            for _, name in records:
                if name != self.record + state:
                    os.unlink(os.path.join(self.folder, name))
        except OSError:
            pass  # the next writer then checks nothing, or an older state; it still writes alone

    def _records(self) -> list[tuple[tuple[int, int, int], str]]:
        """The states the last writers recorded: (inode, counter, pages) and the file's name."""
        found = []
        for name in os.listdir(self.folder or "."):
            if name.startswith(self.record):
                try:
                    ino, counter, pages = (int(v) for v in name[len(self.record):].split("-"))
                except ValueError:
                    continue
                found.append(((ino, counter, pages), name))
        return found

    def _take(self, wait_s: float) -> None:
        user, host = who()
        deadline, pause = time.monotonic() + wait_s, 0.01
        seen, seen_at = None, time.monotonic()
        while True:
            token = os.urandom(8).hex()
            try:
                fd = os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                holder, stamp = read_lease(self.file)
                stamp = stamp or (0, 0, -1)  # removed between the two calls (or a dangling link)
                now = time.monotonic()
                if stamp != seen:
                    seen, seen_at = stamp, now
                gone = holder is not None and holder["host"] == host and not alive(holder["pid"])
                if (gone or now - seen_at > LEASE_STALE_S) and _break(self.file, holder, stamp):
                    continue
                if now > deadline:
                    raise LeaseRefused(_refusal(self.path, holder, wait_s) + guard_blocks(self.file + ".breaking"))
                time.sleep(pause)
                pause = min(pause * 2, 0.25)
                continue
            except OSError as exc:
                if exc.errno == errno.ESTALE and time.monotonic() < deadline:  # removed on another
                    time.sleep(pause)  # host as this one looked (GlusterFS says so): look again
                    continue
                raise LeaseRefused(
                    f"cannot make the lease {self.file} ({exc.strerror}): nothing was read or written; make "
                    f"its directory writable for every user who collects, or use a database server "
                    f"(docs/shared-results.md)") from exc
            self._hold(fd, {"host": host, "pid": os.getpid(), "user": user, "since": time.time(), "token": token})
            self.token = token
            return

    def _hold(self, fd: int, me: dict[str, Any]) -> None:
        """Writes this holder's record into the new lease and starts its heartbeat."""
        os.write(fd, json.dumps(me).encode())
        self.fd, self.ino, self.beat_at, self.lost = fd, os.fstat(fd).st_ino, time.monotonic(), ""
        self.stop = threading.Event()
        threading.Thread(target=self._heartbeat, args=(self.stop,), daemon=True, name="writer-lease").start()

    def _check_fresh(self) -> None:
        """Waits until this host sees the file as the last writer left it (its recorded change
        counter and size, or a later one), dropping cached pages before each look; refuses after
        FRESH_WAIT_S. A record of another file (another inode: moved away, made again) is no
        measure. Where the newest is the one this process left and the header, read afresh, still
        says so, nobody committed since, and its cached pages are the file's: none are dropped."""
        records = self._records()
        if not records:
            return  # no writer recorded one yet
        want, record = max(records)
        if record == self.left and _header_state(self.path, drop_cache=True, span=4096) == want:
            return
        deadline = time.monotonic() + FRESH_WAIT_S
        while True:
            seen = _header_state(self.path, drop_cache=True)
            if seen[0] != want[0] or seen[1:] == want[1:] or seen[1] > want[1]:
                return
            if time.monotonic() > deadline:
                last = _field(os.path.join(self.folder, record), "host")
                raise LeaseRefused(
                    f"this host's view of {self.path} lags behind the last writer's ({last}: change {want[1]}, "
                    f"{want[2]} pages; seen here: change {seen[1]}, {seen[2]} pages, after {FRESH_WAIT_S:.0f} s): "
                    f"nothing was read or written; try again, or write from {last}, or use a database server "
                    f"(docs/shared-results.md)")
            time.sleep(0.1)

    def check_one_host(self) -> None:
        """Refuses a write from a host other than the one that wrote last, where the file
        system's locks are each host's own (sqlite_sharing.py: a stopped holder's commit after
        its fence is covered by nothing else there)."""
        records = self._records()
        if not records:
            return
        record = os.path.join(self.folder, max(records)[1])
        last, here = _field(record, "host"), who()[1]
        if last not in (here, "?"):
            raise LeaseRefused(
                f"{self.path} lies on {policy_for(self.path).filesystem.name}, whose locks are each host's own, "
                f"and {last} wrote it last: writers on two hosts can corrupt it, so nothing was written; write "
                f"from {last}, or give this host its own results file, or use a database server; if {last} "
                f"writes it no more, remove {record} (docs/shared-results.md)")

    def _drop(self) -> None:
        """Stops the heartbeat and removes the lease, if it is still ours (by inode and token: a
        lease another process made after breaking ours is never removed)."""
        if self.stop is not None:
            self.stop.set()
            self.stop = None
        if self.fd >= 0:
            holder, stamp = read_lease(self.file)
            if stamp is not None and stamp[0] == self.ino and holder is not None and holder["token"] == self.token:
                remove_if(self.file, holder, stamp)
            os.close(self.fd)
        self.fd, self.ino = -1, 0


def _field(path: str, name: str) -> str:
    """One string field of a small JSON record file ('?' where it has none)."""
    record: Any = None
    with suppress(OSError, ValueError, RecursionError), open(path, "rb") as f:
        record = json.loads(f.read(4096))
    value = record.get(name) if isinstance(record, dict) else None
    return value if isinstance(value, str) else "?"


def _refusal(path: str, holder: Optional[dict[str, Any]], wait_s: float) -> str:
    if holder is None:
        by = f"a lease that names no holder ({os.path.basename(path)}.writer: being written, or not a lease)"
    else:
        since, user = holder.get("since"), holder.get("user")
        held = f", for {time.time() - since:.0f} s" if isinstance(since, (int, float)) else ""
        by = f"{holder['host']} (pid {holder['pid']}, user {user if isinstance(user, str) else '?'}{held})"
    return (f"{path} is in use by {by}; waited {wait_s:.0f} s, read and wrote nothing: try again when it "
            f"ends, or give this host its own results file (ORCHESTRATOR_DB=sqlite:////local/disk/results.db), "
            f"or share results through a database server (docs/shared-results.md)")


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
