"""The counts `status` reads (kept_counts, kept by SQLite's row triggers on `runs`; kept_count_deltas,
kept by PostgreSQL's statement triggers and summed) on real result files and real databases of
both kinds: after every way runs change (collected, failed, rerun, a launch's new attempt, a state
written by any writer, a run deleted, a copy, two collectors at once, an upgrade of a database that
had runs) they are exactly the latest runs counted."""
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


#: What the database keeps, as counts: kept_counts's rows, or the sum of kept_count_deltas's.
KEPT = {"sqlite": "select sweep_id, state, error_class, n from kept_counts where n > 0",
        "postgresql": "select sweep_id, state, error_class, sum(n) from kept_count_deltas "
                      "group by sweep_id, state, error_class having sum(n) > 0"}


def assert_kept(url):
    """The kept counts are the counted ones (and status's query answers them); the counts."""
    counted = sorted(query(url, COUNTED))
    assert sorted(query(url, KEPT["sqlite" if is_sqlite(url) else "postgresql"])) == counted
    other = "kept_count_deltas" if is_sqlite(url) else "kept_counts"  # the other database's way: unused
    assert query(url, f"select count(*) from {other}") == [(0,)]
    Session = db.open_db(url)
    with Session() as session:
        answered = queries.latest_counts(Rows.of(session), None)
    Session.kw["bind"].dispose()
    assert sorted((r.sweep_id, r.state, r.error_class or "", r.n) for r in answered) == counted
    assert counted
    return counted


def test_the_counts_are_the_counted_ones_after_collects_failures_reruns_and_any_writer(tmp_path, db_url):
    from types import SimpleNamespace

    from orchestrator.launch.submit_plan import new_run

    url, runs = db_url, tmp_path / "runs"
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


@pytest.mark.parametrize("batch", [3, 500])  # batches that interleave; one batch each
def test_two_collectors_at_once_keep_the_counts_exact(tmp_path, db_url, batch):
    sqlite_url = db_url
    runs, n = tmp_path / "runs", 40
    for i in range(n):
        write_result(runs, make_result(sweep=f"s{i % 2}", model=MODELS[i % 3], repeat=i // 3,
                                       state="failed" if i % 7 == 0 else "done"))
    outcomes = two_collectors_at_once(sqlite_url, runs, batch=batch)  # both make the database, then land
    assert sum(added for added, _, _ in outcomes) == n
    assert sum(c[-1] for c in assert_kept(sqlite_url)) == n


def test_an_upgrade_counts_the_runs_already_there(tmp_path, db_url):
    """A database at 0017 (no kept_counts) with runs: the upgrade to 0018 (SQLite) or 0021
    (PostgreSQL) counts them and makes the triggers that keep them (a run landed after the
    upgrade is counted)."""
    sqlite_url = db_url
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


def test_a_copy_keeps_the_counts_of_what_it_copies(tmp_path, db_url, other_db_url):
    """`db copy` writes runs through its own inserts: the destination's counts are its runs counted."""
    from orchestrator.store import db_copy

    runs = tmp_path / "runs"
    for i in range(6):
        write_result(runs, make_result(sweep=f"s{i % 2}", model=MODELS[i % 3], repeat=i // 3,
                                       state="failed" if i == 4 else "done"))
    Session = db.open_db(db_url)
    collect(Session, runs)
    Session.kw["bind"].dispose()
    db_copy.copy(db_url, other_db_url)
    assert assert_kept(other_db_url) == assert_kept(db_url)


def test_postgresql_sums_its_deltas_now_and_then_and_loses_no_count(tmp_path, db_url):
    """Past COMPACT_AFTER delta rows a statement's trigger sums them into one row per key; the
    counts stay the counted ones, and a statement that moves no count adds no row."""
    if is_sqlite(db_url):
        return
    from orchestrator.store import kept_counts

    runs = tmp_path / "runs"
    for i in range(9):
        write_result(runs, make_result(sweep="s", model=MODELS[i % 3], repeat=i // 3, state="failed" if i == 4 else "done"))
    Session = db.open_db(db_url)
    collect(Session, runs)
    Session.kw["bind"].dispose()
    before = query(db_url, "select count(*) from kept_count_deltas")
    execute(db_url, "update runs set observed_at = 1")
    assert query(db_url, "select count(*) from kept_count_deltas") == before
    flips = [f"update runs set state = '{s}' where state = '{t}'" for _ in range(kept_counts.COMPACT_AFTER // 2 + 1)
             for s, t in (("lost", "done"), ("done", "lost"))]
    execute(db_url, *flips)
    assert query(db_url, "select count(*) from kept_count_deltas")[0][0] <= kept_counts.COMPACT_AFTER  # not 516
    assert sorted(assert_kept(db_url)) == [("s", "done", "", 8), ("s", "failed", "out_of_memory", 1)]
