"""The summary kept as runs land (kept_summary, result_rows.refresh_summary) on real result files and
real databases (`db_url`: SQLite files and PostgreSQL databases): after every way runs change
(collected, failed, rerun, landed by two collectors at once, a launch's new attempts, an upgrade
of a database that had runs before) its rows are exactly the `cell_summary` select's, computed
from the runs, and `results --summary` reads it."""
import csv
import io


from orchestrator.store import cell_stats, db, result_rows, schema
from orchestrator.cli import main
from orchestrator.results.collector import collect
from db_urls import execute
from result_factory import make_result, write_result
from test_collector import two_collectors_at_once

MODELS = ("lenet", "alexnet", "vgg16")


def kept_and_computed(url, filters=None, noisy_cv=schema.NOISY_CV):
    """(the kept summary's rows, the rows the select computes from the runs), each by cell."""
    Session = db.open_db(url)
    try:
        with Session() as session:
            kept = {r["cell"]: dict(r) for r in session.execute(result_rows.kept_summary(filters or {}, noisy_cv))
                    .mappings()}
            computed = {r["cell"]: dict(r) for r in session.execute(cell_stats.summary_select(filters, noisy_cv))
                        .mappings()}
    finally:
        Session.kw["bind"].dispose()
    return kept, computed


def assert_exact(url):
    """The kept rows are the computed ones, every figure equal (to the last bit: the kept ones are
    the same select's)."""
    kept, computed = kept_and_computed(url)
    assert kept.keys() == computed.keys() and kept
    for cell, row in kept.items():  # column by column: a difference names its column
        assert {k: (v, computed[cell][k]) for k, v in row.items() if v != computed[cell][k]} == {}
    return kept


def speeds(i):
    """A run's images/s, different for every run (medians and spreads that tell runs apart)."""
    return {"images_per_sec": 1000.0 + 37.0 * i + (i % 5) ** 2, "gpu_power_avg_w": 100.0 + i,
            "energy_per_image_j": 0.01 * (i + 1), "gpu_mem_peak_mb": 500.0 + 3 * i}


def landed(url, runs, n):
    """`n` runs of sweep `s` over MODELS' cells (repeats 0, 1, ...), written as result files under
    `runs` and collected into the database at `url`."""
    for i in range(n):
        write_result(runs, make_result(sweep="s", model=MODELS[i % 3], repeat=i // 3, metrics=speeds(i)))
    Session = db.open_db(url)
    collect(Session, runs)
    Session.kw["bind"].dispose()


def test_the_kept_summary_is_the_computed_one_after_collects_failures_and_reruns(tmp_path, db_url):
    runs = tmp_path / "runs"
    Session = db.open_db(db_url)
    for i in range(12):  # three cells, four repeats each; one failed
        write_result(runs, make_result(sweep="s1", model=MODELS[i % 3], repeat=i // 3, metrics=speeds(i),
                                       state="failed" if i == 4 else "done"))
    assert collect(Session, runs).added == 12
    first = assert_exact(db_url)
    assert sorted(r["n"] for r in first.values()) == [3, 4, 4]  # the failed repeat counts for nothing
    # a rerun lands: attempt 2 of two repeats (one better, one failed: that repeat drops out) and a new repeat
    for i, state in ((0, "done"), (3, "failed")):
        write_result(runs, make_result(sweep="s2", model=MODELS[i % 3], repeat=i // 3, attempt=2, state=state,
                                       metrics=speeds(40 + i)))
    write_result(runs, make_result(sweep="s2", model="lenet", repeat=7, metrics=speeds(50)))
    assert collect(Session, runs).added == 3
    after = assert_exact(db_url)
    lenet = next(c for c, r in after.items() if r["model"] == "lenet")
    assert after[lenet]["n"] == 4 and after[lenet] != first[lenet]  # 0 and 3 replaced (one failed), 7 added
    # a repeat whose every attempt failed: the cell leaves the summary
    for repeat in range(4):
        write_result(runs, make_result(sweep="s3", model="vgg16", repeat=repeat, attempt=3, state="failed"))
    collect(Session, runs)
    assert "vgg16" not in {r["model"] for r in assert_exact(db_url).values()}
    Session.kw["bind"].dispose()


def test_a_launchs_new_attempt_takes_its_repeat_out_of_the_kept_summary(tmp_path, db_url):
    """A new attempt recorded (attempt 2, pending: a launch with force=true, a rerun) is the latest
    word on its repeat: the done attempt 1 leaves the summary then, in the launch's transaction
    (launch_records.insert_runs, as submit.py and rerun.py call it), not once the attempt lands."""
    from types import SimpleNamespace

    from orchestrator.launch.submit_plan import new_run
    from orchestrator.store import launch_records

    runs = tmp_path / "runs"
    Session = db.open_db(db_url)
    results = [make_result(sweep="s1", repeat=r, metrics=speeds(r)) for r in range(3)]
    for result in results:
        write_result(runs, result)
    collect(Session, runs)
    assert [r["n"] for r in assert_exact(db_url).values()] == [3]
    opts = SimpleNamespace(backend=SimpleNamespace(name="local"), runs=str(tmp_path / "runs"))  # what new_run reads
    again = new_run("s1", results[0]["cell_id"], 0, 2, opts, ("u", "h"))
    with Session.begin() as session:
        launch_records.insert_runs(session, [again.row()], [(again.cell_id, again.repeat)])
    assert [r["n"] for r in assert_exact(db_url).values()] == [2]
    Session.kw["bind"].dispose()


def test_two_collectors_landing_runs_of_the_same_cells_at_once_keep_it_exact(tmp_path, db_url):
    """Two collectors at once, in batches of two, over many repeats of three cells: each cell's runs
    are landed by both, in rounds whose transactions begin together (on a server they overlap);
    the second to refresh a cell waits for the first and counts its runs (result_rows.refresh_summary's
    lock). In rounds, both land runs: left alone, one may land every run before the other starts."""
    n = 60
    db.open_db(db_url).kw["bind"].dispose()
    runs = tmp_path / "runs"
    for i in range(n):
        write_result(runs, make_result(sweep="s", model=MODELS[i % 3], repeat=i // 3, metrics=speeds(i)))
    outcomes = two_collectors_at_once(db_url, runs, batch=2, timeout=300, in_rounds=True)
    assert [added for added, _, _ in outcomes] == [n // 2, n // 2], outcomes  # 30 batches, from 0 and from 15
    assert all(broken == [] for _, _, broken in outcomes)
    assert sorted(r["n"] for r in assert_exact(db_url).values()) == [n // 3] * 3


def test_an_upgrade_builds_the_kept_summary_of_the_runs_already_there(tmp_path, db_url):
    """A database at 0016 (no kept_summary) with runs: the upgrade to 0017 fills it from them."""
    from test_db import upgraded_from

    landed(db_url, tmp_path / "runs", 9)
    upgraded_from(db_url, "0016")
    assert len(assert_exact(db_url)) == 3


def test_results_summary_reads_the_kept_rows_and_the_runs_where_a_filter_needs_them(tmp_path, db_url, monkeypatch,
                                                                                    capsys):
    """Filters on a cell's settings read the kept summary; one on a run's column (--sweep, a metric)
    computes from the runs; both give what the select gives. A kept row changed by hand shows, which
    proves where `results --summary` read it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCHESTRATOR_DB", db_url)
    monkeypatch.delenv("ORCHESTRATOR_NOISY_CV", raising=False)
    for i in range(9):
        write_result(tmp_path / "runs", make_result(sweep="s", model=MODELS[i % 3], repeat=i // 3, metrics=speeds(i)))
    assert main(["collect"]) == 0
    capsys.readouterr()

    def summary_csv(*args):
        assert main(["results", "--summary", "--csv", *args]) == 0
        return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))

    every = summary_csv()
    assert [r["model"] for r in every] == ["alexnet", "lenet", "vgg16"] and list(every[0]) == list(schema.SUMMARY_COLUMNS)
    assert summary_csv("--where", "model=lenet,vgg16") == every[1:]
    assert summary_csv("--sweep", "s") == every  # a run's column: from the runs, the same rows
    # `mode` (the cell's, else what the run measured) beside a run's column: each run once, not once per cell
    assert summary_csv("--sweep", "s", "--where", "mode=throughput") == every
    assert [r["noisy"] for r in summary_csv("--noisy-cv", "1")] == ["1", "1", "1"]  # the reader's threshold
    execute(db_url, "update kept_summary set n = 99 where model = 'lenet'")
    assert [r["n"] for r in summary_csv("--where", "model=lenet")] == ["99"]
    assert [r["n"] for r in summary_csv("--sweep", "s", "--where", "model=lenet")] == ["3"]


def test_a_mode_filter_picks_runs_by_what_they_measured_as_results_does(tmp_path, db_url, monkeypatch, capsys):
    """`--where mode=` names the `results` column: the cell's mode, else what the run measured (a
    cell from before accuracy mode whose runs measured top-1 is `accuracy` there). The summary
    answers it from the runs, as it answers `--sweep` (not from the kept row's cell setting)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCHESTRATOR_DB", db_url)
    for i in range(4):
        measured = {**speeds(i), "top1_final": 0.9} if i % 2 else speeds(i)  # alexnet measured top-1
        write_result(tmp_path / "runs", make_result(sweep="s", model=MODELS[i % 2], repeat=i // 2, metrics=measured))
    assert main(["collect"]) == 0
    capsys.readouterr()

    def models(*args):
        assert main(["results", "--summary", "--csv", *args]) == 0
        return [(r["model"], r["n"]) for r in csv.DictReader(io.StringIO(capsys.readouterr().out))]

    assert models("--where", "mode=accuracy") == models("--sweep", "s", "--where", "mode=accuracy") == [("alexnet", "2")]
    assert models("--where", "mode=throughput") == [("lenet", "2")]


def _one_cell(tmp_path, db_url, values):
    """The kept and computed summary rows of one cell whose repeats measured `values` images/s."""
    runs = tmp_path / "runs"
    for repeat, value in enumerate(values):
        write_result(runs, make_result(sweep="s", repeat=repeat, metrics={"images_per_sec": value}))
    Session = db.open_db(db_url)
    assert collect(Session, runs).added == len(values)
    Session.kw["bind"].dispose()
    (row,) = assert_exact(db_url).values()
    return row


def test_the_spread_of_repeats_far_from_zero_is_exact(tmp_path, db_url):
    """Sums of squares of the values themselves cancel where the mean dwarfs the spread: 1e9 + 1,
    2 and 3 gave an sd of 0 (the sums differ in their last bits only); their distances from the
    lowest give 1."""
    row = _one_cell(tmp_path, db_url, [1e9 + 1, 1e9 + 2, 1e9 + 3])
    assert row["n"] == 3 and row["images_per_sec_median"] == 1e9 + 2
    assert abs(row["images_per_sec_std"] - 1.0) < 1e-12


def test_a_vanishing_figure_lands_and_its_spread_is_zero(tmp_path, db_url):
    """PostgreSQL refused the square of 1e-300 (underflow): every collect that refreshed the cell
    failed, and the runs never landed."""
    row = _one_cell(tmp_path, db_url, [1e-300, 2e-300, 1e-300])
    assert row["n"] == 3 and row["images_per_sec_std"] == 0.0 and row["images_per_sec_min"] == 1e-300
