"""No module writes into a config it did not make (issue 35, 1): a dry-run sweep through the real
command line with every composition's resolved config deep-frozen (tests/frozen_cli.py), each
cell learning its own limit from one earlier run in a real SQLite results database."""
import subprocess
import sys

from helpers import REPO
from test_time_limits_sweep import _expanded, _one_earlier_run


def test_a_dry_run_sweep_writes_nothing_into_its_compositions_config(tmp_path):
    (cell,) = _expanded([["hardware=cpu12", "batch_size=64", "iterations=50"]])
    url = f"sqlite:///{tmp_path}/results.db"
    _one_earlier_run(url, cell, 30.0, 0.2)
    import os

    env = dict(os.environ, ORCHESTRATOR_DB=url, ORCHESTRATOR_RUNS=str(tmp_path / "runs"), COLUMNS="300",
               PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, str(REPO / "tests" / "frozen_cli.py"), "-m", "hardware=cpu12",
                           "batch_size=64,4096", "threads=12,1", "iterations=50,5000", "dry_run=true",
                           "time_limits.build_min=0"], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    assert "WRITE INTO SHARED" not in done.stdout + done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("similar cells") == 7 and done.stdout.count("same cell") == 1, done.stdout
