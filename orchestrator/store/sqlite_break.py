"""Breaking an abandoned writer lease (sqlite_lease.py), and only that one: what a hostile review
found (issue 35) was a breaker stopped inside its break, or killed there, on another host.

- Breakers take turns through `<file>.breaking` (O_EXCL), which names its breaker (host, pid,
  token). A guard whose breaker is alive on this host is never cleared; one whose breaker is gone
  on this host is cleared at once; another host's is cleared once its mtime, against the file
  system's own clock (a probe file's mtime: no clock skew between hosts), is GUARD_STALE_S old.
  Breaking takes milliseconds, so one command's wait (BUSY_TIMEOUT_S) outlasts a dead guard.
- The lease is moved aside, then its whole stamp (inode, mtime_ns, size) and holder token are
  compared with what the breaker judged: an inode number alone is reused (ext4, XFS, NFS, GPFS).
  A file moved aside by mistake is put back (a hard link never replaces one made meanwhile)."""
from __future__ import annotations

import getpass
import json
import os
import socket
from contextlib import suppress
from typing import Any, Optional

from orchestrator.store import sqlite_sharing

#: A break guard untouched this long (on the file system's clock) was left by a dead breaker.
GUARD_STALE_S = 10.0
#: What a lease's holder record must hold, and of which type: anything else is no record.
HOLDER_FIELDS = {"host": str, "pid": int, "token": str}
Stamp = tuple[int, int, int]


def who() -> tuple[str, str]:
    """This process's user and host, as a lease names its holder and the database its submitter."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no name for this uid
        user = str(os.getuid())
    return user, socket.gethostname()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        pass  # another user's process, or not a pid: assume alive
    return True


def read_lease(file: str) -> tuple[Optional[dict[str, Any]], Optional[Stamp]]:
    """The holder record of a lease (or guard) file (None where its content is none: being
    written, or foreign) and a stamp that changes whenever it is refreshed or replaced;
    (None, None) where there is no such file."""
    try:
        with open(file, "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read(4096)
    except FileNotFoundError:
        return None, None
    except OSError:  # unreadable here: judged by its stamp alone
        try:
            st = os.stat(file)
        except OSError:
            return None, None
        data = b""
    try:
        holder = json.loads(data)
    except (ValueError, RecursionError):
        holder = None
    valid = isinstance(holder, dict) and all(
        type(holder.get(key)) is kind for key, kind in HOLDER_FIELDS.items())
    return (holder if valid else None), (st.st_ino, st.st_mtime_ns, st.st_size)


def break_lease(file: str, holder: Optional[dict[str, Any]], stamp: Stamp) -> bool:
    """Removes the lease judged abandoned (`holder`, `stamp`), and only that one; whether it did.
    Where another breaker's guard stands, judges that guard instead (clear_dead_guard)."""
    guard = file + ".breaking"
    user, host = who()
    me = {"host": host, "pid": os.getpid(), "user": user, "token": os.urandom(8).hex()}
    try:
        fd = os.open(guard, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        clear_dead_guard(guard)
        return False
    except OSError:
        return False
    try:
        os.write(fd, json.dumps(me).encode())
        broke = read_lease(file)[1] == stamp and remove_if(file, holder, stamp)
    finally:
        os.close(fd)
        mine, now = read_lease(guard)
        if mine is not None and mine["token"] == me["token"]:
            remove_if(guard, mine, now)  # never another breaker's guard, made after ours was cleared
    if broke:
        who_held = f"{holder['host']} (pid {holder['pid']})" if holder else "no holder record"
        sqlite_sharing.say(f"broke the abandoned lease of {who_held}")
    return broke


def guard_blocks(guard: str) -> str:
    """Who holds the break guard `guard` ('' where none does), for a refusal."""
    holder, stamp = read_lease(guard)
    if stamp is None:
        return ""
    by = f"{holder['host']} (pid {holder['pid']})" if holder else "no breaker record"
    return (f"; {guard} (a breaker's guard, by {by}) stands: remove it if no `orchestrator` "
            f"runs there")


def clear_dead_guard(guard: str) -> bool:
    """Removes a break guard whose breaker is gone: on this host, at once once its process has
    ended (never while it lives: it may be stopped); from another host, once it is GUARD_STALE_S
    old on the file system's clock. Whether it removed it."""
    holder, stamp = read_lease(guard)
    if stamp is None:
        return False
    if holder is not None and holder["host"] == who()[1]:
        dead = not alive(holder["pid"])
    else:
        dead = _fs_now(guard) - stamp[1] > GUARD_STALE_S * 1e9
    return dead and remove_if(guard, holder, stamp)


def _fs_now(near: str) -> int:
    """The file system's clock next to `near`, in ns: the mtime of a probe file made there."""
    probe = f"{near}.now.{os.getpid()}.{os.urandom(4).hex()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError:
        return 0  # cannot tell: the guard is not judged old
    try:
        return os.fstat(fd).st_mtime_ns
    finally:
        os.close(fd)
        with suppress(OSError):
            os.unlink(probe)


def remove_if(file: str, holder: Optional[dict[str, Any]], stamp: Stamp) -> bool:
    """Removes `file` if it is the one judged: moved aside first (of two processes removing it at
    once, only one does), then its whole stamp and holder token compared; another file moved
    aside by mistake is put back. Whether it removed it."""
    aside = f"{file}.broken.{os.getpid()}.{os.urandom(4).hex()}"
    try:
        os.rename(file, aside)
    except OSError:
        return False
    moved, moved_stamp = read_lease(aside)
    ours = moved_stamp == stamp and (moved or {}).get("token") == (holder or {}).get("token")
    if not ours:
        with suppress(OSError):  # EEXIST: a newer lease stands there; the one moved aside is lost
            os.link(aside, file)  # to its holder, whose fence sees it
    with suppress(OSError):
        os.unlink(aside)
    return ours
