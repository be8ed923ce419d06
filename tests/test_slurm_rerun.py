"""`rerun --failed` on the real four-node Slurm cluster of slurm/ (issue 35): a line planted in a
recorded config never reaches a job's script, the files that carry the database URL are 0600,
and what could not be placed is not offered again unchanged.

The cells here fail at once on their node (their environment has no recipe: nothing is built
or trained), which is all a rerun needs of them.
"""
import json
import re
import sqlite3
import stat
import subprocess
import time
from pathlib import Path

import pytest

from helpers import SMALL, orchestrator, rows, wait_until_final

pytestmark = pytest.mark.slow

#: A cell whose job fails at once: its environment names no recipe.
FAILING = [*SMALL, "framework=numpy", "model=lenet", "+framework.env=norecipe"]


def scripts(workdir):
    """Every sbatch script the sweeps of this directory submitted, by path."""
    return {p: p.read_text() for p in Path(workdir[0], "runs").glob("*/.submitit/*submission.sh")}


def test_a_setup_line_planted_in_the_database_never_runs_in_a_rerun(slurm_workdir):
    """Issue 35's reproduction: after a sweep, `cluster.setup: ["touch pwned"]` written into its
    recorded config with SQL and the run marked failed; `rerun --failed --class crash` resubmits
    it with the caller's own setup lines, and the planted one is in no script and never runs."""
    launched = orchestrator(["-m", *FAILING], slurm_workdir)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    wait_until_final(slurm_workdir)
    before = set(scripts(slurm_workdir))
    with sqlite3.connect(str(slurm_workdir[0] / "results.db")) as con:  # what anyone who can write the database can do
        con.execute("""update sweep_cells set config = json_set(config, '$.cluster.setup', json('["touch pwned"]'),
                       '$.cluster.python', 'touch pwned-python; python3')""")
        con.execute("update runs set state = 'failed', error_class = 'crash'")
    again = orchestrator(["rerun", "--failed", "--class", "crash", "cluster.setup=[echo caller-setup]", "+framework.env=norecipe"],
                         slurm_workdir)
    assert again.returncode == 0, again.stdout + again.stderr
    wait_until_final(slurm_workdir)

    new = {p: text for p, text in scripts(slurm_workdir).items() if p not in before}
    assert len(new) == 1, (list(new), again.stdout)  # the rerun's array
    (script,) = new.values()
    assert "touch pwned" not in script and "echo caller-setup" in script, script
    assert not list(slurm_workdir[0].rglob("pwned*")) and not list(Path.home().glob("pwned*"))
    (config,) = rows(slurm_workdir, "select config from sweep_cells")[0]
    # the record keeps its own site sections (as planted: never run), never the caller's (which may hold a token)
    assert json.loads(config)["cluster"]["setup"] == ["touch pwned"] and "caller-setup" not in config, config
    assert rows(slurm_workdir, "select count(*) from runs where attempt = 2 and job_id is not null") == [(1,)]


def test_every_file_a_sweep_writes_with_the_database_url_is_0600(slurm_workdir):
    """The cells' array bundle, retry.timeout's follow-up job's bundle and the pickles each task
    takes out on its node, each run's config.yaml."""
    launched = orchestrator(["-m", *FAILING, "seed=1,2", "retry.timeout=1"], slurm_workdir)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert "retry.timeout=1: job" in launched.stdout, launched.stdout  # the follow-up was submitted
    wait_until_final(slurm_workdir)
    (sweep,) = rows(slurm_workdir, "select id from sweeps")[0]
    deadline = time.time() + 900  # the follow-up runs once the cells' jobs have ended: wait for its end
    while time.time() < deadline and subprocess.run(
            ["squeue", "-h", "-n", f"orch-{sweep}-retry", "-o", "%i"], env=slurm_workdir[1],
            capture_output=True, text=True).stdout.strip():
        time.sleep(2)
    files = [p for p in Path(slurm_workdir[0], "runs").rglob("*") if p.is_file()]
    holding = [p for p in files if re.search(rb"sqlite:///", p.read_bytes())]
    names = {p.name for p in holding}
    assert any(n.endswith(".tasks") and "-retry" in n for n in names), names  # the follow-up's bundle
    assert sum(n.endswith("_submitted.pkl") for n in names) == 3 and "config.yaml" in names, names  # 2 cells, 1 follow-up
    assert {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in holding} == {str(p): "0o600" for p in holding}


def test_unplaceable_runs_are_not_offered_again_unchanged(slurm_workdir):
    """Issue 35, tried verbatim: `hardware=p100 gpus=1,2` asks for more than any node holds, so
    every run is refused `unplaceable`; `rerun --failed --dry-run` no longer offers them."""
    launched = orchestrator(["-m", "cluster=slurm", "hardware=p100", "gpus=1,2"], slurm_workdir)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    (n,) = rows(slurm_workdir, "select count(*) from runs where error_class = 'unplaceable'")[0]
    assert n >= 2, launched.stdout
    dry = orchestrator(["rerun", "--failed", "--dry-run"], slurm_workdir)
    assert "nothing to rerun" in dry.stdout and f"{n} repeat(s) of class unplaceable unchanged" in dry.stdout, dry.stdout
    asked = orchestrator(["rerun", "--failed", "--dry-run", "--class", "unplaceable"], slurm_workdir)
    assert f"would resubmit {n} repeat" in asked.stdout, asked.stdout
