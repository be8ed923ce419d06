"""The counts `status` reads (kept_counts, kept by SQLite's triggers on `runs`) on real result files
and real databases: after every way runs change (collected, failed, rerun, a launch's new attempt,
a state written by any writer, a run deleted, two collectors at once, an upgrade of a database that
had runs) they are exactly the latest runs counted; on PostgreSQL status counts the runs."""
import pytest

from orchestrator.store import db, launch_records, queries
from orchestrator.results.collector import collect
from orchestrator.store.sql_adapters import Rows
from db_urls import execute, is_sqlite, query
from result_factory import make_result, write_result
from test_collector import two_collectors_at_once

MODELS = ("lenet", "alexnet", "vgg16")
COUNTED = ("select sweep_id, state, coalesce(error_class, ''), count(*) from runs where latest "
           "group by sweep_id, state, coalesce(error_class, '')")


def assert_kept(url):
    """The kept counts are the counted ones (and status's query answers them); the counts."""
    counted = sorted(query(url, COUNTED))
    assert sorted(query(url, "select sweep_id, state, error_class, n from kept_counts where n > 0")) == counted
    Session = db.open_db(url)
    with Session() as session:
        answered = queries.latest_counts(Rows.of(session), None)
    Session.kw["bind"].dispose()
    assert sorted((r.sweep_id, r.state, r.error_class or "", r.n) for r in answered) == counted
    assert counted
    return counted


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path / 'results.db'}"


def test_the_counts_are_the_counted_ones_after_collects_failures_reruns_and_any_writer(tmp_path, sqlite_url):
    from types import SimpleNamespace

    from orchestrator.launch.submit_plan import new_run

    url, runs = sqlite_url, tmp_path / "runs"
    Session = db.open_db(url)  # a new database: made with the triggers at once
    results = [make_result(sweep="s1", model=MODELS[i % 3], repeat=i // 3, state="failed" if i in (4, 7) else "done")
               for i in range(12)]
    for result in results:
        write_result(runs, result)
    assert collect(Session, runs).added == 12
    assert ("s1", "failed", "out_of_memory", 2) in assert_kept(url)
    for i, state in ((4, "done"), (0, "failed")):  # a rerun lands: attempt 2 of two repeats
        write_result(runs, make_result(sweep="s2", model=MODELS[i % 3], repeat=i // 3, attempt=2, state=state))
    assert collect(Session, runs).added == 2
    assert ("s1", "done", "", 9) in assert_kept(url)
    opts = SimpleNamespace(backend=SimpleNamespace(name="local"), runs=str(runs))  # a launch's new attempt
    again = new_run("s2", results[1]["cell_id"], 0, 2, opts, ("u", "h"))
    with Session.begin() as session:
        launch_records.insert_runs(session, [again.row()], [(again.cell_id, again.repeat)])
    assert ("s2", "pending", "", 1) in assert_kept(url)
    Session.kw["bind"].dispose()
    execute(url, "update runs set state = 'lost', error_class = 'lost' where state = 'pending'",
            "update runs set error_class = 'diverged' where state = 'failed'",
            "update runs set observed_at = 1",  # no counted column: nothing moves
            "delete from metrics where run_id in (select id from runs where repeat = 3)",
            "delete from runs where repeat = 3")
    assert ("s2", "lost", "lost", 1) in assert_kept(url)


def test_two_collectors_at_once_keep_the_counts_exact(tmp_path, sqlite_url):
    runs, n = tmp_path / "runs", 40
    for i in range(n):
        write_result(runs, make_result(sweep=f"s{i % 2}", model=MODELS[i % 3], repeat=i // 3,
                                       state="failed" if i % 7 == 0 else "done"))
    outcomes = two_collectors_at_once(sqlite_url, runs, batch=3)  # both make the database, then land
    assert sum(added for added, _, _ in outcomes) == n
    assert sum(c[-1] for c in assert_kept(sqlite_url)) == n


def test_an_upgrade_counts_the_runs_already_there(tmp_path, sqlite_url):
    """A database at 0017 (no kept_counts) with runs: the upgrade to 0018 counts them and makes the
    triggers that keep them (a run landed after the upgrade is counted)."""
    from test_db import upgraded_from

    runs = tmp_path / "runs"
    for i in range(6):
        write_result(runs, make_result(sweep="s", model=MODELS[i % 3], repeat=i // 3, state="failed" if i == 2 else "done"))
    Session = db.open_db(sqlite_url)
    collect(Session, runs)
    Session.kw["bind"].dispose()
    upgraded_from(sqlite_url, "0017")
    assert sorted(assert_kept(sqlite_url)) == [("s", "done", "", 5), ("s", "failed", "out_of_memory", 1)]
    write_result(runs, make_result(sweep="s", model="lenet", repeat=9))
    Session = db.open_db(sqlite_url)
    collect(Session, runs)
    Session.kw["bind"].dispose()
    assert ("s", "done", "", 6) in assert_kept(sqlite_url)


def test_postgresql_keeps_no_counts_and_status_counts_the_runs(tmp_path, db_url):
    """On a server the table stays empty (no triggers: kept_counts.py says why) and the counts come
    from the runs."""
    if is_sqlite(db_url):
        assert "sqlite" in queries.KEPT_COUNTS
        return
    runs = tmp_path / "runs"
    for i in range(3):
        write_result(runs, make_result(sweep="s", model=MODELS[i], state="failed" if i == 0 else "done"))
    Session = db.open_db(db_url)
    collect(Session, runs)
    with Session() as session:
        answered = sorted(tuple(r) for r in queries.latest_counts(Rows.of(session), ["s"]))
    Session.kw["bind"].dispose()
    assert query(db_url, "select count(*) from kept_counts") == [(0,)]
    assert answered == [("s", "done", None, 2), ("s", "failed", "out_of_memory", 1)]
