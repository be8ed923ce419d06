"""The writer lease as a hostile schedule would test it (issue 35, item 2): two breakers of one
abandoned lease, a holder stalled past the stale time, lease files that hold no holder record, a
refusal said once, and commands that let the database go while they poll schedulers or draw.

In-process and in forked processes on this machine's disk, taken as a network file system
(test_db_sharing's `on_network_fs`); the same lease over two real GlusterFS mounts is
test_shared_fs.py's."""
import json
import multiprocessing
import os
import signal
import sqlite3
import threading

import pytest
from sqlalchemy import text
from test_db_sharing import _leased, _other_host_holds, on_network_fs  # noqa: F401 - a fixture
from result_factory import make_result, write_result
from test_report import Study

from orchestrator import cli
from orchestrator.results import collector
from orchestrator.store import db, sqlite_break, sqlite_lease, sqlite_sharing
from orchestrator.launch import tracking
from orchestrator.backends import backend_class
from orchestrator.report import build
from orchestrator.store.sql_adapters import Rows


@pytest.fixture
def quick(monkeypatch):
    """A lease judged abandoned after 0.3 s unrefreshed, refreshed every 0.05 s by a live holder."""
    monkeypatch.setattr(sqlite_lease, "LEASE_STALE_S", 0.3)
    monkeypatch.setattr(sqlite_lease, "LEASE_HEARTBEAT_S", 0.05)


def test_of_two_breakers_of_one_abandoned_lease_the_late_one_never_breaks_the_lease_made_since(
        tmp_path, quick, monkeypatch):
    """B judges the dead holder's lease abandoned, then stalls; meanwhile A breaks it and takes its
    own. The old code's B then moved A's fresh lease aside and took one too: two writers at once."""
    path = str(tmp_path / "results.db")
    _other_host_holds(tmp_path / "results.db.writer", refresh=False)  # its holder died
    b_judged, a_holds, b_holds = threading.Event(), threading.Event(), threading.Event()
    real, log = sqlite_lease._break, []

    def delayed(*args):
        if threading.current_thread().name == "B":
            b_judged.set()
            a_holds.wait(10)  # B stalls between its judgement and its break until A holds a lease
        else:
            b_judged.wait(10)
        return real(*args)
    monkeypatch.setattr(sqlite_lease, "_break", delayed)

    def take(name, then):
        lease = sqlite_lease._Lease(path)
        lease.acquire(wait_s=10)
        log.append(f"{name} took")
        then()
        log.append(f"{name} gives back")
        lease.release()
    a = threading.Thread(target=take, name="A", args=("A", lambda: (a_holds.set(), b_holds.wait(1.0))))
    b = threading.Thread(target=take, name="B", args=("B", b_holds.set))
    a.start(), b.start()
    a.join(20), b.join(20)
    assert log == ["A took", "A gives back", "B took", "B gives back"]
    assert not os.path.exists(tmp_path / "results.db.writer")


def _hold_then_commit(path, ready, go, said):
    """A writer that inserts a row, then (once told) commits it; says how the commit ended."""
    try:
        con = _leased(path)
        con.execute("INSERT INTO t VALUES (1)")
        ready.set()
        go.wait(60)
        con.commit()
        said.put("committed")
    except sqlite_lease.LeaseLost as exc:
        said.put(f"lost: {exc}")
    except BaseException as exc:  # noqa: BLE001
        said.put(f"{type(exc).__name__}: {exc}")


def test_a_holder_stopped_past_the_stale_time_does_not_commit_after_another_took_the_lease(
        tmp_path, on_network_fs, quick):
    path = str(tmp_path / "results.db")
    con = _leased(path)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    ctx = multiprocessing.get_context("fork")  # the child keeps the network policy and the quick lease
    ready, go, said = ctx.Event(), ctx.Event(), ctx.Queue()
    holder = ctx.Process(target=_hold_then_commit, args=(path, ready, go, said))
    holder.start()
    assert ready.wait(30)
    os.kill(holder.pid, signal.SIGSTOP)  # heartbeat and all
    try:
        mine = sqlite_lease.lease_of(path)
        mine.acquire(wait_s=30)  # judged abandoned after 0.3 s unchanged, broken, taken
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    go.set()
    outcome = said.get(timeout=60)
    holder.join(30)
    assert outcome.startswith("lost: ") and "rolled back" in outcome and "\n" not in outcome, outcome
    assert json.loads((tmp_path / "results.db.writer").read_text())["pid"] == os.getpid()  # still mine
    mine.release()
    assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)
    con.commit()


def test_a_heartbeat_that_cannot_refresh_the_lease_is_its_loss(tmp_path, on_network_fs, quick, monkeypatch):
    con = _leased(str(tmp_path / "results.db"))
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.execute("INSERT INTO t VALUES (1)")

    def stale(*args, **kwargs):
        raise OSError(116, "Stale file handle")
    monkeypatch.setattr(os, "utime", stale)  # ESTALE, as a network client answers
    with pytest.raises(sqlite_lease.LeaseLost, match="could not be refreshed: Stale file handle.*rolled back"):
        con.commit()
    monkeypatch.undo()
    assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)
    con.commit()


@pytest.mark.parametrize("content", [b"null", b"[1]", b"42", b'"x"', b"", b"\xff\xfe garbage \x00\x81"],
                         ids=["null", "list", "number", "string", "empty", "garbage"])
def test_a_lease_that_holds_no_holder_record_is_broken_after_the_stale_time(tmp_path, quick, content):
    (tmp_path / "results.db.writer").write_bytes(content)
    lease, ended = sqlite_lease._Lease(str(tmp_path / "results.db")), []

    def take():
        try:
            lease.acquire(wait_s=10)
            ended.append("took")
        except BaseException as exc:  # noqa: BLE001
            ended.append(f"{type(exc).__name__}: {exc}")
    taker = threading.Thread(target=take, daemon=True)  # the old code spun forever on `null`
    taker.start()
    taker.join(20)
    assert ended == ["took"]
    assert json.loads((tmp_path / "results.db.writer").read_text())["pid"] == os.getpid()
    lease.release()


def test_a_lease_that_holds_no_holder_record_is_waited_for_and_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_lease, "LEASE_STALE_S", 60)
    (tmp_path / "results.db.writer").write_bytes(b"[1]")
    with pytest.raises(sqlite_lease.LeaseRefused) as refused:
        sqlite_lease._Lease(str(tmp_path / "results.db")).acquire(wait_s=0.2)
    said = str(refused.value)
    assert "a lease that names no holder" in said and "waited 0 s" in said and "\n" not in said


def test_a_refused_lease_is_waited_for_once_and_said_in_one_line(tmp_path, on_network_fs, monkeypatch, capsys):
    """The old `status` waited 30 s in sqlite3, then again in open_db, and said 'waited 30 s'."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    db.open_db(url).kw["bind"].dispose()
    monkeypatch.setattr(sqlite_sharing, "BUSY_TIMEOUT_S", 0.2)
    waits, real = [], sqlite_lease._Lease._take

    def counted(self, wait_s):
        waits.append(wait_s)
        return real(self, wait_s)
    monkeypatch.setattr(sqlite_lease._Lease, "_take", counted)
    stop = _other_host_holds(tmp_path / "results.db.writer")
    try:
        for command in ("status", "results", "collect"):
            capsys.readouterr()
            waits.clear()
            (tmp_path / "runs").mkdir(exist_ok=True)
            assert cli.main([command, "--db", url, *(["--runs", str(tmp_path / "runs")] if command == "collect" else [])]) == 1
            lines = capsys.readouterr().err.strip().splitlines()
            assert len(waits) == 1, (command, waits)
            assert lines[-1].startswith(f"{tmp_path / 'results.db'} is in use by login1 (pid 4242"), (command, lines)
            assert [line for line in lines if "in use" in line] == lines[-1:]
    finally:
        stop.set()


def test_reconcile_lets_the_database_go_while_the_scheduler_answers(tmp_path, on_network_fs, monkeypatch):
    study = Study(tmp_path)
    study.cell(runs=["pending"], job_id="4242")
    path = os.path.realpath(tmp_path / "results.db")
    with study.factory.begin() as session:
        session.execute(text("UPDATE runs SET state = 'submitted', executor = 'slurm', submitted_at = 0"))
    slurm, held = backend_class("slurm")({}), []
    real = slurm.poll

    def poll(job_ids):  # the real sacct and squeue, asked while the lease is (not) held
        held.append(sqlite_lease.lease_of(path).holders)
        return real(job_ids)
    monkeypatch.setattr(slurm, "poll", poll)
    with study.factory() as session:
        tracking.reconcile(Rows.of(session), None, {"slurm": slurm})
    assert held == [0]


def test_a_report_lets_the_database_go_before_it_draws(tmp_path, on_network_fs, monkeypatch):
    study = Study(tmp_path)
    study.cell(runs=[{"images_per_sec": 100.0}, {"images_per_sec": 110.0}])
    path = os.path.realpath(tmp_path / "results.db")
    held, real = [], build.page.render

    def render(*args, **kwargs):
        held.append(sqlite_lease.lease_of(path).holders)
        return real(*args, **kwargs)
    monkeypatch.setattr(build.page, "render", render)
    with study.factory() as session:
        build.write_report(session, ["s1"], tmp_path / "report", 5.0)
    assert held == [0]


def test_a_collector_whose_lease_was_lost_before_its_commit_lands_the_batch_in_another_turn(
        tmp_path, on_network_fs, monkeypatch):
    runs = tmp_path / "runs"
    for i in range(5):
        write_result(runs, make_result(seed=i))
    factory = db.open_db(f"sqlite:///{tmp_path / 'results.db'}")
    real, commits = sqlite_lease._Lease.fence, []

    def fence(self):
        if not commits:  # the first commit finds its lease broken, as after a stall
            self.lost = "another process broke it and took its own"
        commits.append(self.path)
        return real(self)
    monkeypatch.setattr(sqlite_lease._Lease, "fence", fence)
    report = collector.collect(factory, runs)
    # the batch again in one more turn of the lease, not file by file (a turn each)
    assert (report.added, report.already, report.broken, len(commits)) == (5, 0, [], 2)
    with factory() as session:
        assert session.execute(text("SELECT count(*) FROM runs WHERE collected_at IS NOT NULL")).scalar() == 5


def test_a_holder_that_wrote_last_keeps_its_cached_pages_and_drops_them_once_another_wrote(
        tmp_path, on_network_fs, monkeypatch):
    """Dropping every cached page of the file at each turn made each turn read its pages again over
    the network (at 20,000 runs most of a collection's time); only another's commit needs it."""
    path = str(tmp_path / "results.db")
    con = _leased(path)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    drops, real = [], os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, at, n, advice: (drops.append(n), real(fd, at, n, advice))[1])
    con.execute("INSERT INTO t VALUES (1)")
    con.commit()
    assert drops and 0 not in drops  # the header's page alone, read afresh: nobody else wrote since
    other = sqlite_lease._Lease(os.path.realpath(path))  # another holder (as another host) writes
    other.acquire(wait_s=5)
    raw = sqlite3.connect(path)
    raw.execute("INSERT INTO t VALUES (2)")
    raw.commit()
    raw.close()
    other.release()
    drops.clear()
    assert con.execute("SELECT count(*) FROM t").fetchone() == (2,)
    con.commit()
    assert 0 in drops  # every cached page dropped before the read


def test_reconcile_never_overwrites_a_run_landed_while_it_looked(tmp_path, db_url, monkeypatch):
    """reconcile lets the database go between its read and its write: a collector may land a run
    meanwhile, and its verdict (here: running, from job.json) must not replace `done`, nor be
    counted as a change (the compare-and-set wrote nothing)."""
    study = Study(tmp_path, url=db_url)
    study.cell(runs=["pending"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "job.json").write_text(json.dumps({"node": "node07", "started_at": 1.7e9}))
    with study.factory.begin() as session:
        session.execute(text("UPDATE runs SET run_dir = :d"), {"d": str(run_dir)})
    real = tracking.evidence_in

    def landed_meanwhile(directory):
        with study.factory.begin() as session:  # another process's collector, while this one looks
            session.execute(text("UPDATE runs SET state = 'done', collected_at = 1.7e9"))
        return real(directory)
    monkeypatch.setattr(tracking, "evidence_in", landed_meanwhile)
    with study.factory() as session:
        assert tracking.reconcile(Rows.of(session)).changed == 0
    with study.factory() as session:
        assert session.execute(text("SELECT state, node FROM runs")).one() == ("done", None)


def test_a_stale_file_handle_while_taking_the_lease_is_looked_at_again(tmp_path, quick, monkeypatch):
    """GlusterFS answered ESTALE to a look at a lease another host had just removed: the old code
    ended `collect` with that traceback."""
    _other_host_holds(tmp_path / "results.db.writer", refresh=False)
    stale, real_open, real_os_open = [], open, os.open

    def estale_once(kind):
        if kind not in stale:
            stale.append(kind)
            raise OSError(116, "Stale file handle")

    def reading(file, *args, **kwargs):
        if str(file).endswith(".writer"):
            estale_once("read")
        return real_open(file, *args, **kwargs)

    def making(file, flags, *args):
        if str(file).endswith(".writer") and flags & os.O_EXCL and "read" in stale:
            estale_once("make")
        return real_os_open(file, flags, *args)
    monkeypatch.setattr(sqlite_break, "open", reading, raising=False)
    monkeypatch.setattr(os, "open", making)
    lease = sqlite_lease._Lease(str(tmp_path / "results.db"))
    lease.acquire(wait_s=10)
    assert stale == ["read", "make"]
    assert json.loads((tmp_path / "results.db.writer").read_text())["pid"] == os.getpid()
    lease.release()
