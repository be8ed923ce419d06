"""The schema on real SQLite files: tables, pragmas, constraints and the `results` view."""
import sqlite3
import time

import pytest
from sqlalchemy import inspect, select, text
from sqlalchemy.exc import IntegrityError

from orchestrator import db
from orchestrator.cell import cell_id as make_cell_id
from orchestrator.db import Cell, Metric, Run, Sweep, SweepCell
from result_factory import make_settings


def add_run(session, uid_suffix="0:1", state="done", metrics=None, **settings):
    """A sweep, a cell and one run recorded the way the launcher and collector do."""
    cell_settings = make_settings(**settings)
    cell_id = make_cell_id(cell_settings)
    if session.get(Sweep, "s1") is None:
        session.add(Sweep(id="s1", created_at=time.time(), argv=["-m", "framework=torch"],
                          overrides=[["framework=torch"]], n_cells=1))
    if session.get(Cell, cell_id) is None:
        session.add(Cell(id=cell_id, settings=cell_settings, created_at=time.time(), **cell_settings))
    session.flush()
    if session.get(SweepCell, ("s1", cell_id)) is None:
        session.add(SweepCell(sweep_id="s1", cell_id=cell_id))
    run = Run(uid=f"s1:{cell_id}:{uid_suffix}", sweep_id="s1", cell_id=cell_id, repeat=0, attempt=1,
              state=state)
    session.add(run)
    session.flush()
    for name, value in (metrics or {}).items():
        session.add(Metric(run_id=run.id, name=name, value=value))
    return run


def test_open_db_creates_tables_view_and_sqlite_pragmas(tmp_path):
    path = tmp_path / "results.db"
    Session = db.open_db(f"sqlite:///{path}")
    engine = Session.kw["bind"]
    insp = inspect(engine)
    assert {"sweeps", "cells", "sweep_cells", "runs", "metrics"} <= set(insp.get_table_names())
    assert "results" in insp.get_view_names()
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 30000
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
    # opening again is harmless and keeps the data
    with Session.begin() as session:
        add_run(session)
    Session2 = db.open_db(f"sqlite:///{path}")
    with Session2() as session:
        assert session.scalar(select(Run.uid)).startswith("s1:")
    assert db.SCHEMA_VERSION == 2


def test_results_view_one_row_per_run_with_pivoted_metrics(tmp_path):
    path = tmp_path / "results.db"
    Session = db.open_db(f"sqlite:///{path}")
    with Session.begin() as session:
        add_run(session, metrics={"images_per_sec": 1234.5, "images_per_sec_std": 10.0,
                                  "cpu_percent_avg": 150.0, "rss_peak_bytes": 3 * 2**20,
                                  "gpu_mem_peak_bytes": 512 * 2**20, "step_time_mean": 0.05})
        add_run(session, state="failed", model="alexnet")
    # the plain sqlite3 module (what `sqlite3 results.db` uses), no SQLAlchemy involved
    con = sqlite3.connect(path)
    con.row_factory = sqlite3.Row
    rows = con.execute("select framework, model, dataset, images_per_sec from results order by model").fetchall()
    assert [tuple(r) for r in rows] == [("torch", "alexnet", "mnist", None), ("torch", "lenet", "mnist", 1234.5)]
    full = con.execute("select * from results where model = 'lenet'").fetchone()
    assert tuple(full.keys()) == db.RESULTS_COLUMNS
    assert full["peak_rss_mb"] == 3.0 and full["gpu_mem_peak_mb"] == 512.0
    assert full["cpu_percent"] == 150.0 and full["images_per_sec_std"] == 10.0
    assert full["energy_j"] is None and full["repeat"] == 0 and full["state"] == "done"
    con.close()


def test_run_state_must_be_a_known_state(tmp_path):
    Session = db.open_db(f"sqlite:///{tmp_path / 'r.db'}")
    with pytest.raises(ValueError, match="not one of pending, submitted"):
        Run(uid="x", sweep_id="s", cell_id="c", repeat=0, attempt=1, state="finished")
    # and the database refuses one written behind the ORM's back
    with Session.begin() as session:
        add_run(session)
    with pytest.raises(IntegrityError):
        with Session.begin() as session:
            session.execute(text("UPDATE runs SET state = 'finished'"))


def test_run_uid_and_metric_names_are_unique(tmp_path):
    Session = db.open_db(f"sqlite:///{tmp_path / 'r.db'}")
    with Session.begin() as session:
        run = add_run(session)
        run_id, uid, cell_id = run.id, run.uid, run.cell_id
        session.add(Metric(run_id=run_id, name="images_per_sec", value=1.0))
    with pytest.raises(IntegrityError):
        with Session.begin() as session:
            session.add(Run(uid=uid, sweep_id="s1", cell_id=cell_id, repeat=0, attempt=1, state="pending"))
    with pytest.raises(IntegrityError):
        with Session.begin() as session:
            session.add(Metric(run_id=run_id, name="images_per_sec", value=2.0))
    with pytest.raises(IntegrityError):  # foreign keys are enforced
        with Session.begin() as session:
            session.add(Run(uid="other", sweep_id="nope", cell_id=cell_id, repeat=0, attempt=1))


def test_read_only_open_of_a_missing_file_creates_nothing(tmp_path):
    path = tmp_path / "absent.db"
    with pytest.raises(db.NoDatabase, match="absent.db here"):
        db.open_db(f"sqlite:///{path}", create=False)
    assert not path.exists()
    sqlite3.connect(tmp_path / "other.db").execute("create table t (x)").connection.commit()
    with pytest.raises(db.NoDatabase, match="no orchestrator tables"):
        db.open_db(f"sqlite:///{tmp_path / 'other.db'}", create=False)


def test_default_url_follows_the_environment(monkeypatch):
    monkeypatch.delenv("ORCHESTRATOR_DB", raising=False)
    assert db.default_url() == "sqlite:///results.db"
    monkeypatch.setenv("ORCHESTRATOR_DB", "sqlite:////tmp/x.db")
    assert db.default_url() == "sqlite:////tmp/x.db"


def test_an_older_database_gains_the_new_columns_and_views_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.db"
    Session = db.open_db(f"sqlite:///{path}")
    with Session.begin() as session:
        add_run(session, metrics={"images_per_sec": 10.0})
    Session.kw["bind"].dispose()
    # make it look like schema 1: no provenance columns, no cell_summary, the old results view
    con = sqlite3.connect(path)
    con.execute("DROP VIEW cell_summary")
    con.execute("DROP VIEW results")
    for name in ("git_revision", "git_dirty", "gpu_name", "energy_method", "provenance"):
        con.execute(f"ALTER TABLE runs DROP COLUMN {name}")
    con.execute("CREATE VIEW results AS SELECT uid AS run FROM runs")
    con.commit()
    con.close()

    db.open_db(f"sqlite:///{path}", create=False)  # even a read brings it up to date

    con = sqlite3.connect(path)
    columns = {row[1] for row in con.execute("PRAGMA table_info(runs)")}
    assert {"git_revision", "git_dirty", "gpu_name", "energy_method", "provenance"} <= columns
    cur = con.execute("select * from results")
    assert tuple(d[0] for d in cur.description) == db.RESULTS_COLUMNS
    assert con.execute("select images_per_sec, git_revision from results").fetchall() == [(10.0, None)]
    assert con.execute("select n from cell_summary").fetchall() == [(1,)]
    con.close()


def test_cell_summary_over_the_latest_done_attempt_of_each_repeat(tmp_path):
    path = tmp_path / "results.db"
    Session = db.open_db(f"sqlite:///{path}")
    with Session.begin() as session:
        # lenet: repeats 0..3; repeat 1 was rerun (attempt 2 supersedes 900); one repeat failed
        for repeat, attempt, state, ips in ((0, 1, "done", 1000.0), (1, 1, "done", 900.0), (1, 2, "done", 1100.0),
                                            (2, 1, "done", 1300.0), (3, 1, "failed", None)):
            run = add_run(session, uid_suffix=f"{repeat}:{attempt}", state=state,
                          metrics={"images_per_sec": ips, "gpu_power_avg_w": 100.0 + repeat} if ips else None)
            run.repeat, run.attempt = repeat, attempt
        # alexnet: one steady pair, not noisy
        for repeat, ips in ((0, 500.0), (1, 501.0)):
            run = add_run(session, uid_suffix=f"{repeat}:1", model="alexnet", metrics={"images_per_sec": ips})
            run.repeat = repeat
    con = sqlite3.connect(path)
    con.row_factory = sqlite3.Row
    rows = {r["model"]: dict(r) for r in con.execute("select * from cell_summary")}
    lenet = rows["lenet"]
    assert lenet["n"] == 3 and lenet["images_per_sec_median"] == 1100.0
    assert lenet["images_per_sec_min"] == 1000.0 and lenet["images_per_sec_max"] == 1300.0
    assert lenet["images_per_sec_std"] == pytest.approx(152.7525, rel=1e-6)  # sample std of 1000, 1100, 1300
    assert lenet["images_per_sec_cv"] == pytest.approx(152.7525 / 1133.3333, rel=1e-6)
    assert lenet["noisy"] == 1 and lenet["gpu_power_avg_w"] == pytest.approx(101.0)
    assert rows["alexnet"]["noisy"] == 0 and rows["alexnet"]["images_per_sec_median"] == 500.5
    # the same figures computed in Python (what `results --summary` prints for any filter)
    results = [dict(r) for r in con.execute("select * from results")]
    python = {r["model"]: r for r in db.summarize(results)}
    for model, view_row in rows.items():
        for key in db.SUMMARY_COLUMNS:
            assert python[model][key] == pytest.approx(view_row[key]), (model, key)
    assert db.summarize(results, noisy_cv=0.2)[1]["noisy"] == 0  # a looser threshold
    con.close()
