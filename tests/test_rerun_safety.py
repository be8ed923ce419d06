"""`rerun --failed` on a shared database (issue 35): it takes the caller's own runs unless told
otherwise, never runs what the database holds as a command or a path (a rerun's site options
are the caller's composition of conf/), leaves `unplaceable` runs out unless asked or asking
for less, and the files that hold the database URL are 0600.

The recorded configs here are real compositions of conf/ (Hydra's compose, as a sweep makes
them), written into a real SQLite database; the reruns go through the CLI and submitit's real
local executor. The test cluster's version of the attack is in test_slurm.py.
"""
import getpass
import json
import os
import re
import stat
import time
from pathlib import Path

import pytest

from orchestrator.store import db, schema
from orchestrator import private_files, runstate
from orchestrator.launch import rerun
from orchestrator.backends.slurm_task import take_task_pickle, write_bundle
from orchestrator.launch.rerun_config import Site
from trainers.common import failure_classes as fc

from helpers import composed, orchestrator, record_failed, rows, user_dir, wait_until_final

ME = getpass.getuser()
#: What an attacker writes into a recorded config: shell lines, an interpreter, a runtime and paths.
PLANTED = {"cluster": {"setup": ["touch pwned"], "python": "touch pwned-python"},
           "paths": {"runs": "elsewhere"},
           "apptainer": {"binary": "touch pwned-apptainer", "images": "/tmp/pwned-images"}}
#: A cell that fails at once in its job without building anything: its environment has no recipe.
CELL = ["framework=numpy", "model=lenet", "iterations=3", "warmup=1", "+framework.env=norecipe"]
#: The caller's own naming of that environment: a rerun builds only what the caller's configuration names.
ENV = "+framework.env=norecipe"


@pytest.fixture(autouse=True)
def keep_umask():
    """Tests that set a shared account's umask give the process its own back."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture
def shared(tmp_path):
    """A user's directory whose database holds two failed cells: one of the caller's, one of alice's."""
    workdir = user_dir(tmp_path)
    workdir[1]["ORCHESTRATOR_CACHE"] = str(tmp_path / "cache")  # no environment to find or build
    url = workdir[1]["ORCHESTRATOR_DB"]
    ids = record_failed(url, [(CELL, fc.CRASH, ME), (CELL + ["seed=7"], fc.CRASH, "alice")], PLANTED)
    return workdir, url, ids


def test_a_pick_runs_on_the_callers_site_never_the_recorded_one(shared):
    workdir, url, (mine, _) = shared
    site = Site(["+cluster.setup=[echo mine]", ENV], url, str(workdir[0] / "runs"))
    with db.open_db(url, create=False)() as s:
        recorded = json.loads(json.dumps(s.get(schema.SweepCell, ("s1", mine)).config))
        picks, problems = rerun.pick(s, site, user=ME)
        assert [p.last.cell_id for p in picks] == [mine], problems
        config = picks[0].cell.config
        assert config["cluster"]["setup"] == ["echo mine"] and config["cluster"].get("python") is None
        assert config["paths"]["runs"] == str(workdir[0] / "runs") and config["paths"]["db"] == url
        assert config["runtime"] == "venv" and config["apptainer"]["binary"] == "apptainer"
        assert config["dataset"]["dir"] is None  # synthetic data: no folder (another recorded one: test_rerun_review)
        assert "pwned" not in json.dumps(config)
        assert s.get(schema.SweepCell, ("s1", mine)).config == recorded  # the record itself is not changed
        assert problems == ["1 repeat(s) of other users (alice: 1): not yours; --user NAME or --all-users "
                            "takes them (on your own site configuration)"], problems


def test_the_attack_of_issue_35_runs_nothing_recorded(shared):
    """`cluster.setup: ["touch pwned"]` and friends written into a recorded config, the run failed:
    `rerun --failed` resubmits it on the caller's configuration; nothing planted is run or written."""
    workdir, url, (mine, _) = shared
    again = orchestrator(["rerun", "--failed", ENV, "+cluster.setup=[echo mine]"], workdir)
    assert again.returncode == 0, again.stdout + again.stderr
    wait_until_final(workdir, timeout=120)
    written = [p for p in workdir[0].rglob("*") if p.is_file() and p.name != "results.db"]
    assert written and not [p for p in written if b"pwned" in p.read_bytes()], written
    # the local executor runs no setup line and no sbatch script: what could run them is the config
    # the job received (its pickle), which holds the caller's setup line, not the planted one
    pickles = [p for p in written if p.name.endswith("_submitted.pkl")]
    assert pickles and all(b"echo mine" in p.read_bytes() for p in pickles), pickles
    assert not (workdir[0] / "elsewhere").exists() and not Path("/tmp/pwned-images").exists()
    (config,) = rows(workdir, f"select config from sweep_cells where cell_id = '{mine}'")[0]
    recorded = json.loads(config)  # the record's own site sections, as planted (never run), never the caller's
    assert "echo mine" not in config and recorded["cluster"]["setup"] == ["touch pwned"], config
    assert recorded["paths"]["runs"] != str(workdir[0] / "runs") and recorded["hardware"], config
    (run_dir, state) = rows(workdir, "select run_dir, state from runs where attempt = 2")[0]
    assert run_dir == str(workdir[0] / "runs" / "s1" / mine / "0.2") and state == runstate.FAILED
    assert f"rerunning runs of user {ME} (yours" in again.stdout and "resubmitting 1 repeat" in again.stdout


def test_every_file_that_holds_the_database_url_is_the_users_alone(shared):
    workdir, url, _ = shared
    os.umask(0o022)  # a shared account's usual mask: what the files would have had
    assert orchestrator(["rerun", "--failed", ENV], workdir).returncode == 0
    wait_until_final(workdir, timeout=120)
    holding = [p for p in workdir[0].rglob("*") if p.is_file() and p.name != "results.db"
               and re.search(rb"(sqlite|postgresql)[+a-z0-9]*://", p.read_bytes())]
    assert any(p.suffix == ".pkl" for p in holding), holding  # the job's pickle holds its config
    assert {p: oct(stat.S_IMODE(p.stat().st_mode)) for p in holding} == {p: "0o600" for p in holding}


def test_an_arrays_bundle_and_each_tasks_pickle_are_0600(tmp_path):
    os.umask(0o022)
    bundle = tmp_path / "orch-x.tasks"
    write_bundle(bundle, [b"postgresql://alice:secret@db/bench", b"two"])
    target = tmp_path / "1_0_submitted.pkl"
    assert take_task_pickle(bundle, 0, target) and target.read_bytes() == b"postgresql://alice:secret@db/bench"
    assert oct(stat.S_IMODE(bundle.stat().st_mode)) == oct(stat.S_IMODE(target.stat().st_mode)) == "0o600"
    private_files.write_text(tmp_path / "config.yaml", "a: 1\n")
    assert oct(stat.S_IMODE((tmp_path / "config.yaml").stat().st_mode)) == "0o600"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1_0_submitted.pkl", "config.yaml", "orch-x.tasks"]


def test_reruns_and_failure_lists_take_the_callers_own_runs_unless_widened(shared):
    workdir, _, (mine, alices) = shared
    dry = orchestrator(["rerun", "--failed", "--dry-run", ENV], workdir)
    assert dry.returncode == 0, dry.stderr
    assert "would resubmit 1 repeat" in dry.stdout and mine in dry.stdout and alices not in dry.stdout
    assert "1 repeat(s) of other users (alice: 1)" in dry.stdout, dry.stdout
    alice = orchestrator(["rerun", "--failed", "--dry-run", "--user", "alice", ENV], workdir)
    assert "would rerun runs of user alice\n" in alice.stdout and alices in alice.stdout and mine not in alice.stdout
    every = orchestrator(["rerun", "--failed", "--dry-run", "--all-users", ENV], workdir)
    assert "would rerun every user's runs" in every.stdout and "would resubmit 2 repeat" in every.stdout

    listed = orchestrator(["status", "--failed"], workdir)
    assert listed.returncode == 0, listed.stderr
    assert f"runs of user {ME} (yours" in listed.stdout and "1 run(s)" in listed.stdout, listed.stdout
    assert f"s1:{mine}" in listed.stdout and f"s1:{alices}" not in listed.stdout
    assert "2 run(s)" in orchestrator(["status", "--failed", "--all-users"], workdir).stdout
    assert f"s1:{alices}" in orchestrator(["status", "--failed", "--user", "alice"], workdir).stdout
    assert rows(workdir, "select count(*) from runs") == [(2,)]  # dry runs and lists submit nothing


def test_a_rerun_takes_only_site_overrides_and_says_so_in_one_line(shared):
    workdir, _, _ = shared
    refused = orchestrator(["rerun", "--failed", "--dry-run", "batch_size=8"], workdir)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith("batch_size='8' is not a site option a rerun takes; a rerun takes only")
    bad = orchestrator(["rerun", "--failed", "--dry-run", "cluster=nosuchsite"], workdir)
    assert "your configuration does not compose with cluster=nosuchsite" in bad.stdout, bad.stdout + bad.stderr
    ok = orchestrator(["rerun", "--failed", "--dry-run", "+cluster.setup=[echo mine]", "paths.data=/tmp", ENV], workdir)
    assert ok.returncode == 0 and "would resubmit 1 repeat" in ok.stdout, ok.stdout + ok.stderr


def test_a_tampered_setting_is_refused_as_a_new_sweep_would_refuse_it(tmp_path):
    workdir = user_dir(tmp_path)
    url = workdir[1]["ORCHESTRATOR_DB"]
    (cell,) = record_failed(url, [(CELL, fc.CRASH, ME)], PLANTED)
    factory = db.open_db(url, create=False)
    with factory.begin() as s:  # a recorded value no sweep could have made: a newline in a partition
        link = s.get(schema.SweepCell, ("s1", cell))
        link.config = {**link.config, "hardware": {**link.config["hardware"], "partition": "cpu\ntouch pwned"}}
    dry = orchestrator(["rerun", "--failed", "--dry-run", ENV], workdir)
    assert "nothing to rerun" in dry.stdout, dry.stdout
    assert f"cannot rerun s1:{cell}:0:1: numpy/lenet/synthetic: hardware.partition='cpu\\ntouch pwned' is not a plain name" in dry.stdout


def test_unplaceable_runs_are_offered_only_when_asked_or_asking_for_less(tmp_path):
    workdir = user_dir(tmp_path)
    (cell,) = record_failed(workdir[1]["ORCHESTRATOR_DB"], [(CELL + ["hardware.mem_gb=4"], fc.UNPLACEABLE, ME)])  # 60 min
    dry = orchestrator(["rerun", "--failed", "--dry-run", ENV], workdir)
    assert "nothing to rerun" in dry.stdout and "1 repeat(s) of class unplaceable unchanged" in dry.stdout, dry.stdout
    for more in (["--time", "90"], ["--mem", "8"], ["--time", "60"]):  # the same or more: refused again
        assert "nothing to rerun" in orchestrator(["rerun", "--failed", "--dry-run", ENV, *more], workdir).stdout, more
    for asked in (["--class", "unplaceable"], ["--time", "30"], ["--mem", "1"]):
        again = orchestrator(["rerun", "--failed", "--dry-run", ENV, *asked], workdir)
        assert "would resubmit 1 repeat" in again.stdout and cell in again.stdout, (asked, again.stdout)


def test_hydras_multirun_yaml_with_a_typed_database_url_is_0600(tmp_path):
    workdir = user_dir(tmp_path)
    workdir[1]["ORCHESTRATOR_CACHE"] = str(tmp_path / "cache")
    os.umask(0o022)
    url = "postgresql+psycopg://alice:secret@127.0.0.1:1/bench"
    dry = orchestrator(["-m", "model=lenet", "dry_run=true", f"paths.db={url}"], workdir)
    saved = tmp_path / "cache" / "hydra" / "multirun.yaml"
    assert "alice:secret" in saved.read_text(), dry.stdout + dry.stderr  # Hydra saved the override typed
    assert oct(stat.S_IMODE(saved.stat().st_mode)) == "0o600"
