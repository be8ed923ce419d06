"""`orchestrator db copy SRC DST` (orchestrator/store/db_copy.py) between real stores: a SQLite file
and the test PostgreSQL server, both ways, twice, and what it refuses."""
import subprocess
import sys
import time

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from orchestrator.store import db, schema, db_copy
from orchestrator.store.schema import Refusal, Run
from test_db import add_run
from test_results_kept_metrics import assert_kept_metrics_exact
from test_results_summary import assert_exact

#: What a store holds, read without its own numbering (run ids): compared across stores.
CONTENT = {
    "sweeps": "SELECT id, n_cells, submit_user, submit_host FROM sweeps ORDER BY id",
    "cells": "SELECT id, framework, model, batch_size FROM cells ORDER BY id",
    "sweep_cells": "SELECT sweep_id, cell_id FROM sweep_cells ORDER BY sweep_id, cell_id",
    "runs": "SELECT uid, state, repeat, attempt, latest, collected_at, submit_user FROM runs ORDER BY uid",
    "metrics": "SELECT runs.uid, metrics.name, metrics.value FROM metrics JOIN runs ON runs.id = metrics.run_id "
               "ORDER BY runs.uid, metrics.name",
    "refusals": "SELECT sweep_id, overrides, reason FROM refusals ORDER BY overrides",
    "results": "SELECT run, state, images_per_sec, submit_user FROM results ORDER BY run",
}


def content(url):
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return {name: [tuple(r) for r in conn.execute(text(sql))] for name, sql in CONTENT.items()}
    finally:
        engine.dispose()


def fill(url):
    """A sweep of two cells: three repeats measured, one rerun (attempt 2), one pending, a refusal."""
    Session = db.open_db(url)
    with Session.begin() as session:
        for repeat in range(3):
            run = add_run(session, uid_suffix=f"{repeat}:1", metrics={"images_per_sec": 100.0 + repeat,
                                                                      "cpu_util_pct": 50.0})
            run.repeat, run.collected_at, run.submit_user, run.submit_host = repeat, time.time(), "alice", "login1"
        rerun = add_run(session, uid_suffix="0:2", metrics={"images_per_sec": 111.0})
        rerun.attempt, rerun.collected_at = 2, time.time()
        add_run(session, uid_suffix="0:1", state="pending", batch_size=128)
        session.add(Refusal(sweep_id="s1", overrides="framework=torch gpus=2", reason="no GPU"))
        session.flush()
        schema.mark_latest(session.connection(), [(r.cell_id, r.repeat) for r in session.query(Run)])
    Session.kw["bind"].dispose()


def test_a_copy_holds_everything_and_a_second_adds_nothing_both_ways(db_url, tmp_path):
    src = f"sqlite:///{tmp_path / 'mine.db'}"
    fill(src)
    first = db_copy.copy(src, db_url)
    assert first.added == {"sweeps": 1, "cells": 2, "sweep_cells": 2, "runs": 5, "metrics": 7, "refusals": 1}
    assert content(db_url) == content(src)
    assert [r["n"] for r in assert_exact(db_url).values()] == [3]  # the copied cells' kept summary
    second = db_copy.copy(src, db_url)
    assert sum(second.added.values()) == 0 and second.present["runs"] == 5
    back = f"sqlite:///{tmp_path / 'back.db'}"
    db_copy.copy(db_url, back)
    assert content(back) == content(src)


def test_a_run_only_the_source_collected_replaces_the_destinations(db_url, tmp_path):
    src = f"sqlite:///{tmp_path / 'mine.db'}"
    fill(src)
    db_copy.copy(src, db_url)
    # the destination's copy of repeat 2 was never collected there (its row went across as recorded) ...
    engine = create_engine(db_url, poolclass=NullPool)
    with engine.begin() as conn:
        uid = conn.execute(text("SELECT uid FROM runs WHERE repeat = 2")).scalar()
        conn.execute(text("DELETE FROM metrics WHERE run_id = (SELECT id FROM runs WHERE uid = :u)"), {"u": uid})
        conn.execute(text("UPDATE runs SET collected_at = NULL, state = 'running' WHERE uid = :u"), {"u": uid})
    engine.dispose()
    report = db_copy.copy(src, db_url)
    assert report.replaced_runs == 1 and report.added["metrics"] == 2
    assert content(db_url) == content(src)
    assert [r["n"] for r in assert_exact(db_url).values()] == [3]  # repeat 2 counts again
    assert len(assert_kept_metrics_exact(db_url)) == 4  # its metrics pivoted again, as every other run's


def test_a_destination_at_another_revision_is_refused_untouched(tmp_path):
    src, dst = f"sqlite:///{tmp_path / 'mine.db'}", f"sqlite:///{tmp_path / 'group.db'}"
    fill(src)
    db.open_db(dst).kw["bind"].dispose()
    engine = create_engine(dst, poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0010'"))
    before = content(src)
    with pytest.raises(db_copy.CopyRefused, match="at schema revision 0010, this orchestrator's is .*nothing was "
                                                  "copied: bring it up to date first"):
        db_copy.copy(src, dst)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM runs")).scalar() == 0
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0010"
    engine.dispose()
    assert content(src) == before


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd, capture_output=True, text=True)


def test_the_command_reports_counts_and_refuses_in_one_line(tmp_path):
    fill(f"sqlite:///{tmp_path / 'mine.db'}")
    done = cli("db", "copy", "sqlite:///mine.db", "sqlite:///group.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "copied 1 sweeps, 2 cells, 2 sweep_cells, 5 runs, 7 metrics, 1 refusals" in done.stdout
    for args, said in [
        (("sqlite:///absent.db", "sqlite:///group.db"), "db copy from sqlite:///absent.db: no absent.db here; "
                                                          "nothing was copied"),
        (("sqlite:///mine.db", "nonsense"), "db copy: cannot use nonsense: it is not a database URL"),
        (("sqlite:///mine.db", "postgresql://bench@127.0.0.1:1/none"), "the database server does not answer"),
        (("sqlite:///mine.db", "sqlite:///mine.db"), "SRC and DST are one database"),
    ]:
        done = cli("db", "copy", *args, cwd=tmp_path)
        assert done.returncode == 1 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
