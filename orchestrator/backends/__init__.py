"""Backends: one per scheduler, each one class behind one small interface (`base.Backend`).

Every backend builds the submitit executor its jobs go out through and observes a batch of
jobs: that is the whole interface. What only some schedulers can do (place a request and refuse
one no node holds, find a submission by name, hold a follow-up job, lock a node) is a capability
in base.py that a backend has by having its methods; the launch asks for each through a plain
function there that answers for a backend without it. The rest of the orchestrator never branches
on the scheduler: it asks `backend_for(cluster)` here, the one place that reads `cluster.executor`.
"""
from __future__ import annotations

import importlib
from typing import Any, Mapping

from orchestrator.backends.base import Backend, SchedulerUnavailable, SchedulerView
from orchestrator.sweep.config_checks import ConfigError, refuse

#: backend name (a cluster config's `executor`) -> "module:Class", imported on first use so
#: that `orchestrator --help` and the local path never import what Slurm needs.
BACKENDS = {
    "local": "orchestrator.backends.local:LocalBackend",
    "slurm": "orchestrator.backends.slurm:SlurmBackend",
}
DEFAULT = "local"


class UnknownBackend(ConfigError):
    """A cluster config names an executor no backend implements (a sweep-wide bad value: the
    command ends with its message, config_checks.stop_on_bad_input)."""


def backend_name(cluster: Mapping[str, Any]) -> str:
    """The backend a cluster config names (`executor`, default local), checked here, beside the
    registry: a backend's own modules never read BACKENDS (that was the loop behind importlib,
    backends -> slurm -> sbatch -> backends)."""
    name = cluster.get("executor") or DEFAULT
    if name not in BACKENDS:
        error = refuse("cluster.executor", name, f"is not one of {', '.join(BACKENDS)}", f"use cluster.executor={DEFAULT}")
        raise UnknownBackend(str(error))
    return str(name)


def backend_for(cluster: Mapping[str, Any]) -> Backend:
    """The backend of a cluster config, configured by it."""
    return backend_class(backend_name(cluster))(dict(cluster))


def backend_class(name: str) -> type[Backend]:
    module, _, cls = BACKENDS[backend_name({"executor": name})].partition(":")
    return getattr(importlib.import_module(module), cls)


__all__ = ["Backend", "SchedulerUnavailable", "SchedulerView", "BACKENDS", "backend_for", "backend_class",
           "backend_name", "UnknownBackend"]
