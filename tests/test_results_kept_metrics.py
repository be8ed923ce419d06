"""Each run's metrics kept pivoted as they land (kept_metrics, result_rows.keep_metrics), on real
result files and real databases (`db_url`: SQLite files and PostgreSQL databases): after every way
metrics rows change (collected, failed, rerun, collected again, landed by two collectors at once,
copied, an upgrade of a database that had runs before) its rows are exactly the view's pivot of
the metrics rows, and `results --csv` reads them, in the bytes the view's rows give."""
import csv
import io
import re
from contextlib import redirect_stdout

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.pool import NullPool

from orchestrator.cli import main
from orchestrator.commands.results import RESULTS_ORDER
from orchestrator.results.collector import collect
from orchestrator.store import cell_stats, db, db_copy, schema
from db_urls import execute, is_sqlite
from result_factory import make_result, write_result
from test_collector import two_collectors_at_once
from test_results_summary import MODELS, landed, speeds


def kept_and_pivoted(url):
    """(kept_metrics' rows, the view's pivot of the metrics rows), each by run id."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            kept = {r[0]: tuple(r)[:-1] for r in conn.execute(select(schema.KeptMetrics))}
            pivoted = {r[0]: tuple(r) for r in conn.execute(cell_stats.metric_pivot())}
    finally:
        engine.dispose()
    return kept, pivoted


def assert_kept_metrics_exact(url):
    """The kept rows are the pivoted ones, every value equal (to the last bit: the same select's),
    each with its text as csv writes those values (the CSV's metric fields, store/csv_lines.py)."""
    kept, pivoted = kept_and_pivoted(url)
    assert kept == pivoted and kept
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as conn:
        texts = dict(conn.execute(select(schema.KeptMetrics.run_id, schema.KeptMetrics.csv_text)).all())
    engine.dispose()
    for run_id, row in kept.items():
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerow(row[1:])
        assert texts[run_id] + "\n" == out.getvalue()
    assert view_csv(url) == printed_csv(url)
    return kept


def printed_csv(url):
    """What `results --csv` prints of the database at `url`."""
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["--db", url, "results", "--csv"]) == 0
    return out.getvalue()


def test_the_kept_metrics_are_the_pivot_after_collects_failures_reruns_and_a_second_landing(tmp_path, db_url):
    runs = tmp_path / "runs"
    Session = db.open_db(db_url)
    for i in range(9):  # three cells, three repeats each; one failed (what it measured before it failed kept too)
        write_result(runs, make_result(sweep="s1", model=MODELS[i % 3], repeat=i // 3, metrics=speeds(i),
                                       state="failed" if i == 4 else "done"))
    assert collect(Session, runs).added == 9
    assert len(assert_kept_metrics_exact(db_url)) == 9
    # a rerun lands: attempt 2 of repeat 0 (other numbers) and of the failed repeat
    for i in (0, 4):
        write_result(runs, make_result(sweep="s2", model=MODELS[i % 3], repeat=i // 3, attempt=2,
                                       metrics=speeds(40 + i)))
    assert collect(Session, runs).added == 2
    assert len(assert_kept_metrics_exact(db_url)) == 11
    # a run collected again (its collected_at reset, its file rewritten with other numbers): its row follows
    uid = make_result(sweep="s1", model=MODELS[0], repeat=1)["run_uid"]
    execute(db_url, f"UPDATE runs SET collected_at = NULL WHERE uid = '{uid}'")
    write_result(runs, make_result(sweep="s1", model=MODELS[0], repeat=1, metrics=speeds(77)))
    assert collect(Session, runs).added == 1
    kept = assert_kept_metrics_exact(db_url)
    assert 1000.0 + 37.0 * 77 + 4 in {row[1] for row in kept.values()}  # images_per_sec, the first column
    Session.kw["bind"].dispose()


def test_two_collectors_at_once_keep_every_runs_pivot(tmp_path, db_url):
    """Two collector processes over the same files, in batches of two: each run's pivot is written
    once, by the one that claimed it, and the kept rows are exact."""
    runs = tmp_path / "runs"
    for i in range(30):
        write_result(runs, make_result(sweep="s", model=MODELS[i % 3], repeat=i // 3, metrics=speeds(i)))
    db.open_db(db_url).kw["bind"].dispose()
    outcomes = two_collectors_at_once(db_url, runs, batch=2, timeout=300, in_rounds=True)
    assert sorted(added for added, _, _ in outcomes) == [14, 16], outcomes  # of 15 batches, from 0 and from 7 and all(broken == [] for _, _, broken in outcomes)
    assert len(assert_kept_metrics_exact(db_url)) == 30


def test_a_copy_keeps_the_pivot_of_the_runs_it_moves(tmp_path, db_url):
    src = f"sqlite:///{tmp_path / 'mine.db'}"
    landed(src, tmp_path / "runs", 6)
    db_copy.copy(src, db_url)
    assert assert_kept_metrics_exact(db_url).keys() and len(kept_and_pivoted(db_url)[0]) == 6


@pytest.mark.parametrize("revision", ["0017", "0019"])
def test_an_upgrade_builds_the_kept_metrics_of_the_runs_already_there(tmp_path, db_url, revision):
    """A database at 0017 (no kept_metrics) or 0019 (no text) with runs: the upgrade (0019, 0020)
    fills it from their metrics, numbers and text."""
    from test_db import upgraded_from

    landed(db_url, tmp_path / "runs", 6)
    upgraded_from(db_url, revision)
    assert len(assert_kept_metrics_exact(db_url)) == 6


def view_csv(url, where=""):
    """What `results --csv` printed before kept_metrics: the `results` view's rows in RESULTS_ORDER
    (the view pivots the metrics rows), written by csv as the command writes them."""
    engine = create_engine(url, poolclass=NullPool)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(schema.RESULTS_COLUMNS)
    with engine.connect() as conn:
        view = schema.results_view
        query = select(view).order_by(*(view.c[c] for c in RESULTS_ORDER))
        writer.writerows(conn.execute(query.where(view.c.framework == where) if where else query))
    engine.dispose()
    return out.getvalue()


def test_results_csv_reads_the_kept_metrics_in_the_views_bytes(tmp_path, db_url, monkeypatch, capsys):
    """The CSV from kept_metrics is byte for byte the one the view's rows give (metrics of every
    scale, a failed run, a rerun, two frameworks), and its plan reads each run's kept texts
    (kept_lines, which hold its metric fields as kept_metrics has them): it never pivots the metrics
    rows. (Whether it walks ix_kept_lines_order or sorts is the planner's choice from the
    statistics, which differ between eight runs and a million: docs/scale.md has the million's plan.)"""
    runs = tmp_path / "runs"
    metrics = {**speeds(3), "rss_peak_bytes": 123456789.0, "mfu": 0.1 + 0.2, "top1_final": 1 / 3}
    for i in range(8):
        write_result(runs, make_result(sweep="s", framework=("torch", "tensorflow")[i % 2], model=MODELS[i % 3],
                                       repeat=i // 3, metrics={**metrics, "images_per_sec": 10.0 / (i + 3)},
                                       state="failed" if i == 5 else "done"))
    write_result(runs, make_result(sweep="s2", framework="torch", model=MODELS[0], repeat=0, attempt=2,
                                   metrics=speeds(9)))
    monkeypatch.setenv("ORCHESTRATOR_DB", db_url)
    monkeypatch.setenv("ORCHESTRATOR_RUNS", str(runs))
    assert main(["collect"]) == 0
    capsys.readouterr()
    for where in ([], ["--where", "framework=torch"]):
        assert main(["results", "--csv", *where]) == 0
        printed = capsys.readouterr().out
        assert printed == view_csv(db_url, where[1].split("=")[1] if where else "")
        assert len(list(csv.reader(io.StringIO(printed)))) == (1 + 9 if not where else 1 + 5)
    query = cell_stats.results_lines({}, RESULTS_ORDER, None)
    engine = create_engine(db_url, poolclass=NullPool)
    with engine.connect() as conn:
        sql = str(query.compile(engine, compile_kwargs={"literal_binds": True}))
        if is_sqlite(db_url):
            plan = [r[-1] for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql)]
        else:  # psycopg reads % as a parameter's mark
            plan = [r[0] for r in conn.exec_driver_sql("EXPLAIN " + sql.replace("%", "%%"))]
    engine.dispose()
    assert not [step for step in plan if re.search(r"\bmetrics\b", step)], plan  # no metrics rows read
    # each run's kept texts (kept_lines: its metric fields among them), not even its kept_metrics row;
    # only the runs without a kept row (launched, not landed: the merge's other half) read it
    kept = kept_half(plan, is_sqlite(db_url))
    assert any("kept_lines" in step for step in kept) and not any("kept_metrics" in step for step in kept), plan


def kept_half(plan, sqlite):
    """The steps of a CSV plan that read the runs with a kept_lines row: SQLite's MERGE's LEFT
    (up to its RIGHT), PostgreSQL's Merge Append's first child (up to its next, by indentation)."""
    if sqlite:
        return plan[:plan.index("RIGHT")] if "RIGHT" in plan else plan
    merge = next(i for i, step in enumerate(plan) if "Merge Append" in step)
    children = [i for i, step in enumerate(plan) if i > merge and step.lstrip().startswith("->")]
    indent = len(plan[children[0]]) - len(plan[children[0]].lstrip())
    siblings = [i for i in children if len(plan[i]) - len(plan[i].lstrip()) == indent]
    return plan[siblings[0]:siblings[1]]
