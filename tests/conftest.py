"""Shared fixtures: real trainer environments, scratch databases and data files."""
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def pytest_configure(config):
    """The real-Python-3.6 check of trainers/common uses the CNTK environment's interpreter
    (Python 3.6, numpy 1.19) when it exists and PY36_PYTHON is not set."""
    if not os.environ.get("PY36_PYTHON"):
        try:
            from orchestrator.runtime import VenvRuntime

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
    from orchestrator.runtime import VenvRuntime

    return str(VenvRuntime.for_framework("torch").ensure())


def framework_python(framework: str) -> str:
    """The interpreter of a framework's trainer environment (made on first use, as a job does).

    Skips, naming the reason, where the framework has no trainer yet or this machine cannot
    hold it (no interpreter of the version it needs); a recipe that fails to install fails.
    """
    from orchestrator.runtime import EnvironmentError_, VenvRuntime

    if not (REPO / "trainers" / framework / "__main__.py").is_file():
        pytest.skip(f"no trainers/{framework} yet")
    if framework == "torch" and os.environ.get("TORCH_PYTHON"):
        return os.environ["TORCH_PYTHON"]
    try:
        return str(VenvRuntime.for_framework(framework).ensure())
    except EnvironmentError_ as exc:
        if exc.error_class == "unsupported":
            pytest.skip(f"{framework} cannot run here: {exc}")
        raise


def model_counts(python, framework, channels, size, classes, models):
    """{model: trainable parameters} from `python -m trainers.<framework>.models --count` at one
    input shape. Run without LD_LIBRARY_PATH on purpose: a models module must find its
    framework's libraries by itself (CNTK's MPI links), as a job's trainer does."""
    import json
    import subprocess

    argv = [python, "-m", "trainers.%s.models" % framework, "--count", "--channels", str(channels),
            "--size", str(size), "--classes", str(classes)]
    for model in models:
        argv += ["--model", model]
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    out = subprocess.run(argv, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, timeout=900, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def recipe_env(framework):
    """The variables a job sets for this framework's trainer (PYTHONPATH, the recipe's `env`)."""
    from orchestrator.runtime import VenvRuntime

    return VenvRuntime.for_framework(framework).command([])[1]
