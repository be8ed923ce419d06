"""One open per command: a `wait=true` launch opens its results database once and hands the
handle on (submission, following the jobs, collect, results, status), instead of opening it at
each step (issue 36 item 5). Counted in a real launch through submitit's local executor."""
import json
import subprocess
import sys

import pytest

from helpers import REPO, rows, user_dir

#: Counts, in the launching process, every opening of the database: db.open_db (SQLAlchemy) and
#: sql_adapters.connect (sqlite3 or psycopg alone, `status`'s fast path), before any module binds either.
COUNTING = """
import atexit, json, runpy, sys
from orchestrator.store import db, sql_adapters
opened = []
def counted(f):
    def wrapped(*args, **kwargs):
        opened.append(f.__name__)
        return f(*args, **kwargs)
    return wrapped
db.open_db, sql_adapters.connect = counted(db.open_db), counted(sql_adapters.connect)
counts = sys.argv[1]
atexit.register(lambda: open(counts, "w").write(json.dumps(opened)))
sys.argv = ["orchestrator"] + sys.argv[2:]
runpy.run_module("orchestrator", run_name="__main__")
"""
#: A cell whose job fails at once without building anything: its environment has no recipe.
CELL = ["framework=numpy", "model=lenet", "iterations=3", "warmup=1", "+framework.env=norecipe"]


def launched(tmp_path, workdir, args):
    """`python -m orchestrator ARGS` in the user's directory, counting its openings of the database:
    the finished process and the openings in order."""
    cwd, env = workdir
    counts = tmp_path / "opened.json"
    done = subprocess.run([sys.executable, "-c", COUNTING, str(counts), *args],
                          cwd=str(cwd), env=dict(env, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done, json.loads(counts.read_text())


@pytest.mark.parametrize("args", [["-m", *CELL, "wait=true"], CELL], ids=["wait=true", "foreground"])
def test_a_launch_that_waits_for_its_runs_opens_the_database_once(tmp_path, args):
    workdir = user_dir(tmp_path)
    workdir[1]["ORCHESTRATOR_CACHE"] = str(tmp_path / "cache")  # no environment to find or build
    done, opened = launched(tmp_path, workdir, args)
    # it went the whole way: submitted, followed, collected, and `status` printed the failure
    assert rows(workdir, "select state from runs") == [("failed",)], done.stdout
    assert "1 cells submitted" in done.stdout and "failed" in done.stdout.split("submitted")[-1]
    assert opened == ["open_db"], done.stdout


def test_a_dry_run_opens_the_database_once_to_check_it_and_learn_limits(tmp_path):
    workdir = user_dir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert subprocess.run([sys.executable, "-m", "orchestrator", "collect"], cwd=str(tmp_path), env=workdir[1],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE).returncode == 0  # the database made
    done, opened = launched(tmp_path, workdir, ["-m", *CELL, "hardware.time_min=auto", "dry_run=true"])
    assert "1 cells (dry run: nothing submitted)" in done.stdout, done.stdout
    assert opened == ["open_db"], done.stdout


def test_status_opens_the_database_once_through_its_driver(tmp_path, db_url):
    """`status` on an up-to-date database, a SQLite file or PostgreSQL's, opens it once, with its
    driver alone (sql_adapters.connect), never a second time through SQLAlchemy."""
    from result_factory import make_result, write_result

    cwd, env = user_dir(tmp_path)
    env["ORCHESTRATOR_DB"] = db_url
    write_result(tmp_path / "runs", make_result(sweep="s", model="lenet"))
    write_result(tmp_path / "runs", make_result(sweep="s", model="alexnet", state="failed"))
    assert subprocess.run([sys.executable, "-m", "orchestrator", "collect"], cwd=str(cwd), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE).returncode == 0  # the database made
    done, opened = launched(tmp_path, (cwd, env), ["status"])
    assert "s " in done.stdout and "failed" in done.stdout, done.stdout
    assert opened == ["connect"], done.stdout
