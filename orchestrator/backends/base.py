"""The interface every backend implements (what every scheduler must do), the capabilities only
some schedulers have, and what a scheduler answers about a job.

A scheduler that does not answer is not a scheduler that says "gone": `observe` raises
SchedulerUnavailable when it could not ask at all, and leaves a job out of its answer when it
could not tell about that one job. Only `SchedulerView(phase="unknown")`, an answer, lets tracking
call a job lost (ReFrame's Slurm `poll` keeps job state likewise when sacct fails).
"""
from __future__ import annotations

import abc
import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Optional, Protocol, runtime_checkable


@dataclass(frozen=True)
class SchedulerView:
    """What a scheduler says of one job.

    phase: `queued` (waiting, or requeued), `running`, `ended`, or `unknown` (the scheduler
    answered and does not know the job). `state` is the scheduler's own word (PENDING,
    NODE_FAIL ...), `detail` its reason or node, `error_class` the failure class of a job that
    ended without a result file (None where its end says nothing: COMPLETED). `imposed`: the
    scheduler ended the job from outside (cancelled, timed out, node failed, preempted), so its
    word beats the job's own result file, which at best says the trainer got a signal.
    `never`: why a waiting job can never start (its request is beyond every node, or every
    node of its partition is down), so that `status` says so instead of "pending".
    """

    phase: str
    state: str = ""
    detail: Optional[str] = None
    error_class: Optional[str] = None
    imposed: bool = False
    never: Optional[str] = None


class SchedulerUnavailable(RuntimeError):
    """The scheduler could not be asked (daemon down, command timed out): nothing is known."""


class Backend(abc.ABC):
    """What every scheduler must do: build the submitit executor its jobs go out through, and
    say what became of them. Nothing else: what only some schedulers can do (place a request,
    find a submission by name, hold a job until others end, lock a node) is a capability below,
    which a backend has by having its methods, and which the launch asks for through the plain
    functions here that answer for a backend without it."""

    #: The name a cluster config gives it (`executor:`) and runs record.
    name = ""
    #: How long after submission a job the scheduler does not know is not yet called lost.
    grace_s = 0.0

    def __init__(self, cluster: dict[str, Any]) -> None:
        self.cluster = cluster
        #: Polls in a row that got no answer (reset by one that did), as ReFrame counts them.
        self.failures = 0
        self.last_error = ""

    @abc.abstractmethod
    def executor(self, folder: Path) -> Any:
        """The submitit executor writing its scripts and logs under folder."""

    @abc.abstractmethod
    def observe(self, job_ids: Iterable[str]) -> dict[str, SchedulerView]:
        """What the scheduler says of each job; a job it could not tell about is left out.

        Raises SchedulerUnavailable when it could not be asked at all.
        """

    def poll(self, job_ids: Iterable[str]) -> Optional[dict[str, SchedulerView]]:
        """`observe`, counting polls without an answer; None when the scheduler did not answer.

        `last_error` says what failed: the whole poll (None returned), or a part of it that the
        backend could do without (an answer about fewer jobs)."""
        self.last_error = ""
        try:
            seen = self.observe(job_ids)
        except SchedulerUnavailable as exc:
            self.failures += 1
            self.last_error = str(exc)
            return None
        self.failures = 0
        return seen


@runtime_checkable
class Placing(Protocol):
    """A scheduler that places requests: a cell's request (`request`: hashable, equal for cells that
    ask the same), its submitit parameters (`resources`), why it can never be placed (`refuse`:
    asked once per request before submission, raises SchedulerUnavailable where it could not be
    asked, so the caller submits unchecked), its partition's longest time limit and the most jobs
    one submission may hold."""

    def request(self, config: dict[str, Any]) -> Hashable: ...

    def resources(self, config: dict[str, Any]) -> dict[str, Any]: ...

    def refuse(self, config: dict[str, Any]) -> Optional[str]: ...

    def max_time_min(self, config: dict[str, Any]) -> Optional[int]: ...

    def array_limit(self) -> Optional[int]: ...


@runtime_checkable
class Naming(Protocol):
    """A scheduler whose submissions are found again by name: a submission interrupted between
    the scheduler's answer and the database's commit is adopted (`find`, `task_job_id`) instead
    of submitted twice, or given up (`abandon`) and, landing late, cancelled."""

    def submit_named(self, executor: Any, fn: Callable[..., Any], specs: list[Any], params: dict[str, Any],
                     name: str) -> list[str]: ...

    def find(self, names: Iterable[str]) -> dict[str, str]: ...

    def task_job_id(self, found: str, index: int) -> str: ...

    def abandon(self, name: str, folder: Path) -> None: ...

    def cancel(self, job_ids: Iterable[str]) -> None: ...


@runtime_checkable
class FollowingUp(Protocol):
    """A scheduler that holds a small job until others end, however they ended (retry.timeout)."""

    def follow_up(self, executor: Any, fn: Callable[..., Any], spec: Any, after: list[str],
                  partition: Optional[str], name: str, time_min: int, mem_mb: int) -> str: ...


@runtime_checkable
class Locking(Protocol):
    """A scheduler that cannot give a job a node to itself: the job locks a file instead."""

    def node_lock(self, cache: Path) -> Optional[str]: ...


@functools.lru_cache(maxsize=None)
def _has(kind: type, capability: type) -> bool:
    """Whether a backend class has a capability: asked once per class, not once per cell (a
    runtime protocol check reads every method's name; a sweep asks 20,000 times)."""
    return issubclass(kind, capability)


def submit_batch(executor: Any, fn: Callable[..., Any], specs: list[Any], params: dict[str, Any]) -> list[str]:
    """Submits fn(spec) for every spec with one resource request (submitit's batch); the job ids."""
    if params:
        executor.update_parameters(**params)
    with executor.batch():
        jobs = [executor.submit(fn, spec) for spec in specs]
    return [str(job.job_id) for job in jobs]


def submit(backend: Backend, executor: Any, fn: Callable[..., Any], specs: list[Any], params: dict[str, Any],
           name: str) -> list[str]:
    """One submission: under `name` where the scheduler finds submissions by name (Naming)."""
    if _has(type(backend), Naming):
        return backend.submit_named(executor, fn, specs, params, name)
    return submit_batch(executor, fn, specs, params)


def request(backend: Backend, config: dict[str, Any]) -> Hashable:
    """A cell's request, hashable: cells with equal ones get equal `resources`, so a launch derives
    and checks those once per request, not per cell; None where the scheduler places nothing."""
    return backend.request(config) if _has(type(backend), Placing) else None


def resources(backend: Backend, config: dict[str, Any]) -> dict[str, Any]:
    """A cell's request as submitit parameters; none where the scheduler places nothing."""
    return backend.resources(config) if _has(type(backend), Placing) else {}


def refusal(backend: Backend, config: dict[str, Any]) -> Optional[str]:
    """Why the scheduler can never place a cell's request; None where it places nothing."""
    return backend.refuse(config) if _has(type(backend), Placing) else None


def max_time_min(backend: Backend, config: dict[str, Any]) -> Optional[int]:
    """The longest time limit (minutes) a cell's partition allows; None: unlimited or not known."""
    return backend.max_time_min(config) if _has(type(backend), Placing) else None


def array_limit(backend: Backend) -> Optional[int]:
    """The most jobs one submission may hold; None: no limit."""
    return backend.array_limit() if _has(type(backend), Placing) else None


def node_lock(backend: Backend, cache: Path) -> Optional[str]:
    """A file a job locks to have the node to itself, where the scheduler cannot give that."""
    return backend.node_lock(cache) if _has(type(backend), Locking) else None


def signature(params: dict[str, Any]) -> str:
    """A stable text key of a resource request: cells with equal keys share one submission."""
    return json.dumps(params, sort_keys=True, default=str)
