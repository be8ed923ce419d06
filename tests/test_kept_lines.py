"""Each run's CSV fields that never change (kept_lines: its name and its cell's settings, as values
in the CSV's order and as csv's text), on real result files and real databases (`db_url`: SQLite
files and PostgreSQL databases): after every writer of runs (the collector's unrecorded runs, a
launch's and a rerun's new attempts, a copy, an upgrade of a database that had runs, a run
deleted) every run has its row or is due (kept_lines_due: a launch's and a rerun's, till they
land), each row is what its run and cell give, and `results --csv` is the view's rows in
csv.writer's bytes."""
from types import SimpleNamespace

from sqlalchemy import create_engine, delete, select, text
from sqlalchemy.pool import NullPool

from orchestrator.store import db, db_copy, kept_lines, launch_records, schema
from orchestrator.store.schema import Cell, Metric, Run
from orchestrator.results.collector import collect
from db_urls import execute, is_sqlite, query
from result_factory import make_result, write_result
from test_results_kept_metrics import printed_csv, view_csv
from test_results_summary import MODELS, landed

def expected_rows(conn):
    """Each run's kept row as the `results` view shows its run now (and its cell's own `mode`, its
    kept metrics' text), by run id."""
    view, metrics = schema.results_view, schema.KeptMetrics.__table__.c
    rows = conn.execute(select(Run.id, Cell.mode, metrics.csv_text, *(view.c[n] for n in (*kept_lines.KEPT, "mode")))
                        .join_from(view, Run, Run.uid == view.c.run).join(Cell, Cell.id == Run.cell_id)
                        .outerjoin(schema.KeptMetrics, metrics.run_id == Run.id))
    expected = {}
    for row in rows:
        values = dict(zip(("run_id", "cell_mode", "metric_text", *kept_lines.KEPT, "mode"), row))
        expected[row[0]] = {**{k: values[k] for k in ("run_id", *kept_lines.KEPT, "cell_mode")}, **kept_lines.texts(values)}
    return expected


def assert_kept_lines_exact(url):
    """Every run has its kept row, equal to what its run and cell give, or is due (launched, not
    landed); the CSV is the view's. The runs' kept rows, by run id."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            kept = {r.run_id: dict(r._mapping) for r in conn.execute(select(kept_lines.KeptLines))}
            due = set(conn.scalars(kept_lines.due_runs()))
            expected = expected_rows(conn)
    finally:
        engine.dispose()
    kept = {k: v for k, v in kept.items() if k in expected}
    assert kept == {k: v for k, v in expected.items() if k in kept} and expected
    assert set(expected) - set(kept) <= due
    assert printed_csv(url) == view_csv(url)
    return kept


def test_every_writer_of_runs_keeps_their_lines(tmp_path, db_url):
    from orchestrator.launch.submit_plan import new_run

    runs = tmp_path / "runs"
    Session = db.open_db(db_url)
    results = [make_result(sweep="s1", model=MODELS[i % 3], repeat=i // 3, state="failed" if i == 4 else "done")
               for i in range(9)]
    for result in results:  # the launcher never recorded these: the collector inserts them
        write_result(runs, result)
    assert collect(Session, runs).added == 9
    assert len(assert_kept_lines_exact(db_url)) == 9
    write_result(runs, make_result(sweep="s2", model=MODELS[1], repeat=1, attempt=2))  # a rerun lands
    assert collect(Session, runs).added == 1
    assert len(assert_kept_lines_exact(db_url)) == 10
    opts = SimpleNamespace(backend=SimpleNamespace(name="local"), runs=str(runs))  # a launch's new attempt
    again = new_run("s2", results[0]["cell_id"], 0, 2, opts, ("u", "h"))
    with Session.begin() as session:
        launch_records.insert_runs(session, [again.row()], [(again.cell_id, again.repeat)])
    kept = assert_kept_lines_exact(db_url)  # no row: it is due, read from runs and cells
    assert len(kept) == 10 and not any(row["run"] == again.uid for row in kept.values())
    assert query(db_url, "select count(*) from kept_lines_due") == [(1,)]
    with Session.begin() as session:  # runs deleted, as the orchestrator's connections do (foreign keys on)
        session.execute(delete(Metric).where(Metric.run_id.in_(select(Run.id).where(Run.repeat == 2))))
        session.execute(delete(Run).where(Run.repeat == 2))
    Session.kw["bind"].dispose()
    assert query(db_url, "select count(*) from kept_lines") == [(7,)]
    execute(db_url, "update runs set state = 'lost', node = 'n,1', error_message = 'a \"b\"' where state = 'pending'",
            "delete from metrics where run_id = (select max(id) from runs)",
            "delete from runs where id = (select max(id) from runs)")  # any writer; a plain delete (no cascade)
    write_result(runs, make_result(sweep="s2", model=MODELS[2], repeat=0, attempt=2))  # SQLite reuses the deleted one's id
    Session = db.open_db(db_url)
    assert collect(Session, runs).added == 4  # and the three deleted ones' files, landed again
    Session.kw["bind"].dispose()
    assert len(assert_kept_lines_exact(db_url)) == 11


def test_a_copy_keeps_the_lines_of_the_runs_it_adds(tmp_path, db_url):
    src = f"sqlite:///{tmp_path / 'mine.db'}"
    landed(src, tmp_path / "runs", 6)
    db_copy.copy(src, db_url)
    assert len(assert_kept_lines_exact(db_url)) == 6
    db_copy.copy(src, db_url)  # a second adds nothing, keeps nothing twice
    assert len(assert_kept_lines_exact(db_url)) == 6


def test_an_upgrade_keeps_the_lines_of_the_runs_already_there(tmp_path, db_url):
    """A database at 0022 (no kept_lines) with runs: the upgrade (0023) keeps every run's."""
    from test_db import upgraded_from

    landed(db_url, tmp_path / "runs", 6)
    upgraded_from(db_url, "0022")
    assert len(assert_kept_lines_exact(db_url)) == 6


def test_sqlite_walks_the_index_in_the_csvs_order_without_sorting(tmp_path):
    """The CSV's query reads kept_lines through ix_kept_lines_order: no temporary b-tree (a sort);
    the runs without a kept row (the merge's other half, sorted: few) are found through
    kept_lines_due, not by a look-up of every run."""
    from sqlalchemy.dialects import sqlite

    from orchestrator.setting_registry import RESULTS_ORDER
    from orchestrator.store import cell_stats

    db_url = f"sqlite:///{tmp_path / 'results.db'}"
    landed(db_url, tmp_path / "runs", 3)
    sql = str(cell_stats.results_lines({}, RESULTS_ORDER, None).compile(
        dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}))
    plan = " | ".join(row[-1] for row in query(db_url, "EXPLAIN QUERY PLAN " + sql))
    kept, unkept = plan.split(" | RIGHT | ")
    assert "MERGE (UNION ALL)" in kept and "ix_kept_lines_order" in kept and "TEMP B-TREE" not in kept, plan
    assert "kept_lines_due" in unkept and "SCAN runs" not in unkept, plan


def test_postgresql_merges_the_two_halves_each_in_its_order(tmp_path, db_url):
    """On PostgreSQL the CSV's two halves (runs with a kept row, runs due) are merged by a Merge
    Append of each half in the CSV's order, not appended and sorted together (a million rows)."""
    from sqlalchemy.dialects import postgresql

    from orchestrator.setting_registry import RESULTS_ORDER
    from orchestrator.store import cell_stats

    if db_url.startswith("sqlite"):
        return  # SQLite's plan: test_sqlite_walks_the_index_in_the_csvs_order_without_sorting
    landed(db_url, tmp_path / "runs", 3)
    sql = str(cell_stats.results_lines({}, RESULTS_ORDER, None).compile(
        dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
    plan = [row[0] for row in query(db_url, "EXPLAIN " + sql.replace("%", "%%"))]
    top = [step.strip(" ->") for step in plan[:2]]  # the select around the merge, then the merge
    assert top[0].startswith("Subquery Scan on lines") and top[1].startswith("Merge Append"), plan


def test_every_index_postgresql_makes_fits_its_column_limit():
    """PostgreSQL refuses an index of more than INDEX_MAX_KEYS (32) columns, included ones counted:
    the covering order index of kept_lines (21 order columns now, 30 with the nine settings issues
    37 and 38 add, its texts and the run's id: 35) failed every PostgreSQL upgrade once they were
    merged; there the index holds the order alone. Each index the metadata makes on PostgreSQL is counted as it would be made."""
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.schema import CreateIndex

    dialect = postgresql.dialect()
    made = [index for table in schema.Base.metadata.tables.values() for index in table.indexes
            if getattr(index, "_ddl_if", None) is None or index._ddl_if.dialect in (None, "postgresql")]
    assert "ix_kept_lines_order_pg" in {index.name for index in made}
    for index in made:
        included = index.dialect_options["postgresql"].get("include") or ()
        assert len(index.expressions) + len(included) <= kept_lines.PG_INDEX_COLUMNS, str(CreateIndex(index).compile(dialect=dialect))
    assert len(kept_lines.ORDER) <= kept_lines.PG_INDEX_COLUMNS


def test_texts_are_csv_writers_fields_by_name_or_by_position_a_line_end_inside_too():
    """texts_of: each segment as one csv.writer line of its fields (without the line's end), the
    metrics' text appended; the same from tuples (`keys`) as from mappings, and where a field holds
    a line's end (the one-writerow-a-row path) as where none does."""
    import csv
    import io

    from orchestrator.store import csv_lines

    keys = kept_lines._SELECTED
    plain = {k: f"v{i}" for i, k in enumerate(keys)}
    odd = {**plain, "sweep": "two\nlines", "model": 'say "hi"', "like": None, "seed": 3, "mode": "a,b", "metric_text": None}
    runs = [plain, odd, {**plain, "run": "crlf\r\n"}]
    expected = []
    for values in runs:
        texts = []
        for name, segment in zip(kept_lines.TEXTS, kept_lines.SEGMENTS):
            out = io.StringIO()
            csv.writer(out, **csv_lines.DIALECT).writerow([values[f] for f in segment if f not in csv_lines.METRIC_COLUMNS])
            text = out.getvalue()[:-len(csv_lines.DIALECT["lineterminator"])]
            if csv_lines.METRIC_COLUMNS[0] in segment:
                text += "," + (values["metric_text"] or csv_lines.NO_METRICS)
            texts.append(text)
        expected.append(tuple(texts))
    assert kept_lines.texts_of(runs) == expected
    assert kept_lines.texts_of([tuple(v[k] for k in keys) for v in runs], keys) == expected
    assert kept_lines.texts_of(runs[:1]) == expected[:1]  # no line's end inside: one writerows
    assert kept_lines.texts(odd) == dict(zip(kept_lines.TEXTS, expected[1]))


def test_kept_lines_are_written_500_a_statement_on_sqlite(tmp_path, monkeypatch):
    """kept_lines.keep_landed on SQLite: one multi-row upsert per 500 runs (bulk.write_many), not a
    statement a run; the rows as assert_kept_lines_exact wants them."""
    from sqlalchemy import event

    from orchestrator.launch.submit_plan import new_run

    db_url = f"sqlite:///{tmp_path / 'results.db'}"
    runs = tmp_path / "runs"
    Session = db.open_db(db_url)
    result = make_result(sweep="s1", model=MODELS[0], repeat=0)
    write_result(runs, result)
    collect(Session, runs)
    opts = SimpleNamespace(backend=SimpleNamespace(name="local"), runs=str(runs))
    new = [new_run("s1", result["cell_id"], repeat, 1, opts, ("u", "h")) for repeat in range(1, 1201)]
    statements = []
    with Session.begin() as session:
        event.listen(session.connection(), "before_cursor_execute",
                     lambda conn, cursor, sql, params, context, many: statements.append((sql, many)))
        launch_records.insert_many(session, schema.Run.__table__, [run.row() for run in new], launch_records.NEW_RUN_COLUMNS)
        statements.clear()
        ids = session.scalars(select(Run.id).where(Run.uid.in_([run.uid for run in new]))).all()
        statements.clear()
        kept_lines.keep_landed(session.connection(), ids)
    upserts = [(sql, many) for sql, many in statements if sql.startswith("INSERT INTO kept_lines")]
    assert len(upserts) == 3 and not any(many for _, many in upserts) and "ON CONFLICT" in upserts[0][0]
    Session.kw["bind"].dispose()
    assert len(assert_kept_lines_exact(db_url)) == 1201


def test_a_launchs_lines_are_what_the_view_shows_on_a_grid_of_settings(tmp_path):
    """The kept lines a real launch writes (fake sbatch), on a grid of settings at and away from
    their defaults (nodes, like, mode, target_accuracy given as an int: 1), are what the view
    shows; a second launch of the same cells (force=true: new attempts of known cells) too.
    48 cells: hardware, like, nodes and seed two ways each, and three modes (accuracy: two targets)."""
    import os
    import subprocess
    import sys

    from helpers import REPO

    sys.path.insert(0, str(REPO / "benchmarks"))
    import scale

    url = f"sqlite:///{tmp_path / 'results.db'}"
    env, _ = scale.fake_slurm(tmp_path / "bin")
    env = {**os.environ, **env, "ORCHESTRATOR_DB": url, "ORCHESTRATOR_RUNS": str(tmp_path / "runs"),
           "ORCHESTRATOR_CACHE": str(tmp_path / "cache")}
    grid = ["cluster=slurm", "hardware=cpu12,p100", "mode=throughput,accuracy", "target_accuracy=1,0.5",
            "nodes=1,2", "dataset=synthetic", "dataset.like=imagenet,cifar10", "model=alexnet", "seed=0,1"]
    for extra in ([], ["force=true"]):
        done = subprocess.run([sys.executable, "-m", "orchestrator", "-m", *grid, *extra], cwd=tmp_path, env=env,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    assert_kept_lines_exact(url)
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as conn:
        rows = expected_rows(conn).values()
    engine.dispose()
    shown = sorted((r["attempt"], r["hardware"], r["like"], r["nodes"], r["cell_mode"] or "-", r["target_accuracy"] or 0)
                   for r in rows)
    modes = [("-", 0), ("accuracy", 0.5), ("accuracy", 1.0)]  # throughput: target_accuracy is none of its settings
    assert shown == sorted((attempt, hardware, like, nodes, *mode) for attempt in (1, 2) for hardware in ("cpu12", "p100")
                           for like in ("cifar10", "imagenet") for nodes in (1, 2) for mode in modes for _ in (0, 1))


def test_a_launchs_writes_have_a_larger_page_cache_set_back_after(tmp_path):
    """launch_records.cached: on SQLite the launch's writes get a page cache of LAUNCH_CACHE_KIB (its
    dirty pages kept until the commit), and the connection's own size is set back after."""
    Session = db.open_db(f"sqlite:///{tmp_path / 'results.db'}")
    with Session() as session:
        driver = session.connection().connection.dbapi_connection
        size = lambda: driver.execute("PRAGMA cache_size").fetchone()[0]
        before = size()
        with launch_records.cached(session):
            assert size() == -launch_records.LAUNCH_CACHE_KIB != before
        assert size() == before
    Session.kw["bind"].dispose()


def test_a_remake_of_kept_metrics_remakes_the_kept_lines_that_hold_its_text(tmp_path, db_url):
    """result_rows.MADE_FROM: kept_lines' last text is kept_metrics.csv_text, so a revision that
    names kept_metrics alone in its `rebuilds` (a metric's text changed) remakes kept_lines too;
    else each run's CSV line keeps the metric text of before (here: a text made stale on purpose)."""
    from orchestrator.store import result_rows

    landed(db_url, tmp_path / "runs", 6)
    execute(db_url, f"update kept_lines set {kept_lines.TEXTS[-1]} = 'stale'")
    engine = create_engine(db_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            result_rows.remake(conn, {"kept_metrics"})
    finally:
        engine.dispose()
    assert len(assert_kept_lines_exact(db_url)) == 6


def test_a_copy_that_lands_runs_the_destination_has_uncollected_keeps_their_lines(tmp_path, db_url):
    """db_copy's replaced runs (uncollected in the destination, collected in the source): their
    metrics, kept metrics and kept CSV texts follow, as the new runs' do."""
    from orchestrator.store import result_rows

    src = f"sqlite:///{tmp_path / 'mine.db'}"
    landed(src, tmp_path / "runs", 6)
    db_copy.copy(src, db_url)
    # the destination's runs as a launch leaves them: recorded, not yet collected, no metrics
    execute(db_url, "delete from metrics", "update runs set collected_at = null, state = 'running'")
    engine = create_engine(db_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            result_rows.keep_metrics(conn, conn.scalars(select(Run.id)).all())
    finally:
        engine.dispose()
    assert query(db_url, "select count(*) from kept_metrics") == [(0,)]
    db_copy.copy(src, db_url)
    assert query(db_url, "select count(*) from runs where collected_at is null") == [(0,)]
    assert len(assert_kept_lines_exact(db_url)) == 6


def _launched(Session, runs, results, attempt):
    """A launch's new attempt of each result's run, recorded as launch_records.insert_runs does."""
    from orchestrator.launch.submit_plan import new_run

    opts = SimpleNamespace(backend=SimpleNamespace(name="local"), runs=str(runs))
    new = [new_run(r["sweep_id"], r["cell_id"], r["repeat"], attempt, opts, ("u", "h")) for r in results]
    with Session.begin() as session:
        launch_records.insert_runs(session, [run.row() for run in new], [(run.cell_id, run.repeat) for run in new])
    return new


def _csv(url, *args):
    import io
    from contextlib import redirect_stdout

    from orchestrator.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["--db", url, "results", "--csv", *args]) == 0
    return out.getvalue()


def test_a_launch_keeps_no_line_and_the_csv_reads_its_runs_from_runs_and_cells(tmp_path, db_url):
    """A launch writes no kept_lines row (its ~0.4 s of a 10,000-cell launch): its runs are due,
    and `results --csv` reads them from runs and cells, merged in the CSV's order with the kept
    ones, in the view's bytes, whatever their state (a float setting as repr writes it, not as SQL
    prints it: 1/3), with --where and --limit; each gets its row where it lands."""
    import csv
    import io

    from orchestrator.launch.submit_plan import new_run

    runs = tmp_path / "runs"
    results = [make_result(sweep="s1", model=MODELS[i % 3], repeat=0, mode="accuracy", epochs=2, target_accuracy=accuracy)
               for i, accuracy in enumerate((1 / 3, 1e-05, 0.1 + 0.2, None))]
    for result in results:
        write_result(runs, result)
    Session = db.open_db(db_url)
    assert collect(Session, runs).added == 4
    new = _launched(Session, runs, results, 2)  # new attempts of landed runs
    opts = SimpleNamespace(backend=SimpleNamespace(name="local"), runs=str(runs))
    fresh = [new_run("s1", r["cell_id"], 1, 1, opts, ("u", "h")) for r in results]  # new repeats
    with Session.begin() as session:
        launch_records.insert_runs(session, [run.row() for run in fresh], [(run.cell_id, 1) for run in fresh])
    assert query(db_url, "select count(*) from kept_lines") == [(4,)]
    assert query(db_url, "select count(*) from kept_lines_due") == [(8,)]
    assert len(assert_kept_lines_exact(db_url)) == 4
    execute(db_url, f"update runs set state = 'running', node = 'n\"1' where uid = '{new[0].uid}'",
            f"update runs set state = 'lost', error_message = 'a,b\nc' where uid = '{new[1].uid}'",
            f"update runs set state = 'failed', error_class = 'oom' where uid = '{new[2].uid}'",
            "update runs set params = 7, git_dirty = true where attempt = 2")
    assert len(assert_kept_lines_exact(db_url)) == 4
    printed = _csv(db_url)
    for text in ("0.3333333333333333", "1e-05", "0.30000000000000004"):
        assert printed.count(f",{text},") == 3, text  # landed, new attempt, new repeat
    rows = list(csv.reader(io.StringIO(printed)))
    at = rows[0].index("model")
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([rows[0], *(r for r in rows[1:] if r[at] == MODELS[1])])
    assert _csv(db_url, "--where", f"model={MODELS[1]}") == out.getvalue()
    assert len(list(csv.reader(io.StringIO(_csv(db_url, "--limit", "5"))))) == 6
    for run, result in zip(new, results):  # the new attempts land: their rows are kept, none due
        write_result(runs, {**result, "run_uid": run.uid, "attempt": 2})
    assert collect(Session, runs).added == 4
    Session.kw["bind"].dispose()
    assert query(db_url, "select count(*) from kept_lines_due") == [(4,)]
    assert len(assert_kept_lines_exact(db_url)) == 8


def test_a_launch_over_a_row_a_delete_left_reads_its_runs_as_they_are(tmp_path, db_url):
    """A run deleted without its cascade (foreign keys off) leaves its kept_lines row; SQLite gives
    its id to the next run inserted, which a launch no longer keeps: that row goes first, so the
    new run is not read with the deleted one's texts."""
    runs = tmp_path / "runs"
    results = [make_result(sweep="s1", model=MODELS[i], repeat=0) for i in range(3)]
    for result in results:
        write_result(runs, result)
    Session = db.open_db(db_url)
    collect(Session, runs)
    execute(db_url, "delete from metrics where run_id = (select max(id) from runs)",
            "delete from runs where id = (select max(id) from runs)")
    _launched(Session, runs, results[:1], 2)
    Session.kw["bind"].dispose()
    assert len(assert_kept_lines_exact(db_url)) == 2


def test_the_settings_of_issues_37_and_38_are_the_views_for_due_and_kept_runs(tmp_path, db_url):
    """seq_len, layers, width, heads, phase, compile, batch_search, min_batches, min_seconds: at
    their defaults and away from them, in a run's kept line and in a due run's line read from runs
    and cells, as the view shows them; the two float settings (target_accuracy, min_seconds) as
    repr writes them, one, both or neither in a line (csv_lines.PIECES holds both)."""
    runs = tmp_path / "runs"
    cells = [{}, {"mode": "accuracy", "epochs": 2, "target_accuracy": 1 / 3},
             {"phase": "inference", "min_batches": 7, "min_seconds": 0.1 + 0.2, "compile": "compiled"},
             {"phase": "inference", "min_batches": 100, "min_seconds": 1e-05, "batch_search": "auto", "batch_size": 1},
             {"model": "lstm", "dataset": "synthetic", "like": "ptb", "seq_len": 32, "compile": "eager"},
             {"model": "gpt", "dataset": "synthetic", "like": "ptb", "seq_len": 64, "layers": 2, "width": 64, "heads": 2,
              "mode": "accuracy", "epochs": 1, "target_accuracy": 0.5, "phase": "train"}]
    results = [make_result(sweep="s9", **cell) for cell in cells]
    for result in results:
        write_result(runs, result)
    Session = db.open_db(db_url)
    assert collect(Session, runs).added == len(cells)
    new = _launched(Session, runs, results, 2)  # due: read from runs and cells
    assert query(db_url, "select count(*) from kept_lines_due") == [(len(cells),)]
    kept = assert_kept_lines_exact(db_url)
    assert len(kept) == len(cells)
    printed = _csv(db_url)
    for text, cells_with in (("0.3333333333333333", 1), ("0.30000000000000004", 1), ("1e-05", 1), (",inference,", 2),
                             (",compiled,", 1), (",auto,", 1), (",eager,", 1)):
        assert printed.count(text) == 2 * cells_with, text  # each landed run's line and its due attempt's
    for run, result in zip(new, results):  # they land: every line kept, none due
        write_result(runs, {**result, "run_uid": run.uid, "attempt": 2})
    assert collect(Session, runs).added == len(cells)
    Session.kw["bind"].dispose()
    assert query(db_url, "select count(*) from kept_lines_due") == [(0,)]
    assert len(assert_kept_lines_exact(db_url)) == 2 * len(cells)


def test_an_upgrade_from_0025_with_due_runs_leaves_every_run_kept_or_due(tmp_path, db_url):
    """A database at 0025 (kept_lines_due, before the settings of issues 37 and 38) with landed and
    due runs, upgraded: 0026-0029 name kept_lines in `rebuilds`, and remaking kept_lines remakes
    kept_lines_due after it (result_rows.MADE_FROM), so no run is left without a kept row or a due
    row; the CSV is the view's, the new settings at their defaults."""
    from orchestrator.store import migrations, result_rows
    from test_db import upgraded_from

    scripts = migrations.script()
    stale = migrations.stale(scripts, "0025")
    assert "kept_lines" in stale and "kept_lines_due" in result_rows.MADE_FROM["kept_lines"]
    for revision in ("0026", "0027", "0028", "0029"):
        assert "kept_lines" in scripts.get_revision(revision).module.rebuilds, revision
    runs = tmp_path / "runs"
    results = [make_result(sweep="s1", model=MODELS[i], repeat=0) for i in range(3)]
    for result in results:
        write_result(runs, result)
    Session = db.open_db(db_url)
    assert collect(Session, runs).added == 3
    _launched(Session, runs, results, 2)
    Session.kw["bind"].dispose()
    assert query(db_url, "select count(*) from kept_lines_due") == [(3,)]
    upgraded_from(db_url, "0025")
    assert query(db_url, "select version_num from alembic_version") == [(db.SCHEMA_VERSION,)]
    assert query(db_url, "select count(*) from runs where id not in (select run_id from kept_lines) "
                         "and id not in (select run_id from kept_lines_due)") == [(0,)]
    assert len(assert_kept_lines_exact(db_url)) == 6  # remade: every run's row, none due
    assert query(db_url, "select count(*) from kept_lines_due") == [(0,)]
    assert ",train,native," in _csv(db_url)


def test_a_run_a_launch_marks_due_as_a_collector_lands_it_is_in_the_csv_once(tmp_path, db_url):
    """On PostgreSQL a launch marks due every run above the largest id it saw without a kept row
    (kept_lines.launched): a run another process recorded meanwhile, which a collector is landing,
    is marked due again once that collector commits (the launch's insert waits on the due row the
    collector deleted). The run then has both rows, and `results --csv` lists it once, from
    kept_lines. (SQLite: one writer at a time, a launch's look and its mark in one.)"""
    import threading
    import time

    from orchestrator.store import result_rows

    if is_sqlite(db_url):
        return
    runs = tmp_path / "runs"
    results = [make_result(sweep="s1", model=MODELS[i], repeat=0) for i in range(2)]
    for result in results:
        write_result(runs, result)
    Session = db.open_db(db_url)
    collect(Session, runs)
    launch = Session()
    mark_due = kept_lines.launched(launch.connection())  # the launch's look: before the run below exists
    rerun = _launched(Session, runs, results[:1], 2)[0]  # another process records a run (due), committed
    engine = create_engine(db_url, poolclass=NullPool)
    collector = engine.connect()
    landing = collector.begin()
    run_id = collector.scalar(select(Run.id).where(Run.uid == rerun.uid))
    result_rows.keep_metrics(collector, [run_id])  # a collector lands it: kept row written, due row gone, not committed
    mine = _new_attempts(runs, results[1:], 2)
    failed = []

    def launch_records_its_runs():
        try:
            launch_records.insert_many(launch, schema.Run.__table__, [run.row() for run in mine],
                                       launch_records.NEW_RUN_COLUMNS)
            mark_due()
        except Exception as exc:  # noqa: BLE001 - said by the test
            failed.append(exc)

    thread = threading.Thread(target=launch_records_its_runs)
    thread.start()
    with engine.connect() as watcher:  # until the launch's mark waits for the collector (no sleep: its lock)
        deadline = time.monotonic() + 120
        while thread.is_alive() and not watcher.scalar(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")):
            assert time.monotonic() < deadline, "the launch's mark never waited for the collector"
            watcher.rollback()
    landing.commit()
    thread.join()
    assert not failed, failed
    launch.commit()
    launch.close()
    collector.close()
    engine.dispose()
    Session.kw["bind"].dispose()
    assert query(db_url, f"select count(*) from kept_lines where run_id = {run_id}") == [(1,)]
    assert query(db_url, f"select count(*) from kept_lines_due where run_id = {run_id}") == [(1,)]
    assert len(assert_kept_lines_exact(db_url)) == 3
    assert printed_csv(db_url).count(rerun.uid) == 1


def _new_attempts(runs, results, attempt):
    """New attempts of each result's run (submit_plan.NewRun), not recorded."""
    from orchestrator.launch.submit_plan import new_run

    opts = SimpleNamespace(backend=SimpleNamespace(name="local"), runs=str(runs))
    return [new_run(r["sweep_id"], r["cell_id"], r["repeat"], attempt, opts, ("u", "h")) for r in results]


def _view_csv_where(url, where, limit=None):
    """view_csv of the `results` view's rows that match `where` (`--where` arguments, parsed as
    the command parses them), the first `limit`; empty where none does (the command prints nothing)."""
    import csv
    import io

    from orchestrator.commands.results import RESULTS_ORDER, _parse_where

    view = schema.results_view
    rows = select(view).where(*(view.c[k].in_(v) for k, v in _parse_where(where).items()))
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as conn:
        rows = conn.execute(rows.order_by(*(view.c[c] for c in RESULTS_ORDER)).limit(limit)).all()
    engine.dispose()
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([schema.RESULTS_COLUMNS, *rows] if rows else [])
    return out.getvalue()


def test_due_runs_of_odd_cells_beside_kept_ones_are_the_views_bytes_under_every_filter(tmp_path, db_url):
    """Due runs (read from runs and cells) whose cells hold text csv quotes (commas, quotes, line
    ends, `%`, a NUL on SQLite), empty text, NULL settings (a default filled in, or none), floats
    repr alone writes, tied with kept runs up to a NULL or an equal key: `results --csv` is the
    view's rows in csv.writer's bytes, whole, under --where (a text, a number, a float, `mode`,
    `state`), --sweep and every --limit."""
    runs = tmp_path / "runs"
    results = [make_result(sweep="s1", model=MODELS[i % 3], repeat=i // 3, mode="accuracy", epochs=2,
                           target_accuracy=(0.5, None, 2.0)[i % 3]) for i in range(6)]
    for result in results:
        write_result(runs, result)
    Session = db.open_db(db_url)
    collect(Session, runs)
    nul = [("n\x00ul,", 7.0, "l\x00")] if is_sqlite(db_url) else []  # PostgreSQL's text holds no NUL
    odd = [('a,b%s%%', 1.0, None), ('q"uote', 1e16, "x,y"), ("line\nbreak", None, None), (" lead", 0.1 + 0.2, "z"),
           ("", 5e-324, ""), ("cr\rx", 123456789.0, None), *nul, *((MODELS[0], accuracy, like) for accuracy, like in
                                                                   ((0.5, None), (None, None), (0.5, ""), (0.5, "a"), (float("inf"), None)))]
    engine = create_engine(db_url, poolclass=NullPool)
    with engine.begin() as conn:  # cells a launch could not make, each a copy of a landed one
        base = dict(conn.execute(select(Cell.__table__).where(Cell.id == results[0]["cell_id"])).mappings().one())
        conn.execute(Cell.__table__.insert(), [
            {**base, "id": f"odd{i}", "model": model, "target_accuracy": accuracy, "like": like, "nodes": None if i % 2 else 2,
             "mode": None if i == 3 else base["mode"], "epochs": None if i % 3 == 0 else base["epochs"],
             "input": None if i % 4 == 0 else "memory"} for i, (model, accuracy, like) in enumerate(odd)])
    engine.dispose()
    _launched(Session, runs, [{"sweep_id": "s1", "cell_id": f"odd{i}", "repeat": 0} for i in range(len(odd))], 1)
    _launched(Session, runs, results, 2)
    Session.kw["bind"].dispose()
    assert query(db_url, "select count(*) from kept_lines_due") == [(len(odd) + len(results),)]
    assert _csv(db_url) == view_csv(db_url)
    for where in ([f"model={MODELS[0]}"], ["attempt=2"], ["nodes=2"], ["mode=accuracy"], ["state=pending"],
                  ["target_accuracy=0.5"], ["like=z"], ["sweep=s1"]):
        assert _csv(db_url, *(a for w in where for a in ("--where", w))) == _view_csv_where(db_url, where), where
    assert _csv(db_url, "--sweep", "s1") == view_csv(db_url)
    for limit in (1, 2, 3, 5, 8, 13, 40):
        assert _csv(db_url, "--limit", str(limit)) == _view_csv_where(db_url, [], limit), limit
