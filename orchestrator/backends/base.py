"""The interface every backend implements, and what it answers about a job.

A scheduler that does not answer is not a scheduler that says "gone": `observe` raises
SchedulerUnavailable when it could not ask at all, and leaves a job out of its answer when it
could not tell about that one job. Only `SchedulerView(phase="unknown")`, an answer, lets tracking
call a job lost (ReFrame's Slurm `poll` keeps job state likewise when sacct fails).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional


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


class Backend:
    """One scheduler: build, submit, observe, find and cancel its jobs."""

    #: The name a cluster config gives it (`executor:`) and runs record.
    name = ""
    #: How long after submission a job the scheduler does not know is not yet called lost.
    grace_s = 0.0
    #: Whether it can hold a job until others end (`follow_up`): what `retry.timeout` needs.
    follows = False

    def __init__(self, cluster: dict[str, Any]) -> None:
        self.cluster = cluster
        #: Polls in a row that got no answer (reset by one that did), as ReFrame counts them.
        self.failures = 0
        self.last_error = ""

    # --- submitting ---------------------------------------------------------------------
    def executor(self, folder: Path) -> Any:
        """The submitit executor writing its scripts and logs under folder."""
        raise NotImplementedError

    def resources(self, config: dict[str, Any]) -> dict[str, Any]:
        """What a cell (its resolved config) asks of the scheduler: submitit parameters."""
        return {}

    def refuse(self, config: dict[str, Any]) -> Optional[str]:
        """Why the scheduler can never place the request of a cell (its resolved config), or None.

        Asked before a submission, so that a request no node holds is refused with its reason
        instead of waiting in a queue forever. Raises SchedulerUnavailable when the scheduler
        could not be asked: the caller then submits unchecked (silence refuses nothing).
        """
        return None

    def max_time_min(self, config: dict[str, Any]) -> Optional[int]:
        """The longest time limit (minutes) a cell's partition allows (Slurm's MaxTime); None where
        unlimited or not known (a scheduler that did not answer caps nothing)."""
        return None

    def array_limit(self) -> Optional[int]:
        """The most jobs one submission may hold (Slurm's MaxArraySize); None: no limit."""
        return None

    def node_lock(self, cache: Path) -> Optional[str]:
        """A file a job locks to have the node to itself, where the scheduler cannot give that."""
        return None

    def submit(self, executor: Any, fn: Callable[..., Any], specs: list[Any], params: dict[str, Any],
               name: str) -> list[str]:
        """Submits fn(spec) for every spec with one resource request; returns the job ids.

        `name` becomes the job name, so a submission interrupted between the scheduler's
        answer and the DB commit can be found again (`find`) instead of submitted twice.
        """
        if params:
            executor.update_parameters(**params)
        with executor.batch():
            jobs = [executor.submit(fn, spec) for spec in specs]
        return [str(job.job_id) for job in jobs]

    def follow_up(self, executor: Any, fn: Callable[..., Any], spec: Any, after: list[str],
                  partition: Optional[str], name: str, time_min: int, mem_mb: int) -> str:
        """Submits fn(spec) as a small job (one CPU, not exclusive, `time_min` minutes, `mem_mb`)
        that starts once every job in `after` has ended, however it ended; returns its job id
        (orchestrator/launch/retry.py)."""
        raise NotImplementedError(f"the {self.name} backend cannot hold a job until others end")

    # --- following ----------------------------------------------------------------------
    def observe(self, job_ids: Iterable[str]) -> dict[str, SchedulerView]:
        """What the scheduler says of each job; a job it could not tell about is left out.

        Raises SchedulerUnavailable when it could not be asked at all.
        """
        raise NotImplementedError

    def find(self, names: Iterable[str]) -> dict[str, str]:
        """{name: job id} of submissions made under these names (an array's base id)."""
        return {}

    def cancel(self, job_ids: Iterable[str]) -> None:
        """Cancels these jobs (array tasks, or whole arrays by their base id)."""

    def task_job_id(self, found: str, index: int) -> str:
        """The job id of member `index` of a submission `find` returned as `found`."""
        return found

    def abandon(self, name: str, folder: Path) -> None:
        """Makes a submission given up on (its runs submitted again) run nothing if it still lands."""

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


def signature(params: dict[str, Any]) -> str:
    """A stable text key of a resource request: cells with equal keys share one submission."""
    return json.dumps(params, sort_keys=True, default=str)
