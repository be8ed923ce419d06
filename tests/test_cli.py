"""`status`, `collect` and `results` end to end on real files and real databases: SQLite files (one
made by the last release before migrations, too) and, where the test is about the commands and not
the file, PostgreSQL databases (`any_db`)."""
import csv
import io
import secrets
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.store import db, schema
from orchestrator.cli import main
from db_urls import execute, is_sqlite, query
from result_factory import make_result, write_result, write_text


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A working directory with a runs/ tree of four runs (one failed) in two sweeps, no DB yet."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.delenv("ORCHESTRATOR_DB", raising=False)
    monkeypatch.delenv("ORCHESTRATOR_RUNS", raising=False)
    runs = tmp_path / "runs"
    write_result(runs, {**make_result(sweep="old", model="lenet"), "started_at": 1_000.0})
    write_result(runs, {**make_result(sweep="new", model="lenet", metrics={"images_per_sec": 900.0,
                                                                           "images_per_sec_std": 3.25}),
                        "started_at": 2_000.0})
    write_result(runs, {**make_result(sweep="new", model="alexnet", framework="tf"), "started_at": 2_000.0})
    write_result(runs, {**make_result(sweep="new", model="vgg16", state="failed", error={
        "class": "out_of_memory", "message": "CUDA out of memory.\nTried to allocate " + "9" * 300}),
        "started_at": 2_000.0})
    return tmp_path


@pytest.fixture
def any_db(env, db_url, monkeypatch):
    """env's directory with ORCHESTRATOR_DB naming a fresh database of each kind (db_url)."""
    monkeypatch.setenv("ORCHESTRATOR_DB", db_url)
    return db_url


def test_collect_reports_counts_and_second_run_adds_nothing(env, any_db, capsys):
    assert main(["collect"]) == 0
    assert capsys.readouterr().out.strip() == "4 added, 0 already in the DB, 0 broken"
    if is_sqlite(any_db):
        assert (env / "results.db").exists()
    assert query(any_db, "select count(*) from runs") == [(4,)]
    assert main(["collect"]) == 0
    assert capsys.readouterr().out.strip() == "0 added, 4 already in the DB, 0 broken"


def test_collect_with_a_broken_file_lands_the_rest_and_exits_1(env, any_db, capsys):
    bad = write_text(env / "runs", "new/deadbeef/0/result.json", '{"schema": 1, "run_uid": ')
    assert main(["collect"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("4 added, 0 already in the DB, 1 broken")
    assert "broken: runs/new/deadbeef/0/result.json: truncated JSON" in out
    assert bad.exists()
    assert main(["results", "--csv"]) == 0
    assert len(list(csv.DictReader(io.StringIO(capsys.readouterr().out)))) == 4


def test_status_counts_by_state_newest_first_and_lists_failures(env, any_db, capsys):
    main(["collect"])
    capsys.readouterr()
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert out.index("new") < out.index("old"), "newest sweep first"
    new_row = next(line for line in out.splitlines() if "│ new " in line)
    assert [c.strip() for c in new_row.strip("│ ").split("│")][2:5] == ["3", "2", "1"]  # cells, done, failed
    from trainers.common.failure_classes import way_out

    # each class with its way out (trainers/common/failure_classes.py)
    assert "Failed or lost runs of sweep new (1; the first 3 of each class):\n  out_of_memory (1): " in out
    assert " ".join(way_out("out_of_memory").split()) in " ".join(out.split())
    assert "failed torch/vgg16/mnist" in out
    assert "out_of_memory: CUDA out of memory. Tried to allocate 999" in out  # one line
    assert "9" * 150 not in out  # truncated
    assert str(env / "runs" / "new") in out and "trainer.log" in out
    assert "python -m orchestrator status --failed [--sweep ID] [--class A,B]" in out  # how to list all

    assert main(["status", "--sweep", "latest"]) == 0
    out = capsys.readouterr().out
    assert "│ new " in out and "│ old " not in out
    typed = "sqlite:///results.db" if is_sqlite(any_db) else any_db  # the URL as a user types it
    assert main(["--db", typed, "status", "--sweep", "old"]) == 0
    out = capsys.readouterr().out
    assert "│ old " in out and "Failed or lost" not in out


def test_status_is_a_summary_and_failed_lists_every_failure(env, any_db, capsys):
    """Per sweep and error class, the count and the first EXAMPLES runs (message and log);
    `status --failed [--class]` lists every one."""
    runs = env / "runs"
    for i in range(7):
        write_result(runs, {**make_result(sweep="new", model="googlenet", repeat=i, state="failed",
                                          error={"class": "crash", "message": f"Segmentation fault {i}"}),
                            "started_at": 2_000.0})
    write_result(runs, {**make_result(sweep="old", model="resnet50", state="failed",
                                      error={"class": "timeout", "message": "time limit 60 min"}), "started_at": 1_000.0})
    main(["collect"])
    capsys.readouterr()

    assert main(["status"]) == 0
    out = capsys.readouterr().out
    new_row = next(line for line in out.splitlines() if "│ new " in line)
    assert [c.strip() for c in new_row.strip("│ ").split("│")][2:5] == ["4", "2", "8"]  # cells, done, failed
    new = out[out.index("Failed or lost runs of sweep new (8; the first 3 of each class):"):
              out.index("Failed or lost runs of sweep old (1;")]
    crash = new[new.index("  crash (7): "):new.index("  out_of_memory (1): ")]
    assert [f"Segmentation fault {i}" in crash for i in range(7)] == [True] * 3 + [False] * 4
    assert crash.count("log: ") == 3 and crash.count("failed torch/googlenet/mnist  new:") == 3
    assert "    ... 4 more: python -m orchestrator status --failed --sweep new --class crash\n" in crash
    assert "  timeout (1): " in out and "time limit 60 min" in out  # the older sweep's, after the newer's
    assert out.index("sweep new (8") < out.index("sweep old (1") < out.index("Every one: ")

    assert main(["status", "--failed"]) == 0  # the caller's own: these runs' submitter is not recorded
    assert capsys.readouterr().out.endswith("(yours; --user NAME or --all-users for others'):\n0 run(s)\n"
                                            "9 run(s) of unknown submitter not shown: --all-users takes them\n")
    assert main(["status", "--failed", "--all-users"]) == 0
    out = capsys.readouterr().out
    assert out.count("failed torch/googlenet/mnist") == 7 and out.count("log: ") == 9
    assert all(f"crash: Segmentation fault {i}" in out for i in range(7)) and out.endswith("9 run(s)\n")
    assert main(["status", "--failed", "--class", "timeout,out_of_memory", "--sweep", "new", "--all-users"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Failed or lost runs of class timeout, out_of_memory (latest attempts), every user's runs:")
    assert "torch/vgg16/mnist" in out and "resnet50" not in out and out.endswith("1 run(s)\n")
    assert main(["status", "--class", "crash"]) == 1
    assert "--class picks what --failed lists: python -m orchestrator status --failed --class crash" in (
        capsys.readouterr().err)


def test_status_shows_how_long_running_jobs_have_left_of_their_limit(env, any_db, capsys):
    """A running job's time left: its limit from the config its sweep recorded, counted from its
    first run's start (job.json, which status's reconciliation reads), over every repeat it ran."""
    import json
    import time

    from orchestrator.sweep.cell import cell_id
    from result_factory import make_settings

    main(["collect"])
    now = time.time()
    factory = db.open_db(any_db)
    with factory.begin() as session:
        session.add(schema.Sweep(id="live", created_at=now, argv=[], overrides=[], n_cells=3))
        for model, limit, ran in (("resnet50", 12, [(8, 5), (4, None)]), ("vgg16", 10, [(15, None)]),
                                  ("alexnet", None, [(1, None)])):
            settings = make_settings(model=model)
            cid = cell_id(settings)
            if session.get(schema.Cell, cid) is None:
                session.add(schema.Cell(id=cid, settings=settings, created_at=now, **settings))
            hardware = {"time_min": limit, "time_floor": None, "time_source": "same cell (longest of 1 run(s))"}
            session.add(schema.SweepCell(sweep_id="live", cell_id=cid, config={"hardware": hardware, "cluster": {}}))
            session.flush()
            for repeat, (started, ended) in enumerate(ran):  # minutes ago
                run_dir = env / "runs" / "live" / cid / str(repeat)
                run_dir.mkdir(parents=True)
                (run_dir / "job.json").write_text(json.dumps({"started_at": now - 60 * started, "node": "node1"}))
                run = schema.Run(uid=f"live:{cid}:{repeat}:1", sweep_id="live", cell_id=cid, repeat=repeat,
                                 attempt=1, state="pending", executor="local", run_dir=str(run_dir))
                if ended is not None:
                    run.state, run.started_at, run.ended_at = "done", now - 60 * started, now - 60 * ended
                session.add(run)
    capsys.readouterr()
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    shown = out[out.index("Running jobs, time left of their limit (least first; the first 3):"):].splitlines()
    assert "torch/vgg16/mnist  sweep live  job (foreground): over its limit of 10 min by 5 min" in shown[1]
    assert "torch/resnet50/mnist  sweep live  job (foreground): 4 min left of 12 min (same cell" in shown[2]
    assert "torch/alexnet/mnist  sweep live  job (foreground): no time limit recorded" in shown[3]
    assert main(["status", "--sweep", "old"]) == 0
    assert "Running jobs" not in capsys.readouterr().out


def test_status_of_an_unknown_sweep_names_the_known_ones(env, any_db, capsys):
    main(["collect"])
    capsys.readouterr()
    assert main(["status", "--sweep", "nope"]) == 1
    err = capsys.readouterr().err
    assert "--sweep nope: no such sweep" in err and "new, old" in err


def test_results_csv_with_where_filters(env, any_db, capsys):
    main(["collect"])
    capsys.readouterr()
    assert main(["results", "--csv", "--where", "framework=torch", "--where", "model=lenet"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["sweep"], r["framework"], r["model"]) for r in rows] == [("new", "torch", "lenet"), ("old", "torch", "lenet")]
    assert list(rows[0]) == list(schema.RESULTS_COLUMNS)
    assert rows[0]["images_per_sec"] == "900.0" and rows[0]["images_per_sec_std"] == "3.25"
    assert rows[0]["gpu_mem_peak_mb"] == ""

    # a numeric column, alternatives with a comma, a state and a sweep
    assert main(["results", "--csv", "--sweep", "latest", "--where", "gpus=0",
                 "--where", "model=alexnet,vgg16", "--state", "done"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["sweep"], r["model"], r["state"]) for r in rows] == [("new", "alexnet", "done")]


def test_results_table_shows_rate_with_spread(env, any_db, capsys):
    main(["collect"])
    capsys.readouterr()
    assert main(["results", "--sweep", "new"]) == 0
    out = capsys.readouterr().out
    assert "3 runs of sweep new" in out
    assert "900.0 ± 3.2" in out
    assert "failed (out_of_memory)" in out


def test_results_say_an_imagenet_network_on_small_images_ran_at_224(tmp_path, db_url, monkeypatch, capsys):
    """An ImageNet network on CIFAR-10 keeps its cell; `results` says it ran at 224x224, a CIFAR network not."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setenv("ORCHESTRATOR_DB", db_url)
    write_result(tmp_path / "runs", make_result(sweep="s", model="alexnet", dataset="cifar10"))
    write_result(tmp_path / "runs", make_result(sweep="s", model="alexnet_r", dataset="cifar10"))
    assert main(["collect"]) == 0 and main(["results"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if "/cifar10" in line}
    assert "ran at 224x224" in rows["torch/alexnet/cifar10"] and "ran at" not in rows["torch/alexnet_r/cifar10"], rows


def _many_runs(tmp_path, monkeypatch, n, db_url):
    """A working directory whose database (db_url) holds `n` done runs of `n` cells (seeds), collected."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setenv("ORCHESTRATOR_DB", db_url)
    monkeypatch.delenv("ORCHESTRATOR_NOISY_CV", raising=False)
    for seed in range(n):
        write_result(tmp_path / "runs", make_result(sweep="s", seed=seed))
    assert main(["collect"]) == 0


def test_results_and_summary_show_the_first_rows_and_say_how_to_see_all(tmp_path, db_url, monkeypatch, capsys):
    from orchestrator.commands.results import LIMIT

    n = LIMIT + 12
    _many_runs(tmp_path, monkeypatch, n, db_url)
    capsys.readouterr()
    for summary in ([], ["--summary"]):
        assert main(["results", *summary]) == 0
        out = capsys.readouterr().out
        assert out.count("torch/lenet/mnist") == LIMIT
        assert f"{n} {'cells over their repeats' if summary else 'runs'}" in out and f"the first {LIMIT}" in out
        assert out.rstrip().endswith("12 more not shown: --limit N shows the first N, --all every one "
                                     "(--csv prints them all as CSV)")
        assert main(["results", *summary, "--limit", "5"]) == 0
        out = capsys.readouterr().out
        assert out.count("torch/lenet/mnist") == 5 and f"{n - 5} more not shown" in out
        assert main(["results", *summary, "--all"]) == 0
        out = capsys.readouterr().out
        assert out.count("torch/lenet/mnist") == n and "more not shown" not in out
        assert main(["results", *summary, "--csv"]) == 0  # CSV: every row, unless --limit
        assert len(list(csv.DictReader(io.StringIO(capsys.readouterr().out)))) == n
        assert main(["results", *summary, "--csv", "--limit", "3"]) == 0
        assert len(list(csv.DictReader(io.StringIO(capsys.readouterr().out)))) == 3
    assert main(["results", "--sweep", "s", "--limit", "5"]) == 0
    assert f"{n} runs of sweep s; the first 5" in capsys.readouterr().out
    assert main(["results", "--limit", "0"]) == 1
    assert "--limit 0: show at least one row, or every one with --all" in capsys.readouterr().err
    assert main(["results", "--limit", "3", "--all"]) == 2  # one or the other (argparse says so)


def test_results_csv_streams_its_rows(tmp_path, db_url, monkeypatch, capsys):
    """The CSV writer is handed the database's rows as they come, never a list of all of them:
    the summary's rows to csv, the runs' lines (store/csv_lines.py) a batch of 1,000 at a time."""
    from orchestrator.commands import results

    _many_runs(tmp_path, monkeypatch, 1005, db_url)
    capsys.readouterr()
    handed, batches = [], []
    write_csv, write_batch = results.write_csv, results._write_batch

    def spy(rows, columns):
        handed.append(rows)
        return write_csv(rows, columns)

    def lines_spy(lines):
        batches.append(len(lines))
        return write_batch(lines)

    monkeypatch.setattr(results, "write_csv", spy)
    monkeypatch.setattr(results, "_write_batch", lines_spy)
    assert main(["results", "--csv", "--summary"]) == 0
    assert len(handed) == 1 and not isinstance(handed[0], (list, tuple)) and iter(handed[0]) is handed[0]
    assert len(capsys.readouterr().out.splitlines()) == 1 + 1005
    assert main(["results", "--csv"]) == 0
    assert batches == [1000, 5]
    assert len(capsys.readouterr().out.splitlines()) == 1 + 1005


def test_results_bad_filters_say_what_to_do(env, any_db, capsys):
    main(["collect"])
    capsys.readouterr()
    assert main(["results", "--where", "frmework=torch"]) == 1
    assert "no column 'frmework'; columns are run, sweep" in capsys.readouterr().err
    assert main(["results", "--where", "gpus=two"]) == 1
    assert "gpus is a number" in capsys.readouterr().err
    assert main(["results", "--state", "finished"]) == 1
    assert "use one of pending" in capsys.readouterr().err
    assert main(["results", "--where", "model=resnet50"]) == 1
    assert "no runs match" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["status"], ["results"], ["results", "--csv"]])
def test_missing_database_is_a_message_not_a_traceback(env, capsys, command):
    assert main(command) == 1
    captured = capsys.readouterr()
    assert "no results.db here; run a sweep first: python -m orchestrator -m" in captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    assert not (env / "results.db").exists(), "a read must not leave an empty database behind"


def test_empty_database_and_missing_runs_dir(env, capsys):
    db.open_db("sqlite:///results.db")  # tables, no runs
    assert main(["status"]) == 1
    assert "holds no runs yet; run a sweep first" in capsys.readouterr().err
    assert main(["--runs", "elsewhere", "collect"]) == 1
    assert "no runs directory elsewhere here" in capsys.readouterr().err


def test_results_summary_shows_median_spread_and_noisy_cells(tmp_path, db_url, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setenv("ORCHESTRATOR_DB", db_url)
    monkeypatch.delenv("ORCHESTRATOR_NOISY_CV", raising=False)
    runs = tmp_path / "runs"
    for repeat, ips in enumerate((1000.0, 1040.0, 960.0)):  # CV 4%
        write_result(runs, make_result(sweep="s", repeat=repeat, metrics={"images_per_sec": ips}))
    for repeat, ips in enumerate((100.0, 150.0)):  # CV 28%
        write_result(runs, make_result(sweep="s", repeat=repeat, model="alexnet", metrics={"images_per_sec": ips}))
    assert main(["collect"]) == 0
    capsys.readouterr()
    assert main(["results", "--summary"]) == 0
    out = capsys.readouterr().out
    assert "2 cells over their repeats (noisy: CV > 5%)" in out
    lenet = next(line for line in out.splitlines() if "torch/lenet" in line)
    assert "1,000.0" in lenet and " 4.0 " in lenet and "960.0" in lenet and "NOISY" not in lenet
    alexnet = next(line for line in out.splitlines() if "torch/alexnet" in line)
    assert "125.0" in alexnet and "NOISY" in alexnet
    assert "1 noisy cell(s)" in out

    assert main(["results", "--summary", "--noisy-cv", "3", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(rows[0]) == list(schema.SUMMARY_COLUMNS)
    assert [(r["model"], r["n"], r["noisy"]) for r in rows] == [("alexnet", "2", "1"), ("lenet", "3", "1")]
    monkeypatch.setenv("ORCHESTRATOR_NOISY_CV", "50")
    assert main(["results", "--summary", "--csv", "--where", "model=alexnet"]) == 0
    assert list(csv.DictReader(io.StringIO(capsys.readouterr().out)))[0]["noisy"] == "0"


def test_results_summary_filters_by_any_results_column_in_sql(tmp_path, db_url, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCHESTRATOR_DB", db_url)
    runs = tmp_path / "runs"
    for repeat, ips in enumerate((1000.0, 1040.0, 960.0)):
        write_result(runs, make_result(sweep="s", repeat=repeat, metrics={"images_per_sec": ips}))
    write_result(runs, make_result(sweep="t", model="alexnet", metrics={"images_per_sec": 100.0}))
    assert main(["collect"]) == 0
    capsys.readouterr()
    # a run-level column (the sweep) and a metric column pick runs before the cells are summarised
    assert main(["results", "--summary", "--csv", "--sweep", "s", "--where", "images_per_sec=1000,1040"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["model"], r["n"], r["images_per_sec_median"]) for r in rows] == [("lenet", "2", "1020.0")]
    assert main(["results", "--summary", "--where", "model=vgg16"]) == 1
    assert "no latest attempt with a throughput matches these filters" in capsys.readouterr().err


OLD_DB = Path(__file__).parent / "data" / "results-5f8e814.db"  # made by the release before migrations


def test_a_read_on_a_database_of_the_last_release_upgrades_it_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.delenv("ORCHESTRATOR_DB", raising=False)
    shutil.copy(OLD_DB, tmp_path / "results.db")
    done = subprocess.run([sys.executable, "-m", "orchestrator", "results", "--summary", "--csv"],
                          capture_output=True, text=True, check=True)
    assert done.stderr == (f"upgraded results.db in place from schema (none recorded: made before migrations) "
                           f"to {db.SCHEMA_VERSION}\n")
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [(r["model"], r["n"]) for r in rows] == [("alexnet", "2"), ("lenet", "3"), ("resnet50", "1")]
    # and the new collector lands runs beside the old ones
    write_result(tmp_path / "runs", make_result(sweep="new", model="googlenet"))
    assert main(["collect"]) == 0
    # (its never-collected Slurm run is asked about first; Slurm does not answer here, so it stays open)
    assert capsys.readouterr().out.strip().splitlines()[-1] == "1 added, 0 already in the DB, 0 broken"
    assert main(["results", "--csv"]) == 0
    assert len(list(csv.DictReader(io.StringIO(capsys.readouterr().out)))) == 9


def test_a_database_from_a_newer_orchestrator_is_a_message(env, capsys):
    main(["collect"])
    con = sqlite3.connect(env / "results.db")
    con.execute("UPDATE alembic_version SET version_num = 'ffff'")
    con.commit()
    con.close()
    capsys.readouterr()
    assert main(["results", "--where", "images_per_sec=900"]) == 1  # a metric's filter reads the view
    err = capsys.readouterr().err
    assert "schema revision ffff, which this orchestrator does not know" in err and "Traceback" not in err


HEAVY = ("hydra", "omegaconf", "numpy", "submitit", "alembic", "sqlalchemy", "rich")


def _imported_by(argv, cwd=None):
    """The heavy modules `orchestrator <argv>` imports (through __main__'s dispatch)."""
    code = ("import sys; from orchestrator.__main__ import main; sys.argv = ['orchestrator', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=cwd)
    return done.stderr.strip().splitlines()[-1]


def test_the_cli_imports_only_what_a_command_needs(env, any_db):
    """`--help` and a usage error import no database code, no Hydra and no rich; a command on the
    database imports SQLAlchemy and rich, never Hydra, numpy, submitit, nor Alembic (only when a
    database needs upgrading); `status` on an up-to-date SQLite file or PostgreSQL database reads
    it with its driver alone (sqlite3, psycopg), and on any other goes through db.open_db
    (SQLAlchemy) as every command does."""
    for argv in (["--help"], ["-h"], ["status", "--help"], ["results", "--help"], ["--db", "x", "collect", "-h"],
                 ["results", "--nope"]):
        assert _imported_by(argv) == "[]", argv
    assert main(["collect"]) == 0  # (an up-to-date database, so no upgrade)
    assert _imported_by(["status"], cwd=env) == "['rich']"
    for argv in (["results"], ["results", "--summary", "--csv"]):
        assert _imported_by(argv, cwd=env) == "['rich', 'sqlalchemy']", argv
    execute(any_db, "UPDATE alembic_version SET version_num = 'ffff'")  # a revision this release does not know
    assert "sqlalchemy" in _imported_by(["status"], cwd=env)


def test_a_launch_imports_no_numpy(tmp_path):
    """A launch checks each cell's data shape against trainers.common.inputs' tables, which
    import numpy only where a trainer converts a batch: numpy at the top of that module was
    ~0.1 s of a 10,000-cell submission's CPU (issue 36, item 6)."""
    imported = _imported_by(["-m", "dry_run=true", "model=lenet,fcn_s", "dataset=synthetic"], cwd=tmp_path)
    assert "hydra" in imported and "numpy" not in imported, imported


def test_the_launch_imports_only_what_a_submission_uses():
    """The launch's front door imports no progress bar, no table and no command module: wait=true
    follows a sweep with them, a dry run draws its table, a submission prints one report
    (launcher_output); nor SQLAlchemy's PostgreSQL dialect, which the schema's partial indexes
    name only as a PostgreSQL database is made (schema.PARTIAL; issue 36, item 6)."""
    later = ("rich.progress", "rich.table", "orchestrator.commands.collect", "orchestrator.commands.results",
             "orchestrator.commands.status", "sqlalchemy.dialects.postgresql")
    code = f"import sys, orchestrator.front_door; print([m for m in {later!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_status_on_postgresql_reads_where_sqlalchemy_would_and_makes_nothing(postgres_server, capsys):
    """sql_adapters.postgres_params (status's psycopg path) gives psycopg the keywords SQLAlchemy's
    psycopg dialect gives it, or nothing where only SQLAlchemy reads the URL; a database that is not
    there is refused, not made, and its URL printed without its password."""
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
    from sqlalchemy.engine import make_url

    from orchestrator.store.sql_adapters import postgres_params

    dialect = PGDialect_psycopg()
    blank = [f"postgresql+psycopg://u:pw@h:55432/A?{option}=&sslmode=require"
             for option in ("dbname", "port", "host", "user", "password")]  # SQLAlchemy drops blank options
    for url in ("postgresql+psycopg://al%40ice:p%2Fw:x@db.example:5433/res%20ults?sslmode=require&application_name=a",
                "postgresql+psycopg://u@[::1]:5432/db", "postgresql+psycopg:///db?host=/tmp", postgres_server,
                "postgresql+psycopg://u:@h/db", "postgresql+psycopg://u@h:05433/db?port=5434&dbname=B", *blank):
        expected = {k: str(v) for k, v in dialect.create_connect_args(make_url(url))[1].items()}
        assert postgres_params(url) == expected, url
    for url in ("postgresql://u@h/db", "postgresql+psycopg2://u@h/db", "sqlite:///r.db",
                "postgresql+psycopg://u@h/db?host=a&host=b", "postgresql+psycopg://u@h/db?host=a,b",
                "postgresql+psycopg://u@h/db?host=a:5433", "postgresql+psycopg://u@h/db?port=5432,5433",
                # escapes SQLAlchemy leaves in the host and the port (where they are no port at all)
                "postgresql+psycopg://u@h%2Dx/db", "postgresql+psycopg://u@%2Ftmp/db", "postgresql+psycopg://u@h:54%332/db",
                "postgresql+psycopg://u@h:5x/db",
                # a plugin create_engine loads (libpq would refuse the option)
                "postgresql+psycopg://u@h/db?plugin=x"):
        assert postgres_params(url) is None, url
    missing = make_url(postgres_server).set(database=f"t_missing_{secrets.token_hex(4)}")
    assert main(["--db", missing.render_as_string(hide_password=False), "status"]) == 1
    err = capsys.readouterr().err
    assert "does not exist" in err and missing.database in err and "Traceback" not in err
    if missing.password:
        assert missing.password not in err and "***@" in err
    assert query(postgres_server, "SELECT count(*) FROM pg_database WHERE datname = :n", {"n": missing.database}) == [(0,)]


def test_a_database_url_is_printed_as_sqlalchemy_prints_it_without_its_password():
    """commands.common.shown masks the password SQLAlchemy reads (the rest as given: SQLAlchemy reads
    the same user, host, port, database and options in it), where the old pattern could not: a user
    name with `@`, a password with spaces."""
    from sqlalchemy.engine import make_url

    from orchestrator.commands.common import shown

    for url in ("postgresql+psycopg://al@ice:S3cretPW@db.example:5433/res", "postgresql+psycopg://u:S3cret PW@h/db",
                "postgresql+psycopg://u:S3cretPW@h/db?sslmode=require", "postgresql://u@h/db", "sqlite:///r.db"):
        given = make_url(url)
        assert make_url(shown(url)) == given.set(password="***" if given.password is not None else None), url
        assert "S3cret" not in shown(url), url


def test_status_on_a_postgresql_database_without_runs_hides_a_password_with_spaces(postgres_server, capsys):
    """The message of `status` on a database that holds no runs (read through psycopg alone) names its
    URL with the password masked: PostgresRows.url is the URL as shown, not as given."""
    from db_urls import create_database, drop_database

    url = create_database(postgres_server)
    try:
        db.open_db(url).kw["bind"].dispose()  # the tables, no runs
        scheme, rest = url.split("://", 1)
        user, place = rest.rsplit("@", 1) if "@" in rest else ("", rest)
        given = f"{scheme}://{user.split(':')[0]}:S3cret PW@{place}"  # the test server trusts its loopback
        assert main(["--db", given, "status"]) == 1
        err = capsys.readouterr().err
        assert "holds no runs yet" in err and ":***@" in err and "S3cret" not in err, err
    finally:
        drop_database(postgres_server, url)


def test_a_password_in_a_database_urls_query_is_never_printed():
    """libpq takes `?password=` as it takes the user's part, and SQLAlchemy's rendering shows it: the
    review found `status` printing it in its one line."""
    from orchestrator.commands.common import shown

    for url, expected in (("postgresql+psycopg://u:S3cret@h/db?password=S3cretToo", "postgresql+psycopg://u:***@h/db?password=***"),
                          ("postgresql+psycopg://u@h/db?sslmode=require&password=S3cret&connect_timeout=3",
                           "postgresql+psycopg://u@h/db?sslmode=require&password=***&connect_timeout=3"),
                          ("postgresql+psycopg://u@h/db?passwordless=1", "postgresql+psycopg://u@h/db?passwordless=1"),
                          # an unescaped @ in the password: SQLAlchemy takes its tail for the host's start
                          ("postgresql+psycopg://u:S3c@ret@h:5432/db", "postgresql+psycopg://u:***@h:5432/db")):
        assert shown(url) == expected, url


def test_status_on_a_postgresql_database_without_tables_hides_its_password(postgres_server, capsys):
    """A database without the orchestrator's tables goes on to db.open_db, whose one line named the URL
    as given, password and all (the review reproduced it with `status --db ...`)."""
    from db_urls import create_database, drop_database

    url = create_database(postgres_server)  # empty: no tables
    try:
        scheme, rest = url.split("://", 1)
        user, place = rest.rsplit("@", 1) if "@" in rest else ("", rest)
        given = f"{scheme}://{user.split(':')[0]}:S3cret PW@{place}?password=S3cretToo"  # the server trusts its loopback
        assert main(["--db", given, "status"]) == 1
        err = capsys.readouterr().err
        assert "holds no orchestrator tables" in err and ":***@" in err and "S3cret" not in err, err
    finally:
        drop_database(postgres_server, url)


def test_status_tries_a_postgresql_server_that_refuses_once(monkeypatch, capsys):
    """A connection psycopg cannot make (nothing listens on port 1) is said once, in one line with the
    password masked: never tried again through SQLAlchemy (db.open_db), which would log in twice and
    wait twice as long on a silent server."""
    import psycopg

    tries = []
    for module, name in ((psycopg, "connect"), (db, "open_db")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name, **k: tries.append(_name) or _real(*a, **k))
    assert main(["--db", "postgresql+psycopg://u:S3cret PW@127.0.0.1:1/db", "status"]) == 1
    err = capsys.readouterr().err
    assert tries == ["connect"], tries
    assert len(err.strip().splitlines()) == 1 and "S3cret" not in err and "u:***@127.0.0.1:1" in err, err
    assert "Traceback" not in err


def test_the_sqlite_file_status_reads_is_the_one_sqlalchemy_opens(tmp_path):
    """rows.sqlite_file (status's sqlite3 path) names the file db.sqlite_path names, or none where
    only SQLAlchemy can read the URL (options, escapes, other databases), never another file."""
    from orchestrator.store.sql_adapters import sqlite_file

    for url in ("sqlite:///results.db", f"sqlite:///{tmp_path}/r.db", "sqlite:///sub/dir/r.db",
                "sqlite:///r.db?timeout=5", "sqlite:///r%20s.db", "sqlite://", "sqlite:///:memory:",
                "sqlite+pysqlite:///r.db", "postgresql://u@localhost/db", "sqlite:///a#b.db"):
        mine = sqlite_file(url)
        assert mine is None or Path(mine) == db.sqlite_path(url), url
    assert sqlite_file("sqlite:///results.db") == "results.db"
    assert sqlite_file(f"sqlite:///{tmp_path}/r.db") == f"{tmp_path}/r.db"


def test_main_sends_subcommands_and_help_to_the_cli_and_the_rest_to_hydra():
    from orchestrator.__main__ import is_cli

    for argv in (["status"], ["--help"], ["-h"], ["--db", "sqlite:///x.db", "results"], ["--db=x", "--runs", "r",
                                                                                              "collect"]):
        assert is_cli(argv), argv
    for argv in ([], ["-m", "framework=torch"], ["framework=torch"], ["--cfg", "job"], ["--db", "x"],
                 ["--hydra-help"], ["-m", "status=1"]):
        assert not is_cli(argv), argv


def test_the_help_text_names_the_databases_noisy_threshold():
    from orchestrator.commands.common import NOISY_CV_PERCENT

    assert NOISY_CV_PERCENT == schema.NOISY_CV * 100


SUBCOMMANDS = [["status"], ["collect"], ["results"], ["results", "--summary"], ["rerun", "--failed"],
               ["rerun", "--failed", "--dry-run"]]


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_a_file_that_is_not_a_database_is_a_message_from_every_subcommand(env, capsys, command):
    (env / "results.db").write_bytes(b"not a database\n")
    assert main(command) == 1
    captured = capsys.readouterr()
    assert ("cannot use database URL 'sqlite:///results.db': the file is not a SQLite database (file is not a "
            "database); move it away") in captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    assert (env / "results.db").read_bytes() == b"not a database\n"


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_an_unreachable_database_server_is_a_message_from_every_subcommand(env, capsys, command):
    """Loopback, port 1: nothing listens; where the driver is not installed that is the message."""
    assert main(["--db", "postgresql://127.0.0.1:1/x", *command]) == 1
    err = capsys.readouterr().err
    assert "cannot use database URL 'postgresql://127.0.0.1:1/x': " in err and "Traceback" not in err
    assert ("its driver is not installed" in err or "the database server does not answer" in err), err
    assert "point ORCHESTRATOR_DB (paths.db=, --db) at sqlite:///results.db" in err
    assert not (env / "results.db").exists()


def test_a_database_error_of_any_driver_is_said_in_one_line(env, any_db, capsys):
    """An error the database raises while a command reads (here the kept metrics' table, dropped) is one line naming the database, whichever driver raised it (sqlite3 or psycopg)."""
    from db_urls import execute

    assert main(["collect"]) == 0
    execute(any_db, "DROP TABLE kept_metrics")
    capsys.readouterr()
    assert main(["results", "--where", "images_per_sec=900"]) == 1  # a metric's filter reads the kept metrics
    err = capsys.readouterr().err.strip()
    assert err.startswith("database error (") and "kept_metrics" in err and len(err.splitlines()) == 1, err
