"""Bad input, typed or in a site's YAML: a clear message with the way out, never a command run,
never a traceback, nothing written (issue 12, items 7 and 8)."""
import copy
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from submitit.slurm.slurm import _make_sbatch_string

from orchestrator.sweep import config_checks
from orchestrator.backends import sbatch as sbatch_policy
from orchestrator.backends.slurm import SlurmBackend
from orchestrator.sweep.cell import Cell, CellError
from orchestrator.launch.submit import Options
from orchestrator.sweep.config_checks import ConfigError

from helpers import REPO, run_cli

INJECTION = "comment=ok\ntouch pwned #"


def composed(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def slurm_config(**cluster):
    """The plain config of one cell on the bundled Slurm site and p100 hardware, cluster keys replaced."""
    config = OmegaConf.to_container(composed("cluster=slurm", "hardware=p100", "gpus=1"), resolve=True)
    config["cluster"].update(copy.deepcopy(cluster))
    return config


def batch_script(config, folder):
    """The batch script submitit writes for this cell: its own function over our resources."""
    params = SlurmBackend(config["cluster"]).resources(config)
    return _make_sbatch_string(command="python -u -m submitit.core._submit /x", folder=folder,
                               job_name="orch-test", **params)


def injected(script):
    """Lines of the script's header that are neither `#SBATCH` options nor comments nor blank:
    anything there runs as a command before the job."""
    header = script.split("# setup")[0].split("# command")[0]
    return [line for line in header.splitlines()[1:] if line.strip() and not line.startswith("#")]


# --- item 7: no command from configuration ----------------------------------------------------

def test_the_bundled_site_writes_only_sbatch_options(tmp_path):
    script = batch_script(slurm_config(account="bench", sbatch={"reservation": "bench", "mail_type": "END"},
                                       setup=["module load apptainer"]), tmp_path)
    assert injected(script) == []
    for line in ("#SBATCH --reservation=bench", "#SBATCH --mail-type=END", "#SBATCH --gres=gpu:p100:1",
                 "#SBATCH --account=bench", "\nmodule load apptainer\n"):
        assert line in script


@pytest.mark.parametrize("cluster, key", [
    ({"sbatch": {INJECTION: 1}}, "cluster.sbatch option name="),          # the option name
    ({"sbatch": {"comment": "ok\ntouch pwned #"}}, "cluster.sbatch.comment="),  # shlex.quote keeps a newline
    ({"sbatch": {"comment": "ok'\ntouch pwned #"}}, "cluster.sbatch.comment="),
    ({"account": "bench\ntouch pwned"}, "cluster.account="),
    ({"qos": "normal\rtouch pwned"}, "cluster.qos="),
    ({"constraint": "x\x00y"}, "cluster.constraint="),
    ({"setup": ["module load x\ntouch pwned"]}, "cluster.setup[0]="),
])
def test_a_site_yaml_cannot_add_a_command_to_the_batch_script(tmp_path, cluster, key):
    config = slurm_config(**cluster)
    try:
        script = batch_script(config, tmp_path)
    except ConfigError as exc:
        script, refused = None, str(exc)
    assert script is None or injected(script) == [], script
    assert script is None, "refused, not merely quoted"
    assert key in refused and ("\\n" in refused or "\\r" in refused or "\\x00" in refused)
    with pytest.raises(ConfigError) as early:  # and already when the sweep starts, in the same words
        Options.from_config(config)
    assert str(early.value) == refused


@pytest.mark.parametrize("sbatch, words", [
    ({"export": "ALL,LD_PRELOAD=/tmp/x.so"}, "would change what the job runs"),
    ({"chdir": "/"}, "would change what the job runs"),
    ({"wrap": "touch pwned"}, "would change what the job runs"),
    ({"time": 5}, "set hardware.time_min instead"),
    ({"job_name": "x"}, "the orchestrator sets itself"),
    ({"Reservation": "x"}, "not an sbatch long option"),
    ({"reservation": None}, "remove cluster.sbatch.reservation"),
    ({"reservation": ["a", "b"]}, "must be one value"),
])
def test_sbatch_options_the_orchestrator_owns_or_that_change_what_runs_are_refused(sbatch, words):
    with pytest.raises(ConfigError, match=words):
        sbatch_policy.sbatch_options("cluster.sbatch", sbatch)


def test_setup_and_python_are_the_sites_shell_one_line_each():
    assert sbatch_policy.shell_lines("cluster.setup", ["module load apptainer", "export A=1; echo $A"])
    with pytest.raises(ConfigError, match="one list item per line"):
        sbatch_policy.shell_lines("cluster.setup", ["module load a\nmodule load b"])
    with pytest.raises(ConfigError, match="must be a list"):
        sbatch_policy.shell_lines("cluster.setup", "module load a")
    with pytest.raises(ConfigError, match=r"cluster.python='python3\\n"):
        sbatch_policy.check_cluster({"executor": "slurm", "python": "python3\ntouch pwned"})


@pytest.mark.parametrize("overrides, choices, key", [
    ((), {"model": "../cluster/slurm"}, "model='../cluster/slurm' does not name a file in conf/model/; use one of"),
    ((), {"hardware": "/etc/passwd"}, "hardware='/etc/passwd' does not name a file in conf/hardware/"),
    (("framework.name=../../x",), None, "framework.name='../../x' is not a plain name"),
    (("+framework.env=../x",), None, "framework.env='../x' is not a plain name"),
    (("+framework.trainer=/tmp/x",), None, "framework.trainer='/tmp/x' is not a dotted Python module name"),
    (("hardware=p100", "gpus=1", "hardware.gpu_type='p100:2,gpu'"), None, "hardware.gpu_type='p100:2,gpu'"),
    (("hardware=p100", "hardware.partition='a b'"), None, "hardware.partition='a b'"),
])
def test_names_that_become_paths_or_modules_stay_names(overrides, choices, key):
    with pytest.raises(CellError) as refused:
        Cell.from_config(composed(*overrides), overrides, choices=choices)
    assert key in str(refused.value)


def test_a_partition_may_be_a_list():
    cell = Cell.from_config(composed("hardware=p100", "hardware.partition='p100,v100'"),
                            choices={"model": "lenet", "hardware": "p100"})
    assert cell.config["hardware"]["partition"] == "p100,v100"


def test_run_directories_are_made_of_generated_ids_only(tmp_path):
    """What joins paths.runs: the sweep id (generated), the cell id (a hash), the repeat/attempt."""
    from orchestrator.launch.submit import new_sweep_id

    cell = Cell.from_config(composed("model=lenet"))
    assert config_checks.NAME.fullmatch(new_sweep_id()) and len(cell.id) == 12 and int(cell.id, 16) >= 0


# --- item 8: every bad value a clear message, nothing written ----------------------------------

def workdir(tmp_path):
    return {"ORCHESTRATOR_DB": f"sqlite:///{tmp_path}/results.db", "ORCHESTRATOR_RUNS": str(tmp_path / "runs"),
            "ORCHESTRATOR_DATA": str(tmp_path / "data"), "COLUMNS": "300"}


def site_yaml(tmp_path):
    """A site's cluster YAML with the issue's injected sbatch option name, on Hydra's search path."""
    (tmp_path / "site" / "cluster").mkdir(parents=True)
    (tmp_path / "site" / "cluster" / "evil.yaml").write_text(
        "defaults:\n  - slurm\n  - _self_\nname: evil\nsbatch:\n  \"comment=ok\\ntouch pwned #\": 1\n")
    return f"hydra.searchpath=[file://{tmp_path}/site]"


NOT_A_DB = b"not a database, just text\n"

#: the networks conf/model/ offers, in the order the refusal lists them
MODELS = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "conf" / "model").glob("*.yaml"))

# (command line, what the message must name, the way out it must give)
BAD = {
    "model=../cluster/slurm": (["-m", "model=../cluster/slurm", "dry_run=true"],
                               "model='../cluster/slurm'", "use one of " + ", ".join(MODELS)),
    "model outside conf/": (["-m", "OUTSIDE", "dry_run=true"], "model='../../../../../../../..", "use one of alexnet"),
    "repeats=0": (["-m", "repeats=0", "dry_run=true"], "repeats=0", "use repeats=N"),
    "repeats=abc": (["-m", "repeats=abc"], "repeats='abc'", "use repeats=N"),
    "batch_size huge": (["-m", "batch_size=99999999999999999999"], "batch_size=99999999999999999999",
                        "use batch_size=N"),
    "batch_size huge, foreground": (["batch_size=99999999999999999999"], "batch_size=99999999999999999999",
                                    "use batch_size=N"),
    "batch_size=0": (["-m", "batch_size=0", "dry_run=true"], "batch_size=0", "use batch_size=N"),
    "iterations=0": (["-m", "iterations=0", "dry_run=true"], "iterations=0", "use iterations=N"),
    "gpus=-1": (["-m", "gpus=-1", "dry_run=true"], "gpus=-1", "use gpus=0 for the CPU"),
    "gpus=abc": (["gpus=abc", "dry_run=true"], "gpus='abc'", "use gpus=0 for the CPU"),
    "hardware.time_min=abc": (["-m", "hardware.time_min=abc"], "hardware.time_min='abc'",
                              "use hardware.time_min=N"),
    "framework.trainer path": (["-m", "+framework.trainer=../../x", "dry_run=true"],
                               "framework.trainer='../../x'", "use a module name"),
    "framework.env path": (["-m", "+framework.env=../../x", "dry_run=true"], "framework.env='../../x'",
                           "name a recipe folder of containers/"),
    "wait=abc": (["-m", "wait=abc", "dry_run=true"], "wait='abc'", "use wait=true or wait=false"),
    "retry.timeout=9": (["-m", "retry.timeout=9", "cluster=slurm"], "retry.timeout=9", "use retry.timeout=N"),
    "retry.timeout on cluster=local": (["-m", "retry.timeout=1"], "retry.timeout=1",
                                       "rerun timed-out cells with `orchestrator rerun --failed --class timeout`"),
    "monitor.period_s=abc": (["-m", "monitor.period_s=abc"], "monitor.period_s='abc'", "use monitor.period_s=X"),
    "monitor.idle_s=1e9": (["-m", "monitor.idle_s=1e9"], "monitor.idle_s=1000000000.0",
                           "use monitor.idle_s=X with X from 0 to 600"),
    "site yaml injection": (["-m", "cluster=evil", "hardware=cpu12", "SITE"],
                            "cluster.sbatch option name='comment=ok\\ntouch pwned #'", "fix or remove it in"),
    "site yaml injection, dry run": (["-m", "cluster=evil", "hardware=cpu12", "SITE", "dry_run=true"],
                                     "cluster.sbatch option name=", "fix or remove it in"),
    "not a database, -m": (["-m", "NOTDB"], "'sqlite:///", "move it away"),
    "not a database, -m dry run": (["-m", "NOTDB", "dry_run=true"], "'sqlite:///", "move it away"),
    "not a database, foreground": (["NOTDB"], "'sqlite:///", "move it away"),
    "not a database, foreground dry run": (["NOTDB", "dry_run=true"], "'sqlite:///", "move it away"),
    "cluster.executor unknown": (["-m", "cluster.executor=pbs", "dry_run=true"], "cluster.executor='pbs'",
                                 "use cluster.executor=local"),
    "cluster.executor unknown, foreground": (["cluster.executor=pbs"], "cluster.executor='pbs'",
                                             "use cluster.executor=local"),
    "unreachable server": (["-m", "paths.db=postgresql://127.0.0.1:1/x"], "'postgresql://127.0.0.1:1/x'",
                           "point ORCHESTRATOR_DB (paths.db=, --db) at sqlite:///results.db"),
    "unreachable server, dry run": (["paths.db=postgresql://127.0.0.1:1/x", "dry_run=true"],
                                    "'postgresql://127.0.0.1:1/x'", "point ORCHESTRATOR_DB"),
    "database in a missing directory": (["-m", "MISSINGDIR"], "missing/results.db", "check that its directory exists"),
    "database in a missing directory, dry run": (["MISSINGDIR", "dry_run=true"], "missing/results.db",
                                                 "make it, or point ORCHESTRATOR_DB"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_every_bad_value_is_a_message_with_the_way_out_and_nothing_is_written(tmp_path, case):
    args, key, way_out = BAD[case]
    if "NOTDB" in args:
        (tmp_path / "results.db").write_bytes(NOT_A_DB)
    if "OUTSIDE" in args:  # a valid model YAML, reached from conf/model/ by ../
        (tmp_path / "evil.yaml").write_text("name: lenet\nnative: mnist\nbatch_size: {mnist: 1}\n")
    fill = {"SITE": site_yaml(tmp_path) if "SITE" in args else None,
            "MISSINGDIR": f"paths.db=sqlite:///{tmp_path}/missing/results.db",
            "OUTSIDE": "model=" + "../" * 10 + str(tmp_path / "evil").lstrip("/"), "NOTDB": None}
    args = [fill.get(a, a) for a in args if fill.get(a, a) is not None]
    before = sorted(p.name for p in tmp_path.iterdir())
    multirun = args[:1] == ["-m"]
    done = run_cli([*args[:multirun], "framework=numpy", *args[multirun:]], tmp_path, **workdir(tmp_path))
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "Traceback" not in said and "HYDRA_FULL_ERROR" not in said, said
    assert key in said and way_out in said, said
    assert "pwned" not in said or "\\ntouch pwned" in said  # shown as a value, never as a line
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no results.db, no runs/
    if (tmp_path / "results.db").exists():
        assert (tmp_path / "results.db").read_bytes() == NOT_A_DB


def test_a_bad_value_of_one_cell_refuses_that_cell_only(tmp_path):
    done = run_cli(["-m", "framework=numpy", "batch_size=64,0,99999999999999999999", "dry_run=true"],
                   tmp_path, **workdir(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "1 cells (dry run" in done.stdout
    assert done.stdout.count("refused") == 2 and "use batch_size=N" in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_an_existing_database_passes_the_dry_runs_check_unchanged(db_url, other_db_url):
    from sqlalchemy import create_engine, inspect

    from db_urls import is_sqlite, query, sqlite_file
    from orchestrator.store import db

    url = db_url
    db.open_db(url)
    before = query(url, "select count(*) from sweeps")
    config_checks.check_database(url)  # an orchestrator database: fine, and not touched
    config_checks.check_database(other_db_url)  # none yet (no file; a server's database without tables): a launch makes it
    if is_sqlite(other_db_url):
        assert not sqlite_file(other_db_url).exists()
    else:
        engine = create_engine(other_db_url)
        assert inspect(engine).get_table_names() == []
        engine.dispose()
    assert query(url, "select count(*) from sweeps") == before


def test_a_dataset_without_files_is_refused_at_expansion_with_the_command_that_writes_them(tmp_path):
    """dataset=mnist with no files under paths.data: refused before anything is submitted, naming the
    folder and `orchestrator data generate`; the synthetic cell beside it is submitted. A dry run
    counts the cell and says it needs its data."""
    env = workdir(tmp_path)
    dry = run_cli(["-m", "framework=numpy", "model=lenet", "dataset=mnist,synthetic", "dry_run=true"], tmp_path, **env)
    assert dry.returncode == 0, dry.stderr
    said = " ".join(dry.stdout.split())
    assert "2 cells (dry run" in said and "needs data (a submission now refuses it) numpy/lenet/mnist: " in said, said
    for text in ("dataset=mnist reads", "which does not exist", f"orchestrator data generate mnist --dir {tmp_path / 'data'}"):
        assert text in said, (text, said)
    done = run_cli(["-m", "framework=numpy", "model=lenet", "dataset=mnist,synthetic", "iterations=2", "warmup=1",
                    "threads=1", "batch_size=8"], tmp_path, **env)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert "refused numpy/lenet/mnist: dataset=mnist reads" in said and "1 cells submitted" in said, said
    # digits is made at submission, not refused
    done = run_cli(["-m", "framework=numpy", "model=lenet", "dataset=digits", "mode=accuracy", "dry_run=true"],
                   tmp_path, **env)
    assert done.returncode == 0 and "1 cells (dry run" in done.stdout and "refused" not in done.stdout, done.stdout
    assert not (tmp_path / "data").exists()  # a dry run writes nothing


def test_the_foreground_run_takes_the_sweeps_front_door_a_missing_dataset_refused(tmp_path):
    """Issue 36: `python -m orchestrator` without -m skipped the missing-dataset check and ran the
    trainer on a folder that is not there. Now it is the sweep's launch path: refused in one line
    naming the folder and `orchestrator data generate`, nothing written; its dry run counts the
    cell and says it needs its data."""
    env = workdir(tmp_path)
    cell = ["framework=numpy", "model=lenet", "dataset=mnist", "iterations=2", "warmup=1", "threads=1", "batch_size=8"]
    done = run_cli(cell, tmp_path, **env)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1, said
    assert "Traceback" not in said, said
    assert "refused numpy/lenet/mnist: dataset=mnist reads" in said, said
    assert f"orchestrator data generate mnist --dir {tmp_path / 'data'}" in said, said
    assert "nothing was submitted" in said, said
    assert list(tmp_path.iterdir()) == []  # no results.db, no runs/, no data/
    dry = run_cli([*cell, "dry_run=true"], tmp_path, **env)
    said = " ".join(dry.stdout.split())
    assert dry.returncode == 0, dry.stderr
    assert "1 cells (dry run" in said and "needs data (a submission now refuses it) numpy/lenet/mnist: " in said, said
    assert list(tmp_path.iterdir()) == []


def test_the_foreground_run_leaves_out_a_threads_presets_cell_beyond_the_nodes_cpus(tmp_path):
    """The threads preset's rule (no cell with more threads than the node's CPUs) holds in the
    foreground too: said once, and nothing runs or is written."""
    done = run_cli(["framework=numpy", "+preset=threads", "hardware=cpu12", "threads=64", "dry_run=true"],
                   tmp_path, **workdir(tmp_path))
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1 and "Traceback" not in said, said
    assert "1 cell(s) left out: more threads than the node's CPUs (threads=64 on cpu12)" in said, said
    assert "(0 refused, 1 left out); nothing was submitted" in said, said
    assert list(tmp_path.iterdir()) == []


def test_digits_are_written_on_first_use_once(tmp_path):
    """A sweep on dataset=digits writes scikit-learn's digits where they are missing, into a private
    folder renamed into place; a second finds them and writes nothing."""
    from orchestrator.sweep.dataset_files import made_on_first_use
    from trainers.common import data

    target = tmp_path / "data" / "digits"
    notes = made_on_first_use({str(target)})
    assert len(notes) == 1 and "1438 training and 359 test images" in notes[0].replace(",", ""), notes
    images = data.load("digits", str(target), "train")
    assert len(images) == 1438 and images.shape[-2:] == (28, 28)
    assert made_on_first_use({str(target)}) == []
    assert sorted(p.name for p in target.parent.iterdir()) == ["digits"]  # no private folder left
