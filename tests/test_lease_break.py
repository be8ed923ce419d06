"""Breaking an abandoned lease when the breaker itself is stopped or killed inside its break
(issue 35, round 3: /tmp/rl_scratch guard.py, dead_guard.py). On this machine's disk, taken as
a network file system; the lease over two real GlusterFS mounts is test_shared_fs.py's."""
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from test_db_sharing import _leased, _leased_with_table, _other_host_holds

from orchestrator.store import filesystems, sqlite_break, sqlite_lease, sqlite_sharing


@pytest.fixture
def quick(monkeypatch):
    """Leases judged abandoned after 0.3 s unrefreshed, break guards of other hosts after 0.3 s."""
    monkeypatch.setattr(sqlite_lease, "LEASE_STALE_S", 0.3)
    monkeypatch.setattr(sqlite_lease, "LEASE_HEARTBEAT_S", 0.05)
    monkeypatch.setattr(sqlite_break, "GUARD_STALE_S", 0.3)


def _stop_breaker_inside(monkeypatch, lease, resume):
    """Thread B, once it holds the guard and compared the lease with its judgement, stops until
    `resume` is set, then goes on moving the lease aside."""
    real = sqlite_break.remove_if

    def stopped(file, holder, stamp):
        if threading.current_thread().name == "B" and file == lease:
            resume.wait(20)
        return real(file, holder, stamp)
    monkeypatch.setattr(sqlite_break, "remove_if", stopped)


def _take(path, name, holders, log, wait_s, hold_s):
    lease = sqlite_lease._Lease(path)
    try:
        lease.acquire(wait_s=wait_s)
    except sqlite_lease.LeaseRefused as exc:
        log.append(f"{name} refused: {exc}")
        return
    holders.append(name)
    log.append(f"{name} holds with {sorted(holders)}")
    time.sleep(hold_s)
    holders.remove(name)
    lease.release()


def test_a_stopped_breakers_guard_on_this_host_is_never_cleared_and_the_refusal_names_it(
        tmp_path, quick, monkeypatch):
    """The old code cleared a live breaker's guard after the stale time; the breaker then went
    on and moved aside the lease taken since (same inode number): two holders."""
    path, lease, resume = str(tmp_path / "results.db"), str(tmp_path / "results.db.writer"), threading.Event()
    _other_host_holds(tmp_path / "results.db.writer", refresh=False)  # its holder died
    _stop_breaker_inside(monkeypatch, lease, resume)
    holders, log = [], []
    b = threading.Thread(target=_take, name="B", args=(path, "B", holders, log, 20, 0.2))
    b.start()
    time.sleep(0.8)  # B judged the lease abandoned and stopped inside its break
    a = threading.Thread(target=_take, name="A", args=(path, "A", holders, log, 1.0, 0.2))
    a.start()
    a.join(20)
    resume.set()
    b.join(20)
    assert log[0].startswith("A refused:") and "results.db.writer.breaking (a breaker's guard, by" in log[0]
    assert log[1:] == ["B holds with ['B']"]


def test_a_breaker_stopped_past_its_guard_never_removes_the_lease_taken_since(tmp_path, quick, monkeypatch):
    """B (another host, as far as A can tell) stops inside its break; A clears B's old guard,
    breaks the dead lease and takes its own; B goes on: the file it moves aside is not the one it
    judged (whole stamp and token), so it is put back, and B waits for A."""
    path, lease, resume = str(tmp_path / "results.db"), str(tmp_path / "results.db.writer"), threading.Event()
    _other_host_holds(tmp_path / "results.db.writer", refresh=False)
    _stop_breaker_inside(monkeypatch, lease, resume)
    real_who = sqlite_break.who
    monkeypatch.setattr(sqlite_break, "who", lambda: (
        ("bob", "login2") if threading.current_thread().name == "B" else real_who()))
    holders, log = [], []
    b = threading.Thread(target=_take, name="B", args=(path, "B", holders, log, 20, 0.2))
    b.start()
    time.sleep(0.8)
    a = threading.Thread(target=_take, name="A", args=(path, "A", holders, log, 20, 1.0))
    a.start()
    while not holders and a.is_alive():
        time.sleep(0.01)
    resume.set()
    a.join(20), b.join(20)
    assert log == ["A holds with ['A']", "B holds with ['B']"]


def test_a_lease_rewritten_in_place_is_not_the_one_judged(tmp_path):
    """An inode number is reused (ext4, XFS, NFS, GPFS): the old code compared only that."""
    lease = tmp_path / "results.db.writer"
    lease.write_text(json.dumps({"host": "login1", "pid": 4242, "token": "old"}))
    holder, stamp = sqlite_break.read_lease(str(lease))
    lease.write_text(json.dumps({"host": "login2", "pid": 77, "token": "new"}))  # the same inode
    assert not sqlite_break.remove_if(str(lease), holder, stamp)
    assert json.loads(lease.read_text())["token"] == "new"


def test_a_guard_left_by_a_breaker_killed_on_another_host_is_cleared_by_the_next_command(tmp_path):
    """The old code judged a guard only from its first look in each process (20 s), so that three
    commands in a row were each refused; judged by its age on the file system's clock, the first
    command clears it."""
    path = tmp_path / "results.db"
    (tmp_path / "results.db.writer").write_text(json.dumps(  # this host's dead holder: broken at once
        {"host": os.uname().nodename, "pid": 2 ** 22 + 1, "user": "alice", "since": 0, "token": "t"}))
    guard = tmp_path / "results.db.writer.breaking"
    guard.write_text(json.dumps({"host": "login1", "pid": 4242, "user": "alice", "token": "g"}))
    old = time.time() - 3 * sqlite_break.GUARD_STALE_S
    os.utime(guard, (old, old))
    code = ("import sys; from orchestrator.store import sqlite_lease\n"
            f"l = sqlite_lease._Lease({str(path)!r})\n"
            "try:\n    l.acquire(wait_s=3); l.release(); print('took')\n"
            "except sqlite_lease.LeaseRefused as e:\n    print('refused:', e)\n")
    said = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip()
            for _ in range(3)]
    assert said == ["took"] * 3
    assert [n for n in os.listdir(tmp_path) if ".writer" in n] == []  # no lease, guard, or probe left


@pytest.mark.parametrize("line, local", [
    ("alice@login:/data /m fuse.sshfs rw 0 0", True),
    ("smbnetfs /m fuse.smbnetfs rw 0 0", True),
    ("nas:/export /m nfs4 rw,vers=4.2,local_lock=all 0 0", True),
    ("nas:/export /m nfs rw,vers=3,local_lock=none 0 0", False),
    ("10.0.0.5@o2ib:/lustre /m lustre rw,localflock 0 0", True),
    ("10.0.0.5@o2ib:/lustre /m lustre rw,flock 0 0", False),
    ("gluster1:/vol0 /m fuse.glusterfs rw,user_id=0 0 0", False),
    ("mfs#mfsmaster:9421 /m fuse rw 0 0", False),
])
def test_the_mount_table_says_whose_locks_are_each_hosts_own(line, local):
    fs = filesystems.classify(filesystems.parse_mounts(line)[0], None)
    assert fs.network and fs.local_locks is local


@pytest.fixture
def on_sshfs(monkeypatch):
    """Every file taken as lying on an sshfs mount, whose POSIX locks stay on each host."""
    monkeypatch.setattr(sqlite_sharing, "filesystem_of",
                        lambda path: filesystems.FileSystem("fuse.sshfs", True, "mount table", local_locks=True))
    sqlite_sharing._policy.cache_clear()
    yield
    sqlite_sharing._policy.cache_clear()


def test_where_locks_are_each_hosts_own_only_the_host_that_wrote_last_may_write(tmp_path, on_sshfs, monkeypatch):
    """A holder stopped between its fence and its commit could commit after another host broke
    its lease, and there no shared lock stops it: so a second host is refused before it writes."""
    con = _leased_with_table(tmp_path)  # written from this host
    con.execute("INSERT INTO t VALUES (1)")
    con.commit()
    here = sqlite_lease.who
    monkeypatch.setattr(sqlite_lease, "who", lambda: ("bob", "login2"))  # the same file, from login2
    other = _leased(str(tmp_path / "results.db"))
    assert other.execute("SELECT count(*) FROM t").fetchone() == (1,)  # reads: as before
    with pytest.raises(sqlite_lease.LeaseRefused) as refused:
        other.execute("INSERT INTO t VALUES (2)")
    said = str(refused.value)
    assert f"whose locks are each host's own, and {socket.gethostname()} wrote it last" in said
    assert "nothing was written" in said and "results.db.written-" in said and "\n" not in said
    other.rollback()
    assert not (tmp_path / "results.db.writer").exists()
    monkeypatch.setattr(sqlite_lease, "who", here)
    con.execute("INSERT INTO t VALUES (3)")  # the host that wrote last still writes
    con.commit()
    assert con.execute("SELECT x FROM t").fetchall() == [(1,), (3,)]
