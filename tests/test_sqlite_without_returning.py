"""SQLite before 3.35 has no RETURNING (Debian 11's 3.34, Ubuntu 20.04's 3.31, RHEL 8's 3.26: the
system Python of many login nodes; result_rows.parts already keeps to the 999 variables of those
before 3.32). The collector's insert of the runs the launcher never recorded used it (pgrace): such
a library refuses the statement, so every such result file was reported broken there (the hostile
review of cand6). The library cannot be older here: SQLAlchemy's dialect is told the version those
systems report, this machine's real SQLite runs the statements, and the test checks that none of
them asks for RETURNING, which the older library would refuse."""
import sqlite3

from sqlalchemy import event

from orchestrator.results.collector import collect
from orchestrator.store import db
from db_urls import query
from result_factory import make_result, write_result

MODELS = ("lenet", "alexnet", "vgg16")


def test_collect_lands_runs_never_recorded_on_a_sqlite_without_returning(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite3.dbapi2, "sqlite_version_info", (3, 31, 1))  # what SQLAlchemy reads
    runs, url = tmp_path / "runs", f"sqlite:///{tmp_path / 'results.db'}"
    for i in range(6):
        write_result(runs, make_result(sweep="s", model=MODELS[i % 3], repeat=i // 3))
    Session = db.open_db(url)
    engine = Session.kw["bind"]
    assert not engine.dialect.insert_returning  # the dialect of the older library
    sent = []
    event.listen(engine, "before_cursor_execute", lambda conn, cursor, sql, *rest: sent.append(sql))
    report = collect(Session, runs, batch_size=4)  # a batch of four files, then one of two
    again = collect(Session, runs)
    engine.dispose()
    assert [sql for sql in sent if "RETURNING" in sql.upper()] == []
    assert (report.added, report.broken) == (6, []), report.broken
    assert (again.added, again.already, again.broken) == (0, 6, [])
    assert query(url, "select count(*), count(distinct uid), sum(latest) from runs") == [(6, 6, 6)]
    assert query(url, "select count(distinct run_id) from metrics") == [(6,)]
    assert query(url, "select count(*) from kept_metrics") == [(6,)]
