"""Shared fixtures: real trainer environments, scratch databases and data files. (The helpers
test modules import by name are in helpers.py: a conftest is pytest's, not a module to import.)"""
import os
import sys
from pathlib import Path

import pytest

from helpers import FRAMEWORKS, REPO, orchestrator, rows, user_dir

sys.path.insert(0, str(REPO))

#: Under CI=true a skip fails the run, except a GPU-only test's (tests/ci_skips.py).
pytest_plugins = ["ci_skips"]


def pytest_configure(config):
    """The real-Python-3.6 check of trainers/common uses the CNTK environment's interpreter
    (Python 3.6, numpy 1.19) when it exists and PY36_PYTHON is not set."""
    if not os.environ.get("PY36_PYTHON"):
        try:
            from orchestrator.envs.venv_runtime import VenvRuntime

            runtime = VenvRuntime.for_framework("cntk")
            if runtime.is_ready():
                os.environ["PY36_PYTHON"] = str(runtime.python)
        except Exception:  # no recipe, no cache: the test says why it skips
            pass


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def torch_python() -> str:
    """A Python interpreter whose environment holds the PyTorch trainer's requirements.

    It is the very environment the orchestrator's venv runtime builds for `framework=torch`
    (created on first use under the cache directory, reused afterwards), so the tests run the
    trainer exactly as a job would.
    """
    override = os.environ.get("TORCH_PYTHON")
    if override:
        return override
    from orchestrator.envs.venv_runtime import VenvRuntime

    return str(VenvRuntime.for_framework("torch").ensure())


def framework_python(framework: str) -> str:
    """The interpreter of a framework's trainer environment (made on first use, as a job does).

    Skips, naming the reason, where the framework has no trainer yet or this machine cannot
    hold it (no interpreter of the version it needs); a recipe that fails to install fails.
    """
    from orchestrator.envs.venv_runtime import EnvironmentNotReady, VenvRuntime

    if not (REPO / "trainers" / framework / "__main__.py").is_file():
        pytest.skip(f"no trainers/{framework} yet")
    if framework == "torch" and os.environ.get("TORCH_PYTHON"):
        return os.environ["TORCH_PYTHON"]
    try:
        return str(VenvRuntime.for_framework(framework).ensure())
    except EnvironmentNotReady as exc:
        if exc.error_class == "unsupported":
            pytest.skip(f"{framework} cannot run here: {exc}")
        raise


def model_counts(python, module, channels, size, classes, models, like=None):
    """{model: trainable parameters} from `python -m <module>.models --count` (module: a
    trainer module, trainers.<framework>) at one input shape (or at dataset `like`'s). Run without LD_LIBRARY_PATH on purpose: a models module must find its
    framework's libraries by itself (CNTK's MPI links), as a job's trainer does."""
    import json
    import subprocess

    argv = [python, "-m", "%s.models" % module, "--count", "--channels", str(channels),
            "--size", str(size), "--classes", str(classes)] + (["--like", like] if like else [])
    for model in models:
        argv += ["--model", model]
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    out = subprocess.run(argv, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, timeout=900, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def recipe_env(framework):
    """The variables a job sets for this framework's trainer (PYTHONPATH, the recipe's `env`)."""
    from orchestrator.envs.venv_runtime import VenvRuntime

    return VenvRuntime.for_framework(framework).command([])[1]


# ------------------------------------------------------------------ frameworks and trainers



class Framework(object):
    """A discovered framework made ready: its interpreter, environment and declaration."""

    def __init__(self, spec):
        from trainers.common.support import declared
        from orchestrator.envs.venv_runtime import EnvironmentNotReady, VenvRuntime

        self.name, self.module, self.env_name = spec["name"], spec["trainer"], spec["env"]
        self.support = declared(self.module)
        try:
            runtime = VenvRuntime(self.env_name, trainer=self.module)
            self.python = str(runtime.ensure(log=lambda line: None))
        except EnvironmentNotReady as exc:
            if exc.error_class == "unsupported":
                pytest.skip("%s cannot run here: %s" % (self.name, exc))
            raise
        self.env = dict(os.environ, **runtime.command([])[1])

    def run(self, argv, timeout=900, **env):
        """(finished process, events) of `python -m <trainer module> argv`, as a job runs it.
        Fails the test if a stdout line is not a JSON event with `event` and `t`."""
        return run_trainer(self.python, self.module, argv, dict(self.env, **env), timeout)

    def __repr__(self):
        return self.name


@pytest.fixture(scope="module", params=[f["name"] for f in FRAMEWORKS])
def framework(request):
    """Each framework conf/framework/ defines, ready to run (skipped, with the reason, where
    this machine cannot hold it)."""
    return Framework(next(f for f in FRAMEWORKS if f["name"] == request.param))


@pytest.fixture(scope="session")
def framework_named():
    """framework_named(name) -> that framework ready to run (a Framework), or a skip saying why."""
    return lambda name: Framework(next(f for f in FRAMEWORKS if f["name"] == name))


@pytest.fixture(scope="session")
def ready_frameworks(request):
    """Every discovered framework this machine can hold, its environment made. One it cannot hold
    fails the test under CI=true, as a skip would; elsewhere the closing skip line counts it."""
    ready = []
    for spec in FRAMEWORKS:
        try:
            ready.append(Framework(spec))
        except pytest.skip.Exception as left_out:
            request.config.pluginmanager.get_plugin("ci_skips").dropped(request.config, left_out.msg)
    return ready


def run_trainer(python, module, argv, env=None, timeout=900):
    import json
    import subprocess

    proc = subprocess.run([python, "-m", module] + [str(a) for a in argv], cwd=str(REPO),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout, env=env)
    events = []
    for line in proc.stdout.splitlines():
        event = json.loads(line)
        assert isinstance(event["event"], str) and isinstance(event["t"], float), line
        events.append(event)
    return proc, events


RUN_START_FIELDS = {
    "framework", "version", "build", "model", "params", "input_shape", "classes", "network",
    "dataset", "like", "batch_size", "per_device_batch", "gpus", "devices", "threads",
    "precision", "seed", "python", "processes"}


def check_run(events, warmup, iterations, global_batch):
    """The event order and counts of a successful run (docs/protocol.md); its run_start. A
    framework that gives its parameters' checksum sends one `params` event per rank before
    run_end; they are checked to agree, then left out of the order."""
    checks = [e for e in events if e["event"] == "params"]
    assert len({e["rank"] for e in checks}) == len(checks), checks
    assert len({e["sha256"] for e in checks}) <= 1, checks  # ranks of one run hold one model
    assert all(len(e["sha256"]) == 64 for e in checks), checks
    events = [e for e in events if e["event"] != "params"]
    kinds = [e["event"] for e in events]
    assert kinds == (["run_start"] + ["step"] * warmup + ["warmup_end"]
                     + ["step"] * iterations + ["run_end"]), kinds
    start, end = events[0], events[-1]
    assert RUN_START_FIELDS <= set(start), RUN_START_FIELDS - set(start)
    assert start["batch_size"] == global_batch
    steps = [e for e in events if e["event"] == "step"]
    assert [s["step"] for s in steps] == list(range(warmup + iterations))
    assert all(s["images"] == global_batch and s["dt"] > 0 for s in steps)
    assert all(isinstance(s["loss"], float) and s["loss"] > 0 for s in steps)
    assert events[warmup + 1]["event"] == "warmup_end" and events[warmup + 1]["step"] == warmup
    assert end["steps"] == iterations and end["images"] == iterations * global_batch
    stamps = [e["t"] for e in events]
    assert stamps == sorted(stamps)
    return start


@pytest.fixture(scope="session")
def run_checks():
    """check_run(events, warmup, iterations, global_batch) -> run_start: asserts the event
    stream of a successful run."""
    return check_run


@pytest.fixture(scope="session")
def counts():
    """counts(python, framework, channels, size, classes, models[, like]) -> {model: parameters}."""
    return model_counts


@pytest.fixture(scope="session")
def framework_env():
    """framework_env(name) -> (interpreter, the variables a job sets for its trainer)."""
    return lambda name: (framework_python(name), dict(os.environ, **recipe_env(name)))


@pytest.fixture(scope="session")
def framework_run(framework_env):
    """framework_run(name, argv, **env) -> (process, events): `python -m trainers.<name>` as a
    job runs it, with `env` added."""
    def run(name, argv, **env):
        python, base = framework_env(name)
        return run_trainer(python, "trainers.%s" % name, argv, dict(base, **env))
    return run


# --- a user's directory, the orchestrator's CLI in it, and the test Slurm cluster ------------

@pytest.fixture(scope="session")
def slurm_env():
    """The environment of the running test cluster (SLURM_CONF), or a loud skip saying how to start it."""
    import shutil
    import subprocess

    state = Path(os.environ.get("SLURM_TEST_DIR", "/tmp/orchestrator-slurm"))
    env = dict(os.environ, SLURM_CONF=str(state / "slurm.conf"))
    if shutil.which("sbatch") is None or subprocess.run(
            ["bash", str(REPO / "slurm" / "check.sh"), "-q"], env=env).returncode != 0:
        pytest.skip("SLURM TESTS SKIPPED: the test cluster is not running; start it as root with "
                    "`slurm/install.sh && slurm/start.sh` (scripts/test.sh does this when run as root)")
    return env


@pytest.fixture
def slurm_workdir(tmp_path, torch_python, slurm_env):
    """A user's directory on the test cluster; no job of the test is left behind, whatever happened."""
    import sqlite3
    import subprocess

    workdir = user_dir(tmp_path, slurm_env)
    yield workdir
    try:
        jobs = rows(workdir, "select distinct job_id from runs where job_id is not null")
    except sqlite3.Error:  # no database, or none with runs yet
        jobs = []
    for (job_id,) in jobs:
        subprocess.run(["scancel", job_id.split("_")[0]], env=workdir[1])
    try:  # retry.timeout's follow-up jobs (orchestrator/launch/retry.py), named after their sweep
        sweeps = rows(workdir, "select id from sweeps")
    except sqlite3.Error:
        sweeps = []
    for (sweep_id,) in sweeps:
        subprocess.run(["scancel", "--name", f"orch-{sweep_id}-retry"], env=workdir[1])


@pytest.fixture
def user_workdir(tmp_path):
    """A user's directory with orchestrator(args) / rows(sql) bound to it."""
    workdir = user_dir(tmp_path)

    class Workdir(object):
        path = tmp_path

        def orchestrator(self, args, timeout=600):
            return orchestrator(args, workdir, timeout)

        def rows(self, sql):
            return rows(workdir, sql)

    return Workdir()


# --- the results database: SQLite and PostgreSQL ----------------------------------------------

@pytest.fixture(scope="session")
def postgres_server():
    """The URL of the test PostgreSQL server (scripts/postgres.sh), or a loud skip saying how to start it;
    a failure where ORCHESTRATOR_TEST_POSTGRES names one that does not answer (a server meant to be there)."""
    from db_urls import HOW, POSTGRES_ENV, postgres_server as find

    url, why = find()
    if url is None and os.environ.get(POSTGRES_ENV, "").strip():  # named, so meant to be there: not a skip
        pytest.fail(f"{POSTGRES_ENV} names a server that does not answer: {why}; {HOW}, or unset it", pytrace=False)
    if url is None:
        pytest.skip(f"POSTGRESQL TESTS SKIPPED: {why}; {HOW}")
    return url


def _fresh_database(kind, request, tmp_path, name):
    """A fresh, empty database of `kind`: a new SQLite file `name` under the test's directory, or a
    new database (CREATE DATABASE t_<random>) on the test PostgreSQL server, dropped afterwards."""
    if kind == "sqlite":
        yield "sqlite:///%s" % (tmp_path / name)
        return
    from db_urls import create_database, drop_database

    server = request.getfixturevalue("postgres_server")
    url = create_database(server)
    try:
        yield url
    finally:
        drop_database(server, url)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A fresh, empty results database's URL, once per database (PostgreSQL skipped loudly where
    no server runs)."""
    yield from _fresh_database(request.param, request, tmp_path, "results.db")


@pytest.fixture
def other_db_url(db_url, request, tmp_path):
    """A second fresh database of db_url's kind (for tests that compare two databases)."""
    from db_urls import is_sqlite

    yield from _fresh_database("sqlite" if is_sqlite(db_url) else "postgresql", request, tmp_path, "other.db")
