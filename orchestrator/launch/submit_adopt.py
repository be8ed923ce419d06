"""Submissions killed mid-way: a run recorded and marked with its submission's name, whose job id
never reached the database, is adopted (the scheduler has a job under that name) or given up.

Before each submission its runs are marked `submitting as <name>[<index>/<size>] by <launcher>`
and committed; the job ids are committed right after the scheduler answers. A launcher killed
between the two leaves pending runs without a job id, which the next launch resolves here before
it plans anything, so that typing the sweep again never submits a run twice. A launcher still at
it (another launch at the same time, of any cells) is not killed: its runs are left to it.
"""
from __future__ import annotations

import functools
import os
import re
import socket
import time
from pathlib import Path
from typing import Optional

import psutil
from sqlalchemy.orm import Session

from orchestrator.store import launch_records, schema
from orchestrator import runstate
from orchestrator.backends import Backend, SchedulerUnavailable
from orchestrator.backends.base import Naming

#: A pending run's state_detail while its group is being handed to the executor.
SUBMITTING = "submitting as"
#: The whole mark, as submit writes it and adopt_interrupted reads it: name, index, size.
_MARK = re.compile(rf"{SUBMITTING} (\S+)\[(\d+)/(\d+)\](?: by (\S+))?")
#: A cancelled run's state_detail when its submission was given up (the name it went out under).
GIVEN_UP = "submission {name} interrupted before the job was handed over"
LANDED_LATE = "; its array {job} landed later and was cancelled"
#: A cancelled run's state_detail when it was recorded and never handed over (no mark).
NEVER_HANDED = "recorded, never handed to the scheduler"
#: A new run's state_detail until its submission marks it (or it runs here, in the foreground).
RECORDED = "recorded by"
#: The launcher a pending run's state_detail names (a mark's or RECORDED's last word).
_BY = re.compile(r" by (\S+)$")


def submitting(name: str, index: int, size: int) -> str:
    """The mark of a run about to go out as member `index` of `size` of submission `name`, by
    this launcher (`host:pid:start`): what tells a launch beside it that it is still at it."""
    return f"{SUBMITTING} {name}[{index}/{size}] by {_launcher(os.getpid())}"


def recorded_by() -> str:
    """A new run's state_detail: recorded by this launcher, which hands it over (or runs it) next."""
    return f"{RECORDED} {_launcher(os.getpid())}"


@functools.lru_cache(maxsize=1)
def _launcher(pid: int) -> str:
    """Process `pid` as `host:pid:start` (its start time tells a reused pid apart): asked once per
    launch, not once per run."""
    return f"{socket.gethostname()}:{pid}:{int(psutil.Process(pid).create_time())}"


def _at_it(launcher: Optional[str]) -> bool:
    """Whether the launcher a run's state_detail names may still be at it: alive on this host, or on
    another host (whose processes only a launch there can see). A mark without one (an older
    release's) or whose process is gone is not."""
    host, _, rest = (launcher or "").partition(":")
    if not rest:
        return False
    if host != socket.gethostname():
        return True
    pid, _, start = rest.partition(":")
    try:
        return int(psutil.Process(int(pid)).create_time()) == int(start)
    except (psutil.Error, ValueError):
        return False


def adopt_interrupted(session: Session, backend: Backend) -> None:
    """Runs left `pending` by a submission killed mid-way: adopt the job the scheduler has, or give up.

    The name recorded before `sbatch` is looked up in the scheduler; a job found under it is
    the run's job (task `index` of an array), so typing the sweep again does not submit it a
    second time, and its tasks take their pickles from the array's bundle (backends/slurm_task.py).
    A submission the scheduler does not have is given up: its runs are cancelled (and planned
    anew by the caller), its bundle of pickles removed so that an sbatch still on its way runs nothing,
    and an array that lands later anyway is cancelled here the next time, and recorded. While
    the scheduler does not answer, nothing is decided: the runs stay pending. A scheduler that
    finds nothing by name (backends.base.Naming) adopts nothing: its orphans are cancelled.
    """
    orphans = launch_records.unsubmitted(session)
    marked = {run.uid: (m.group(1), int(m.group(2))) for run in orphans
              for m in [_MARK.fullmatch(run.state_detail or "")] if m}
    given_up = _given_up(session)
    names = {name for name, _ in marked.values()} | set(given_up)
    try:
        found = _find(backend, names)
    except SchedulerUnavailable:
        return
    abandoned = _settle(orphans, marked, found, backend)
    for name, folder in abandoned.items():
        if isinstance(backend, Naming):
            backend.abandon(name, folder)
    session.commit()
    _cancel_late(session, backend, found, given_up, abandoned)
    session.commit()


def _find(backend: Backend, names: set[str]) -> dict[str, str]:
    """{name: job id} of the submissions the scheduler has under these names."""
    return backend.find(names) if names and isinstance(backend, Naming) else {}


def _settle(orphans: list[schema.Run], marked: dict[str, tuple[str, int]], found: dict[str, str],
            backend: Backend) -> dict[str, Path]:
    """Each orphan adopted (its submission found), left to the launcher its state_detail names
    (still at it: _at_it; a run recorded, marked or about to run in the foreground) or cancelled;
    the given-up submissions' folders, by name."""
    now = time.time()
    abandoned: dict[str, Path] = {}
    for run in orphans:
        name, index = marked.get(run.uid, (None, 0))
        if name not in found and _at_it(next(iter(_BY.findall(run.state_detail or "")), None)):
            continue
        if name in found:
            run.state, run.submitted_at = runstate.SUBMITTED, now
            run.job_id = backend.task_job_id(found[name], index)  # found: the backend is Naming
            run.state_detail = f"adopted from interrupted submission {name}"
            continue
        run.state = runstate.CANCELLED
        run.state_detail = GIVEN_UP.format(name=name) if name else NEVER_HANDED
        if name and run.run_dir:
            abandoned[name] = Path(run.run_dir).parents[1] / ".submitit"
    return abandoned


def _cancel_late(session: Session, backend: Backend, found: dict[str, str],
                 given_up: dict[str, list[schema.Run]], abandoned: dict[str, Path]) -> None:
    """An sbatch that was still on its way when we looked may land at any time: look once more
    for what was just given up, and cancel what landed (and what was given up before and has
    landed since), recorded on its runs."""
    late = {name: runs for name, runs in given_up.items() if name in found}
    if abandoned:
        try:
            again = _find(backend, set(abandoned))
        except SchedulerUnavailable:
            again = {}
        for name, job in again.items():
            found[name] = job
            late[name] = launch_records.cancelled_with_detail(session, GIVEN_UP.format(name=name))
    for name, runs in late.items():
        try:
            backend.cancel([found[name]])  # found: the backend is Naming
        except SchedulerUnavailable:
            continue
        for run in runs:
            run.state_detail += LANDED_LATE.format(job=found[name])


def _given_up(session: Session) -> dict[str, list[schema.Run]]:
    """Given-up submissions whose array has not (yet) been seen landing late, by name."""
    out: dict[str, list[schema.Run]] = {}
    prefix, _, suffix = GIVEN_UP.partition("{name}")
    for run in launch_records.cancelled_with_detail(session, prefix, suffix):
        out.setdefault(run.state_detail[len(prefix):-len(suffix)], []).append(run)
    return out


def is_unresolved(detail: Optional[str]) -> bool:
    """Whether a pending run without a job id carries a submission's mark (adopt_interrupted has
    not resolved it yet: its launcher is still at it, or the scheduler did not answer)."""
    return (detail or "").startswith((SUBMITTING, RECORDED))
