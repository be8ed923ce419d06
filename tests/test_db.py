"""The schema on real SQLite files and real PostgreSQL databases (`db_url`): tables, pragmas,
constraints, the views and the migrations (including an upgrade of a database made by the last
release before migrations, a SQLite file)."""
import multiprocessing
import queue as queue_module
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, select, text
from sqlalchemy.exc import IntegrityError

from orchestrator.store import cell_stats, db, migrations, schema, sql_adapters
from orchestrator.sweep.cell import cell_id as make_cell_id
from orchestrator.store.schema import Cell, Metric, Run, Sweep, SweepCell
from db_urls import execute, is_sqlite, plain_rows, query, sqlite_file
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


def test_open_db_creates_tables_view_and_sqlite_pragmas(db_url):
    Session = db.open_db(db_url)
    engine = Session.kw["bind"]
    insp = inspect(engine)
    assert {"sweeps", "cells", "sweep_cells", "runs", "metrics"} <= set(insp.get_table_names())
    assert {"results", "cell_summary"} <= set(insp.get_view_names())
    if is_sqlite(db_url):
        with engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 30000
            assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
    # opening again is harmless and keeps the data
    with Session.begin() as session:
        add_run(session)
    Session2 = db.open_db(db_url)
    with Session2() as session:
        assert session.scalar(select(Run.uid)).startswith("s1:")
    with engine.connect() as conn:
        assert db.schema_version(conn) == db.SCHEMA_VERSION


def test_results_view_one_row_per_run_with_pivoted_metrics(db_url):
    Session = db.open_db(db_url)
    with Session.begin() as session:
        add_run(session, metrics={"images_per_sec": 1234.5, "images_per_sec_std": 10.0,
                                  "cpu_percent_avg": 150.0, "rss_peak_bytes": 3 * 2**20,
                                  "gpu_mem_peak_bytes": 512 * 2**20, "step_time_mean": 0.05})
        add_run(session, state="failed", model="alexnet")
    # the plain driver (sqlite3, what `sqlite3 results.db` uses; psycopg, what psql does), no SQLAlchemy involved
    rows = plain_rows(db_url, "select framework, model, dataset, images_per_sec from results order by model")
    assert [tuple(r.values()) for r in rows] == [("torch", "alexnet", "mnist", None), ("torch", "lenet", "mnist", 1234.5)]
    (full,) = plain_rows(db_url, "select * from results where model = 'lenet'")
    assert tuple(full.keys()) == schema.RESULTS_COLUMNS and len(set(schema.RESULTS_COLUMNS)) == len(schema.RESULTS_COLUMNS)
    assert full["peak_rss_mb"] == 3.0 and full["gpu_mem_peak_mb"] == 512.0
    assert full["cpu_percent"] == 150.0 and full["images_per_sec_std"] == 10.0
    assert full["energy_j"] is None and full["repeat"] == 0 and full["state"] == "done"


def test_run_state_must_be_a_known_state(db_url):
    Session = db.open_db(db_url)
    with pytest.raises(ValueError, match="not one of pending, submitted"):
        Run(uid="x", sweep_id="s", cell_id="c", repeat=0, attempt=1, state="finished")
    # and the database refuses one written behind the ORM's back
    with Session.begin() as session:
        add_run(session)
    with pytest.raises(IntegrityError):
        with Session.begin() as session:
            session.execute(text("UPDATE runs SET state = 'finished'"))


def test_run_uid_and_metric_names_are_unique(db_url):
    Session = db.open_db(db_url)
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


def test_read_only_open_of_a_database_without_its_tables_adds_none(db_url):
    execute(db_url, "CREATE TABLE t (x INTEGER)")
    with pytest.raises(db.NoDatabase, match="no orchestrator tables"):
        db.open_db(db_url, create=False)
    engine = create_engine(db_url)
    assert inspect(engine).get_table_names() == ["t"] and inspect(engine).get_view_names() == []
    engine.dispose()


def test_default_url_follows_the_environment(monkeypatch):
    monkeypatch.delenv("ORCHESTRATOR_DB", raising=False)
    assert sql_adapters.default_url() == "sqlite:///results.db"
    monkeypatch.setenv("ORCHESTRATOR_DB", "sqlite:////tmp/x.db")
    assert sql_adapters.default_url() == "sqlite:////tmp/x.db"


OLD_DB = Path(__file__).parent / "data" / "results-5f8e814.db"  # made by that release: data/results-5f8e814.py


#: The tables kept from others' rows, which an upgrade builds for the rows there.
KEPT = ("kept_summary", "kept_metrics", "kept_counts")


def rows_of_every_table(path, columns=None):
    """Every table's rows; `columns` (table -> names) limits them to the tables and columns a
    database had before an upgrade added more (new columns start empty; a new table must start
    empty, and is left out; but kept_summary, kept_metrics and kept_counts, kept from the runs and
    metrics, which an upgrade builds)."""
    con = sqlite3.connect(path)
    names = [r[0] for r in con.execute("select name from sqlite_master where type = 'table'")]
    old = columns
    columns = {n: [c[1] for c in con.execute(f"pragma table_info({n})")] for n in names} | (columns or {})
    rows = {name: sorted(con.execute(f"select {', '.join(columns[name])} from {name}").fetchall(), key=repr)
            for name in names}
    con.close()
    if old is not None:
        added = [n for n in names if n not in old and n not in ("alembic_version", *KEPT)]
        for name in KEPT:
            rows.pop(name, None)
        assert not any(rows.pop(n) for n in added), f"a new table ({', '.join(added)}) starts empty"
    return rows


def columns_of(path):
    con = sqlite3.connect(path)
    names = [r[0] for r in con.execute("select name from sqlite_master where type = 'table'")]
    columns = {n: [c[1] for c in con.execute(f"pragma table_info({n})")] for n in names}
    con.close()
    return columns


def as_url(where):
    """A database URL, or the URL of a SQLite file's path."""
    return where if isinstance(where, str) else f"sqlite:///{where}"


def assert_tables_are_db_pys(where):
    """The tables as the revisions left them are exactly the ones db.py defines."""
    engine = create_engine(as_url(where))
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), schema.Base.metadata) == []
    engine.dispose()


def test_schema_version_is_the_head_revision_which_pins_the_views():
    scripts = migrations.script()
    assert db.SCHEMA_VERSION == scripts.get_current_head()
    assert scripts.get_revision(db.SCHEMA_VERSION).module.views_sha256 == migrations.views_sha256(), (
        "the views' definitions changed: add a revision under orchestrator/store/migrations/versions with "
        f"views_sha256 = {migrations.views_sha256()!r}")


def built_by_the_revisions(where):
    """A new database at `where` (a URL, or a SQLite file's path) made the long way: every
    revision from nothing (open_db makes a new one from db.py's tables at once). In a process of
    its own, as a user's upgrade runs: one that had made a database at once first had schema.py's
    indexes already given their PostgreSQL options (0021's INCLUDE went missing only alone)."""
    script = ("import sys; from sqlalchemy import create_engine; from orchestrator.store import migrations; "
              "engine = create_engine(sys.argv[1]); conn = engine.connect(); migrations.upgrade(conn); conn.commit()")
    subprocess.run([sys.executable, "-c", script, as_url(where)], check=True)


def sqlite_layout(path):
    """A database's layout as SQLite reports it, not as its DDL is worded (create_all and
    Alembic's batch mode word the same table differently): each table's columns (by name: a
    revision's added column comes last, where create_all puts it in db.py's order), indexes,
    foreign keys and CHECK constraints, each view's and trigger's SQL, and the recorded revision."""
    con = sqlite3.connect(path)
    layout = {}
    for kind, name, sql in con.execute("select type, name, sql from sqlite_master where name not like 'sqlite_%'"):
        if kind in ("view", "trigger"):  # a trigger: kept_counts's, made by both ways or neither
            layout[name] = sql
        elif kind == "table":
            layout[name] = {
                "columns": sorted(c[1:] for c in con.execute(f"pragma table_info({name})")),
                "indexes": sorted((i[1], i[2], tuple(c[2] for c in con.execute(f"pragma index_info({i[1]})")))
                                  for i in con.execute(f"pragma index_list({name})")),
                "foreign keys": sorted(con.execute(f"pragma foreign_key_list({name})").fetchall()),
                "checks": sorted(re.findall(r"CHECK \((.*?)\)(?:,|\n|$)", sql)),
            }
    layout["revision"] = con.execute("select version_num from alembic_version").fetchall()
    con.close()
    return layout


def postgres_layout(url):
    """A PostgreSQL database's layout as its catalog reports it: each table's columns (by name,
    with type, nullability and default), indexes (their definitions), foreign keys, CHECK and
    other constraints, each view's SQL, each trigger's and function's definition (kept_counts.py's),
    and the recorded revision."""
    layout = {}
    for (name,) in query(url, "select viewname from pg_views where schemaname = current_schema()"):
        layout[name] = query(url, "select pg_get_viewdef(cast(:v as regclass), true)", {"v": name})[0][0]
    for (name,) in query(url, "select tablename from pg_tables where schemaname = current_schema()"):
        constraints = query(url, "select contype, conname, pg_get_constraintdef(oid) from pg_constraint "
                                 "where conrelid = cast(:t as regclass)", {"t": name})
        layout[name] = {
            "columns": sorted(query(url, "select column_name, data_type, is_nullable, column_default "
                                         "from information_schema.columns where table_schema = current_schema() "
                                         "and table_name = :t", {"t": name})),
            "indexes": sorted(query(url, "select indexname, indexdef from pg_indexes "
                                         "where schemaname = current_schema() and tablename = :t", {"t": name})),
            "foreign keys": sorted(c[1:] for c in constraints if c[0] == "f"),
            "checks": sorted(c[1:] for c in constraints if c[0] == "c"),
            "keys": sorted(c for c in constraints if c[0] in "pu"),
        }
    layout["triggers"] = sorted(query(url, "select tgname, pg_get_triggerdef(oid) from pg_trigger where not tgisinternal"))
    layout["functions"] = sorted(query(url, "select proname, prosrc from pg_proc "
                                            "where pronamespace = cast(current_schema() as regnamespace)"))
    layout["revision"] = query(url, "select version_num from alembic_version")
    return layout


def layout_of(url):
    return sqlite_layout(sqlite_file(url)) if is_sqlite(url) else postgres_layout(url)


def test_the_revisions_build_exactly_the_tables_db_py_defines(db_url):
    built_by_the_revisions(db_url)
    assert_tables_are_db_pys(db_url)


def test_a_new_database_is_made_at_once_as_the_revisions_build_it(db_url, other_db_url):
    made, built = db_url, other_db_url
    # a new process, to see what it imports: making a new database needs no Alembic
    done = subprocess.run([sys.executable, "-c", "import sys; from orchestrator.store import db; "
                           f"db.open_db('{made}'); print(sorted(m for m in sys.modules if 'alembic' in m))"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
    built_by_the_revisions(built)
    layout = layout_of(made)
    assert layout == layout_of(built)
    assert layout["revision"] == [(db.SCHEMA_VERSION,)] and layout["runs"]["checks"]  # ck_runs_state
    triggers = set(layout) if is_sqlite(made) else {name for name, _ in layout["triggers"]}
    assert {"kept_counts_insert", "kept_counts_update", "kept_counts_delete"} <= triggers
    assert_tables_are_db_pys(made)


def test_a_database_made_by_the_last_release_is_upgraded_in_place(tmp_path, caplog):
    path = tmp_path / "results.db"
    shutil.copy(OLD_DB, path)
    before, old_columns = rows_of_every_table(path), columns_of(path)
    assert "alembic_version" not in before and len(before["runs"]) == 8 and len(before["metrics"]) == 17

    db.open_db(f"sqlite:///{path}", create=False)  # even a read-only command upgrades it

    assert f"upgraded {path} in place from schema (none recorded" in caplog.text
    after = rows_of_every_table(path, old_columns)
    assert after.pop("alembic_version") == [(db.SCHEMA_VERSION,)]
    assert after == before, "every row kept, as it was"
    assert_tables_are_db_pys(path)
    con = sqlite3.connect(path)
    con.row_factory = sqlite3.Row
    cur = con.execute("select * from results order by run")
    assert tuple(d[0] for d in cur.description) == schema.RESULTS_COLUMNS
    results = [dict(r) for r in cur]
    assert len(results) == 8 and sum(r["state"] == "done" for r in results) == 6
    assert {r["peak_rss_mb"] for r in results if r["model"] == "lenet"} == {300.0}
    summary = {r["model"]: (r["n"], r["images_per_sec_median"], r["noisy"]) for r in con.execute(
        "select * from cell_summary")}
    assert summary["lenet"] == (3, 1000.0, 0)
    assert summary["alexnet"] == (2, 125.0, 1)  # its repeat 1 failed, then attempt 2 measured 150
    assert summary["resnet50"] == (1, 2065.9, None)
    assert con.execute("select gpu_mem_peak_mb from cell_summary where model = 'resnet50'").fetchone()[0] == 14550.0
    assert "vgg16" not in summary  # submitted, never measured
    assert {r[0]: r[1:] for r in con.execute("select model, n, images_per_sec_median from kept_summary")} == {
        model: (n, median) for model, (n, median, _) in summary.items()}  # the upgrade built the kept summary
    kept_counts = sorted(tuple(r) for r in con.execute("select sweep_id, state, error_class, n from kept_counts"))
    assert kept_counts and kept_counts == sorted(tuple(r) for r in con.execute(
        "select sweep_id, state, coalesce(error_class, ''), count(*) from runs where latest = 1 "
        "group by sweep_id, state, coalesce(error_class, '')"))  # and the counts
    kept = con.execute("select * from kept_metrics order by run_id").fetchall()  # (csv_text, last, apart)
    assert len(kept) == 6 and [tuple(r)[:-1] for r in kept] == [tuple(r) for r in con.execute(
        str(cell_stats.metric_pivot().order_by("run_id").compile(compile_kwargs={"literal_binds": True})))]
    con.close()

    caplog.clear()
    db.open_db(f"sqlite:///{path}", create=False)
    assert "upgraded" not in caplog.text, "an up-to-date database is left alone"


def test_a_database_of_the_release_before_gains_its_columns(tmp_path):
    """The baseline revision also brings up a database of the release before the last (its
    schema 1: no provenance columns, no sweep_cells.config), adding the columns it lacks."""
    path = tmp_path / "old.db"
    shutil.copy(OLD_DB, path)
    con = sqlite3.connect(path)
    con.execute("DROP VIEW cell_summary")
    con.execute("DROP VIEW results")
    con.execute("CREATE VIEW results AS SELECT uid AS run FROM runs")
    con.execute("ALTER TABLE sweep_cells DROP COLUMN config")
    for name in ("git_revision", "git_dirty", "gpu_name", "energy_method", "provenance"):
        con.execute(f"ALTER TABLE runs DROP COLUMN {name}")
    con.commit()
    con.close()

    db.open_db(f"sqlite:///{path}")

    assert_tables_are_db_pys(path)
    con = sqlite3.connect(path)
    assert con.execute("select count(*), count(git_revision) from runs").fetchone() == (8, 0)
    assert con.execute("select count(*) from results where images_per_sec is not null").fetchone() == (6,)
    assert con.execute("select sum(n) from cell_summary").fetchone() == (6,)
    con.close()


def _open_in_process(url, start, queue):
    try:
        start.wait(timeout=120)  # generous: spawning and importing on a loaded 2-core CI machine
        t0 = time.monotonic()
        db.open_db(url)
        queue.put("ok")
    except BaseException as exc:  # said to the test, which otherwise only sees a silence
        queue.put(f"{type(exc).__name__}: {exc} (after {time.monotonic() - t0:.1f} s)"
                  if "t0" in locals() else f"{type(exc).__name__} before opening: {exc}")
        raise


def test_two_processes_upgrading_an_old_database_at_once(tmp_path):
    path = tmp_path / "results.db"
    shutil.copy(OLD_DB, path)
    before, old_columns = rows_of_every_table(path), columns_of(path)
    ctx = multiprocessing.get_context("spawn")
    start, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_open_in_process, args=(f"sqlite:///{path}", start, queue)) for _ in range(2)]
    for p in procs:
        p.start()
    try:
        said = []
        for _ in procs:
            try:
                said.append(queue.get(timeout=180))
            except queue_module.Empty:
                said.append(f"nothing in 180 s (exit codes {[p.exitcode for p in procs]})")
        assert said == ["ok", "ok"]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    after = rows_of_every_table(path, old_columns)
    assert after.pop("alembic_version") == [(db.SCHEMA_VERSION,)] and after == before


def test_a_database_from_a_newer_orchestrator_is_refused_not_touched(db_url):
    db.open_db(db_url).kw["bind"].dispose()
    execute(db_url, "UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(schema.SchemaError, match="schema revision 9999, which this orchestrator does not know"):
        db.open_db(db_url)
    assert query(db_url, "select version_num from alembic_version") == [("9999",)]


def test_cell_summary_over_the_latest_attempt_of_each_repeat_when_done(db_url):
    Session = db.open_db(db_url)
    with Session.begin() as session:
        # lenet: repeats 0..4; repeat 1 was rerun (attempt 2 supersedes 900); repeat 3 failed;
        # repeat 4 measured 5000 once, then its rerun failed: its latest attempt is not done
        for repeat, attempt, state, ips in ((0, 1, "done", 1000.0), (1, 1, "done", 900.0), (1, 2, "done", 1100.0),
                                            (2, 1, "done", 1300.0), (3, 1, "failed", None),
                                            (4, 1, "done", 5000.0), (4, 2, "failed", None)):
            run = add_run(session, uid_suffix=f"{repeat}:{attempt}", state=state,
                          metrics={"images_per_sec": ips, "gpu_power_avg_w": 100.0 + repeat} if ips else None)
            run.repeat, run.attempt = repeat, attempt
        # alexnet: one steady pair, not noisy
        for repeat, ips in ((0, 500.0), (1, 501.0)):
            run = add_run(session, uid_suffix=f"{repeat}:1", model="alexnet", metrics={"images_per_sec": ips})
            run.repeat = repeat
        session.flush()  # as the launcher and the collector do after inserting runs
        schema.mark_latest(session.connection(), session.execute(select(Run.cell_id, Run.repeat)).all())
    rows = {r["model"]: r for r in plain_rows(db_url, "select * from cell_summary")}
    lenet = rows["lenet"]
    assert lenet["n"] == 3 and lenet["images_per_sec_median"] == 1100.0
    assert lenet["images_per_sec_min"] == 1000.0 and lenet["images_per_sec_max"] == 1300.0
    assert lenet["images_per_sec_std"] == pytest.approx(152.7525, rel=1e-6)  # sample std of 1000, 1100, 1300
    assert lenet["images_per_sec_cv"] == pytest.approx(152.7525 / 1133.3333, rel=1e-6)
    assert lenet["noisy"] == 1 and lenet["gpu_power_avg_w"] == pytest.approx(101.0)
    assert rows["alexnet"]["noisy"] == 0 and rows["alexnet"]["images_per_sec_median"] == 500.5

    # the same select with filters (a setting, a metric) and another threshold (what `results --summary` runs)
    with Session() as session:
        view = {r["model"]: dict(r) for r in session.execute(cell_stats.summary_select()).mappings()}
        assert view == rows
        (loose,) = session.execute(cell_stats.summary_select({"model": ["lenet"]}, noisy_cv=0.2)).mappings()
        assert loose["model"] == "lenet" and loose["noisy"] == 0 and loose["n"] == 3
        (some,) = session.execute(cell_stats.summary_select({"images_per_sec": [1000.0, 1100.0]})).mappings()
        assert (some["model"], some["n"], some["images_per_sec_median"]) == ("lenet", 2, 1050.0)


def test_a_page_of_results_is_the_views_first_rows(db_url):
    """results_page picks the page's runs first and reads their metrics after: the same rows, in
    the same order, as the first rows of the view, and the view's count; refused (None) where a
    filter needs a metric."""
    from sqlalchemy import func, select

    Session = db.open_db(db_url)
    with Session.begin() as session:
        for i, (model, state) in enumerate([("lenet", "done"), ("alexnet", "failed"), ("lenet", "done"),
                                            ("vgg16", "done"), ("lenet", "pending"), ("alexnet", "done")]):
            run = add_run(session, uid_suffix=f"{i}:1", model=model, state=state,
                          metrics={"images_per_sec": 100.0 * i, "gpu_power_avg_w": 10.0 + i} if state == "done" else None)
            run.repeat = i
    order = ("framework", "model", "dataset", "hardware", "gpus", "batch_size", "precision", "sweep", "repeat",
             "attempt", "run")
    view = schema.results_view
    with Session() as session:
        for filters, limit in (({}, 4), ({"model": ["lenet", "vgg16"]}, 2), ({"state": ["done"]}, 10)):
            page, total = cell_stats.results_page(filters, order, limit)
            conditions = [view.c[k].in_(v) for k, v in filters.items()]
            want = session.execute(select(view).where(*conditions).order_by(*(view.c[c] for c in order))
                                   .limit(limit)).mappings().all()
            got = session.execute(page).mappings().all()
            assert [dict(r) for r in got] == [dict(r) for r in want] and got, filters
            assert session.scalar(total) == session.scalar(select(func.count()).select_from(view).where(*conditions))
        assert cell_stats.results_page({"images_per_sec": [100.0]}, order, 5) is None
        assert cell_stats.results_page({}, order, None) is None  # every row: the view


def upgraded_from(url, revision, *then):
    """The database at `url` taken back to `revision` (taken_back), then opened: upgraded to the
    head. Its URL, to query."""
    taken_back(url, revision, *then)
    db.open_db(url).kw["bind"].dispose()
    return url


def taken_back(url, revision, *then):
    """The database at `url` taken back to `revision`: its views dropped, each later revision's
    `downgrade()` run, newest first, then `then`, and `revision` recorded."""
    from alembic.operations import Operations
    from sqlalchemy.pool import NullPool

    execute(url, "DROP VIEW cell_summary", "DROP VIEW results")
    scripts = migrations.script()
    later = [r for r in scripts.walk_revisions() if r.revision > revision]  # newest first
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            with Operations.context(MigrationContext.configure(conn)):
                for rev in later:
                    rev.module.downgrade()
            for sql in then:
                conn.exec_driver_sql(sql)
            conn.exec_driver_sql(f"UPDATE alembic_version SET version_num = '{revision}'")
    finally:
        engine.dispose()


def test_the_upgrade_to_0009_marks_the_highest_attempt_of_each_repeat_latest(db_url):
    """A database from before runs.latest (0008): the upgrade sets the flag by the rule
    schema.mark_latest keeps, and leaves every row and metric as it was."""
    Session = db.open_db(db_url)
    with Session.begin() as session:
        for repeat, attempt in ((0, 1), (0, 2), (0, 3), (1, 1), (2, 2)):
            run = add_run(session, uid_suffix=f"{repeat}:{attempt}", metrics={"images_per_sec": 100.0 * attempt})
            run.repeat, run.attempt = repeat, attempt
    Session.kw["bind"].dispose()
    url = upgraded_from(db_url, "0008")  # no flag, the grouping's index
    assert query(url, "select repeat, attempt, latest from runs order by repeat, attempt") == [
        (0, 1, 0), (0, 2, 0), (0, 3, 1), (1, 1, 1), (2, 2, 1)]
    assert query(url, "select count(*) from metrics") == [(5,)]
    assert query(url, "select n, images_per_sec_median from cell_summary") == [(3, 200.0)]  # 300, 100, 200
    assert_tables_are_db_pys(url)


def test_the_upgrade_to_0010_copies_a_cells_input_from_its_settings(db_url):
    """Cells recorded while `input` lived only in the settings JSON (0009) get it as a column,
    which the results view shows; a cell without it stays null, which the view shows as the default (memory)."""
    Session = db.open_db(db_url)
    with Session.begin() as session:
        add_run(session, uid_suffix="0:1", model="alexnet")
        add_run(session, uid_suffix="0:1", model="lenet")
    Session.kw["bind"].dispose()
    set_input = ("UPDATE cells SET settings = json_set(settings, '$.input', 'pipeline') WHERE model = 'alexnet'"
                 if is_sqlite(db_url) else
                 "UPDATE cells SET settings = cast(jsonb_set(cast(settings AS jsonb), '{input}', '\"pipeline\"') AS json) "
                 "WHERE model = 'alexnet'")
    url = upgraded_from(db_url, "0009", set_input)  # input in the JSON only
    assert query(url, "select model, input from cells order by model") == [
        ("alexnet", "pipeline"), ("lenet", None)]
    assert query(url, "select model, input from results order by model") == [
        ("alexnet", "pipeline"), ("lenet", "memory")]


def test_the_upgrade_to_0011_leaves_who_submitted_earlier_rows_unknown(db_url):
    """Sweeps and runs recorded before 0011 get null submitters (not the upgrading user's name),
    and the results view shows the new columns."""
    Session = db.open_db(db_url)
    with Session.begin() as session:
        add_run(session)
    Session.kw["bind"].dispose()
    url = upgraded_from(db_url, "0010")
    assert query(url, "select submit_user, submit_host from sweeps") == [(None, None)]
    assert query(url, "select submit_user, submit_host from results") == [(None, None)]
    assert_tables_are_db_pys(url)
