"""Shared fixtures: real trainer environments, scratch databases and data files."""
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


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
