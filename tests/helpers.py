"""What test modules share by import: the repository's root, the orchestrator's CLI run in a
user's directory, that directory's results.db, and the sweep settings that keep cells short.
(Fixtures stay in conftest.py; pytest loads it, no module imports it.)"""
import os
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

#: the end of an agreement script's Caffe half: the images in, its scores (the blob named) saved
CAFFE_FORWARD = """
net.blobs["data"].data[...] = a["x"]
net.forward()
np.save(sys.argv[2], net.blobs["%s"].data.copy())
"""
#: the start of an agreement script's MXNet half: the network (its name for %s) made, its parameters listed
MXNET_HEAD = """
import sys, numpy as np, mxnet as mx
from trainers.mxnet.models import build
a = np.load(sys.argv[1])
net = build("%s", (3, 32, 32), 10)
net.initialize()
net(mx.nd.zeros((1, 3, 32, 32)))
params = list(net.collect_params().values())
"""
#: the start of an agreement script's CNTK half: torch's arrays loaded, a 3x32x32 input
CNTK_HEAD = """
import sys, numpy as np
from trainers.cntk.libpath import import_cntk
C = import_cntk()
from trainers.cntk.models import build
a = np.load(sys.argv[1])
x = C.input_variable((3, 32, 32))
"""


def assert_torch_and_framework_agree(torch_script, framework, script, framework_env, tmp_path):
    """`framework` gives torch's class scores on torch's weights: `torch_script` saves torch's
    weights and scores (an .npz, its argv[1]); `script` loads those weights into the framework's
    network and saves its scores (argv[2]). Each runs in its framework's own interpreter (the
    orchestrator's venv has none of them); both are 2 images x 10 classes."""
    import subprocess

    import numpy as np

    weights, scores = tmp_path / "torch.npz", tmp_path / (framework + ".npy")
    for name, code, args in (("torch", torch_script, [weights]), (framework, script, [weights, scores])):
        python, env = framework_env(name)
        subprocess.run([python, "-c", code] + [str(a) for a in args], cwd=str(REPO), check=True, timeout=600,
                       env=env)
    expected, got = np.load(weights)["scores"], np.load(scores)
    assert expected.shape == got.shape == (2, 10)
    assert np.std(expected) > 1e-3  # scores that differ, not a constant both sides could agree on
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


#: a cell measured in a blink
FAST = ["iterations=3", "warmup=1"]
#: the test cluster's node has only this machine's cores: ask for one CPU and 1 GB per cell
SMALL = ["cluster=slurm", "hardware.cpus=1", "hardware.mem_gb=1", *FAST]


def user_dir(path, base_env=None):
    """A user's directory (path, env): its own results.db, runs/ and data/; the shared
    environment cache."""
    env = dict(base_env or os.environ, ORCHESTRATOR_DB="sqlite:///%s/results.db" % path,
               ORCHESTRATOR_RUNS=str(path / "runs"), ORCHESTRATOR_DATA=str(path / "data"), COLUMNS="200")
    return path, env


def orchestrator(args, workdir, timeout=600):
    """`python -m orchestrator ARGS` run in a user's directory, as the user types it."""
    import subprocess

    cwd, env = workdir
    return subprocess.run([sys.executable, "-m", "orchestrator"] + list(args), cwd=str(cwd), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=timeout)


def run_cli(args, cwd, **env):
    """`python -m orchestrator ARGS` in cwd with these variables added to the environment."""
    return orchestrator(args, (cwd, dict(os.environ, **env)), timeout=120)


def rows(workdir, sql):
    """The rows of a query on the user directory's results.db."""
    import sqlite3

    con = sqlite3.connect(str(workdir[0] / "results.db"))
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def wait_until_final(workdir, timeout=900, poll=2):
    """`orchestrator status` until no run is open; its last output."""
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        status = orchestrator(["status"], workdir)
        assert status.returncode == 0, status.stderr
        if rows(workdir, "select count(*) from runs where state in ('pending','submitted','running')") == [(0,)]:
            return status.stdout
        time.sleep(poll)
    raise AssertionError("runs did not end in time:\n" + orchestrator(["status"], workdir).stdout)


def harness_site(path):
    """The override that adds framework `harness` the way a site adds a trainer: a framework
    YAML (in a config dir of its own) naming its module and environment. The harness is
    tests/numpy_trainer.py (the numpy framework under a module name of the site's), run in the
    torch env."""
    (path / "framework").mkdir(parents=True)
    (path / "framework" / "harness.yaml").write_text("name: harness\ntrainer: tests.numpy_trainer\nenv: torch\n")
    return "hydra.searchpath=[file://%s]" % path


def discover_frameworks():
    """Every framework conf/framework/*.yaml defines, as {name, trainer, env}: a YAML with a
    `name` is one; an alias (only `defaults`, like tf.yaml) collapses onto its target."""
    found = {}
    for path in sorted((REPO / "conf" / "framework").glob("*.yaml")):
        spec = yaml.safe_load(path.read_text()) or {}
        if "name" not in spec:
            continue
        found[spec["name"]] = {"name": spec["name"],
                               "trainer": spec.get("trainer") or "trainers.%s" % spec["name"],
                               "env": spec.get("env") or spec["name"]}
    return [found[name] for name in sorted(found)]


FRAMEWORKS = discover_frameworks()


def allocation_failure_classes(framework_env, repo_root, framework, trainer, allocate, other):
    """[the failure class of a 1 PiB allocation's error, that of the error `other`] as a framework's
    trainer (`trainer`: "module.Class") classifies them, in the framework's own environment.
    `allocate`: (the import it needs, the statement that allocates)."""
    import json
    import subprocess

    module, name = trainer.rsplit(".", 1)
    script = "\n".join([
        "import json", allocate[0], "from trainers.common.errors import classify", f"from {module} import {name}",
        "try:", f"    {allocate[1]}", "except Exception as exc:", "    caught = exc",
        f"print(json.dumps([classify(caught, {name}())[0], classify({other}, {name}())[0]]))"])
    python, env = framework_env(framework)
    out = subprocess.check_output([python, "-c", script], cwd=str(repo_root), env=env, universal_newlines=True,
                                  timeout=300, stderr=subprocess.DEVNULL)
    return json.loads(out.strip().splitlines()[-1])


def composed(overrides):
    """conf/ composed with these overrides (Hydra's compose, as a sweep composes a cell), resolved to plain data."""
    from hydra import compose, initialize_config_dir

    from orchestrator.sweep.cell import resolved_config

    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf"), job_name="test"):
        return resolved_config(compose("config", overrides=list(overrides)))


def record_failed(url, cells, planted=None, sweep_id="s1"):
    """A sweep recorded as a launch records one, whose cells' only runs ended failed:
    cells = [(overrides, error class or a state, submit_user)], each cell's config a real
    composition, with `planted` (section -> values) written over it as a hostile row would be.
    Returns the cell ids in order."""
    import json

    from orchestrator.store import db, schema
    from orchestrator import runstate, setting_registry
    from orchestrator.sweep.cell import Cell

    factory = db.open_db(url)
    ids = []
    with factory.begin() as s:
        s.add(schema.Sweep(id=sweep_id, created_at=1.0, argv=[], overrides=[], n_cells=len(cells)))
        s.flush()
        for overrides, klass, user in cells:
            config = composed(overrides)
            cell = Cell.from_plain(config)
            ids.append(cell.id)
            recorded = json.loads(json.dumps(config))
            for section, values in (planted or {}).items():
                recorded[section] = dict(recorded[section], **values) if isinstance(values, dict) else values
            kept = setting_registry.recorded(cell.settings)  # a record's form: None at a default
            s.add(schema.Cell(id=cell.id, settings=kept, created_at=1.0, **kept))
            s.flush()
            s.add(schema.SweepCell(sweep_id=sweep_id, cell_id=cell.id, config=recorded))
            run = schema.Run(uid="%s:%s:0:1" % (sweep_id, cell.id), sweep_id=sweep_id, cell_id=cell.id, repeat=0,
                             attempt=1, state=runstate.PENDING, latest=True, submit_user=user,
                             run_dir="runs/%s/%s/0" % (sweep_id, cell.id), executor="local")
            s.add(run)
            for step in (runstate.SUBMITTED, runstate.RUNNING, klass if klass in runstate.RERUNNABLE else runstate.FAILED):
                run.state = step  # each move as the state machine allows it (orchestrator/runstate.py)
            run.error_class = None if klass == runstate.FAILED else klass
    factory.kw["bind"].dispose()
    return ids
