"""What every backend must do, checked for every backend the registry names (backends.BACKENDS):
adding a scheduler adds it here with no test edited.

The interface is small (backends/base.py): build the submitit executor, observe jobs; `poll`
is built on `observe`. Each backend's real executor submits a real job (the local machine, the
test Slurm cluster), which waits for a file: while it waits the backend says it is queued or
running, and once it has ended it says ended or unknown, never silence. What only some
schedulers can do is a capability, which a backend has whole or not at all, and which the
plain functions of base.py answer for a backend without it.
"""
import subprocess
import time

import pytest

from orchestrator.backends import BACKENDS, backend_class
from orchestrator.backends.base import (Backend, FollowingUp, Locking, Naming, Placing, array_limit,
                                        max_time_min, node_lock, refusal, resources, submit)

#: The capabilities, and the backends expected to have each.
CAPABILITIES = {Placing: {"slurm"}, Naming: {"slurm"}, FollowingUp: {"slurm"}, Locking: {"local"}}


def test_the_interface_is_what_every_scheduler_must_do():
    assert Backend.__abstractmethods__ == {"executor", "observe"}
    public = {name for name in vars(Backend) if not name.startswith("_") and callable(vars(Backend)[name])}
    assert public == {"executor", "observe", "poll"}


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_a_capability_is_had_whole_or_not_at_all(name):
    kind = backend_class(name)
    assert issubclass(kind, Backend) and kind.name == name and not kind.__abstractmethods__
    for capability, having in CAPABILITIES.items():
        methods = [m for m in vars(capability) if not m.startswith("_") and callable(getattr(capability, m))]
        has = [m for m in methods if callable(getattr(kind, m, None))]
        assert has in ([], methods), (name, capability.__name__, has)
        assert issubclass(kind, capability) == (name in having), (name, capability.__name__)


def test_a_backend_without_a_capability_is_answered_for(tmp_path):
    local = backend_class("local")({})
    config = {"hardware": {"partition": "p100", "cpus": 2, "mem_gb": 1}, "gpus": 0}
    assert resources(local, config) == {} and refusal(local, config) is None
    assert max_time_min(local, config) is None and array_limit(local) is None
    assert node_lock(backend_class("slurm")({}), tmp_path) is None
    assert node_lock(backend_class("local")({"exclusive": True}), tmp_path) == str(tmp_path / "local-node.lock")


@pytest.fixture(params=sorted(BACKENDS))
def backend(request, monkeypatch):
    """Each backend, on its real scheduler (Slurm: the test cluster, or the loud skip of slurm_env)."""
    if request.param == "slurm":
        monkeypatch.setenv("SLURM_CONF", request.getfixturevalue("slurm_env")["SLURM_CONF"])
    return backend_class(request.param)({"executor": request.param})


def _phase(backend, job_id):
    seen = backend.poll([job_id])
    assert seen is not None, backend.last_error  # a scheduler that is up answers
    return seen[job_id].phase if job_id in seen else None


def test_a_real_job_is_followed_from_waiting_to_its_end(backend, tmp_path):
    gate = tmp_path / "gate"
    executor = backend.executor(tmp_path / ".submitit")
    # a cell's resolved config holds every setting, defaults included (nodes among them)
    params = resources(backend, {"hardware": {"cpus": 1, "mem_gb": 1, "time_min": 5}, "gpus": 0, "nodes": 1})
    wait = ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done"]
    (job_id,) = submit(backend, executor, subprocess.call, [wait], params, f"conformance-{tmp_path.name}")
    try:
        assert _phase(backend, job_id) in ("queued", "running", None)  # None: too new for the scheduler's answer
        gate.touch()
        deadline = time.time() + 300
        while _phase(backend, job_id) in ("queued", "running", None) and time.time() < deadline:
            time.sleep(0.5)
        assert _phase(backend, job_id) in ("ended", "unknown")
    finally:
        gate.touch()
