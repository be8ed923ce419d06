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
