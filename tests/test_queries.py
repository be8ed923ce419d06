"""orchestrator.store.queries: each question the commands ask written once, the same answer through
sqlite3 (status's path) and through a SQLAlchemy session, and the latest-attempt rule in one module."""
import re
from pathlib import Path

from orchestrator.store import db, schema, queries, sql_adapters as rows_module
from orchestrator.results.collector import collect
from db_urls import execute, is_sqlite, query
from result_factory import make_result, write_result

ORCHESTRATOR = Path(__file__).resolve().parent.parent / "orchestrator"
#: How code says "the latest attempt": a condition on the `latest` flag (`latest = :x`, `latest = 1`,
#: `latest = true`, `latest IS true`, `latest == ...`) or a read of it as a column (`Run.latest`,
#: `runs.latest`, `c.latest`); not a write of it (`latest=True`, launch's new runs).
LATEST_RULE = re.compile(r"\blatest\s*(==|=\s*(:|1\b|true\b|TRUE\b)|\s(IS|is)\s)|\.latest\b")


def test_the_latest_attempt_rule_is_written_in_one_module():
    """Outside the migrations (history, frozen), only orchestrator/store/queries.py says which runs are
    the latest attempts; schema.latest_runs() and every command read it from there."""
    saying = sorted(str(p.relative_to(ORCHESTRATOR)) for p in ORCHESTRATOR.rglob("*.py")
                    if "versions" not in p.parts and LATEST_RULE.search(p.read_text()))
    assert saying == ["store/queries.py"]
    assert LATEST_RULE.search(queries.LATEST)


#: SQL in code: a SQLAlchemy or SQL-text select (issue 36's check, as the project runs it).
SQL_READ = re.compile(r"""\bselect\(|["']\s*SELECT\s|^\s*SELECT\s""", re.MULTILINE)
#: The store (orchestrator/store/: the read layer — queries.py: status's SQL text; cell_stats.py and
#: run_history.py: every other read, in SQLAlchemy Core — and the engine, schema and writes): the
#: only package that may say SQL.
STORE = "store"
#: Modules whose SQL other changes of issue 36 move into the read layer (submit, retry, rerun: the
#: launch package's split; collector: its scaling). The lead removes this list on merge.
NOT_YET: set = set()


def test_sql_is_said_only_in_the_store():
    """No module outside the store (and the migrations, which are history) builds a select or
    writes SQL text: every read is a named function of the read layer."""
    saying = sorted(str(p.relative_to(ORCHESTRATOR)) for p in ORCHESTRATOR.rglob("*.py")
                    if STORE not in p.relative_to(ORCHESTRATOR).parts and p.name not in NOT_YET
                    and SQL_READ.search(p.read_text()))
    assert saying == []


#: Questions the commands and the report both ask, each as the code that answers it, and the one
#: module that may: the per-group median (row_number's middle rows: cell_summary's and the report's
#: statistics), what counts as one job, the sweep list, a sweep's recorded configs.
ASKED_ONCE = {
    "median": (re.compile(r"cnt \+ 1\) // 2"), "store/cell_stats.py"),
    "one job": (re.compile(r"job_id\.is_\(None\), [\w.]*attempt|job_id IS NULL THEN"), "store/queries.py"),
    "sweeps": (re.compile(r"FROM sweeps\b|select\((schema\.)?Sweep\b"), "store/queries.py"),
    "recorded configs": (re.compile(r"sweep_cells\.config FROM|SweepCell\.config|link\.config\b"), "store/queries.py"),
}


def test_each_question_the_commands_and_the_report_share_is_answered_once():
    """Answered twice, two answers drift apart (issue 36): each is said in its one module only."""
    for question, (code, home) in ASKED_ONCE.items():
        saying = sorted(str(p.relative_to(ORCHESTRATOR)) for p in ORCHESTRATOR.rglob("*.py")
                        if "migrations" not in p.parts and p.name not in NOT_YET and code.search(p.read_text()))
        assert saying == [home], question


def _two_sweeps(tmp_path, url):
    """Sweep a: lenet repeat 0 failed at attempt 1; sweep b: its attempt 2, done, and alexnet failed."""
    runs = tmp_path / "runs"
    write_result(runs, make_result(sweep="a", model="lenet", state="failed"))
    write_result(runs, make_result(sweep="b", model="lenet", attempt=2))
    write_result(runs, make_result(sweep="b", model="alexnet", state="failed",
                                   error={"class": "timeout", "message": "ran out of time"}))
    factory = db.open_db(url)
    report = collect(factory, runs)
    assert report.added == 3, report
    return factory


def _answers(rows):
    counts = sorted((c.sweep_id, c.state, c.error_class, c.n) for c in queries.latest_counts(rows, None))
    failed = [(r.sweep_id, r.uid.split(":")[-1], r.model, r.error_class)
              for r in queries.latest_failures(rows, ["a", "b"], ("failed", "lost"))]
    groups = queries.latest_groups(rows, None, ("failed",))
    first = queries.first_runs(rows, [(g.sweep_id, g.state, g.error_class) for g in groups], 3)
    examples = sorted((e.sweep_id, e.state, e.n, e.error_class) for e in groups) + sorted(
        (f.sweep_id, f.state, f.error_class) for f in first)
    return counts, failed, examples, queries.sweep_sizes(rows, ["a", "b"]), queries.sweep_sizes(rows, ["a", "b"], ["b"])


def test_each_query_answers_the_same_through_sqlite3_and_sqlalchemy(tmp_path, db_url):
    factory = _two_sweeps(tmp_path, db_url)
    with factory() as session:
        through_orm = _answers(rows_module.Rows.of(session))
        # the ORM's latest attempts are the rows the SQL text picks
        latest_ids = sorted(r.id for r in session.execute(schema.latest_runs().select()))
        where, params = queries.latest_where(None)
        assert latest_ids == sorted(r.id for r in rows_module.Rows.of(session).rows(
            f"SELECT id FROM runs WHERE {where}", params))
    counts, failed, examples, sizes, of_b = through_orm
    # each sweep's cells, and its earlier attempts (status's `retried`): a's lenet, superseded by b's attempt 2
    assert sizes == ({"a": 1, "b": 2}, {"a": 1}) and of_b == ({"b": 2}, {"a": 1})
    # lenet's attempt 1 failed and is not the latest: only its attempt 2 (done) counts
    assert counts == [("b", "done", None, 1), ("b", "failed", "timeout", 1)]
    assert failed == [("b", "1", "alexnet", "timeout")]
    assert examples == [("b", "failed", 1, "timeout"), ("b", "failed", "timeout")]
    assert len(latest_ids) == 2
    execute(db_url, "UPDATE runs SET collected_at = NULL")  # as if no collector had claimed them yet
    direct = rows_module.connect(db_url)
    assert direct is not None  # an up-to-date database: read with sqlite3 or psycopg alone
    with direct:
        assert type(direct).__name__ == ("SqliteRows" if is_sqlite(db_url) else "PostgresRows")
        assert _answers(direct) == through_orm
        assert list(queries.open_runs(direct, ["id"])) == []  # failed or done: none open
        direct.many("UPDATE runs SET state = 'running' WHERE state = :failed", [{"failed": "failed"}])
        failed = [(r.id, r.state) for r in queries.open_runs(direct, ["id", "state"])]
        assert len(failed) == 2  # a's lenet and b's alexnet, running now
        # one executemany: how many rows it changed in all, as tracking.reconcile counts them
        assert queries.update_runs(direct, ["state_detail"], [
            {"state_detail": "seen", "b_id": i, "b_state": s} for i, s in failed + [(0, "running")]]) == 2
        direct.commit()
    assert query(db_url, "SELECT count(*) FROM runs WHERE state_detail = 'seen'") == [(2,)]


def test_the_history_a_learned_time_limit_reads_is_the_same_on_either_store(tmp_path, db_url):
    """run_history.limit_history (time_limits.learn's one question) through each store: the successful
    runs of cells with the same names, newest first, with their wall time and settings (a column
    named like a keyword, `like`, included); a failure and another model are not history."""
    from orchestrator.store import run_history
    from orchestrator import runstate, setting_registry
    from orchestrator.sweep import time_limits

    runs = tmp_path / "runs"
    old = make_result(sweep="a", model="lenet", batch_size=8)
    new = make_result(sweep="b", model="lenet", batch_size=16)
    new["started_at"], new["ended_at"] = new["started_at"] + 500, new["ended_at"] + 560  # 160 s, and newer
    timed_out = make_result(sweep="e", model="lenet", batch_size=64, state="failed",
                            error={"class": "timeout", "message": "time limit"})
    for result in (old, new, make_result(sweep="c", model="lenet", batch_size=32, state="failed"),
                   make_result(sweep="d", model="alexnet"), timed_out):
        write_result(runs, result)
    factory = db.open_db(db_url)
    assert collect(factory, runs).added == 5
    cell = old["cell"]
    with factory() as session:
        history = run_history.limit_history(rows_module.Rows.of(session), cell["framework"], "lenet", cell["dataset"],
                                        cell["hardware"], setting_registry.NAMES, runstate.DONE)
    assert [(r.cell_id, float(r.wall_s), r.batch_size, r.step_s) for r in history] == [
        (new["cell_id"], 160.0, 16, 0.064), (old["cell_id"], 100.0, 8, 0.064)]  # step_s: its step_time_mean
    assert all(r.like == cell["like"] for r in history)
    names = (cell["framework"], "lenet", cell["dataset"], cell["hardware"])
    with factory() as session:  # a timeout no success of its cell followed; no invalid wall time
        rows = rows_module.Rows.of(session)
        timeouts = run_history.limit_timeouts(rows, *names, runstate.FAILED, "timeout", runstate.DONE)
        assert [(r.cell_id, float(r.wall_s)) for r in timeouts] == [(timed_out["cell_id"], 100.0)]
        assert run_history.limit_left_out(rows, *names, runstate.DONE) == {}
    past = [time_limits.Past(r.cell_id, float(r.wall_s), r._asdict()) for r in history]
    limit = time_limits.predict(old["cell_id"], old["cell"], past, ceiling_min=120)
    assert (limit.minutes, limit.floor) == (4, 4) and limit.source.startswith(time_limits.SAME_CELL)  # 100 s x 1.5 + 1 min


def test_the_first_runs_of_a_class_are_read_from_the_index_alone(tmp_path, db_url):
    """queries.first_runs orders a class's latest runs by id: SQLite's indexes carry the rowid,
    PostgreSQL's ix_runs_current carries the id (INCLUDE, migration 0021), so that neither reads
    the table's rows (22 ms a class over a million runs on PostgreSQL before); the answer is
    each class's lowest ids."""
    from orchestrator.store.sql_adapters import Rows

    runs = tmp_path / "runs"
    for i in range(6):
        write_result(runs, make_result(sweep="s", model=("lenet", "alexnet")[i % 2], repeat=i // 2,
                                       state="failed" if i % 3 else "done"))
    Session = db.open_db(db_url)
    collect(Session, runs)
    with Session() as session:
        first = queries.first_runs(Rows.of(session), [("s", "failed", "out_of_memory")], 2)
    Session.kw["bind"].dispose()
    failed = query(db_url, "select id from runs where state = 'failed' order by id")
    assert [r.id for r in first] == [i for (i,) in failed[:2]] and len(failed) == 4
    if not is_sqlite(db_url):
        (definition,) = query(db_url, "select indexdef from pg_indexes where indexname = 'ix_runs_current'")[0]
        assert definition.endswith("INCLUDE (id)"), definition
