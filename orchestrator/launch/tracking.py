"""Tracking: what became of the runs the DB has not yet collected.

Any later shell calls `reconcile`: for each open, uncollected run it reads what the job left
in its run directory (`look`: a result file that passes the collector's own check, a broken
one, or `job.json`), asks the run's backend about all of a poll's jobs at once, and `decide`s
— a pure function of those two pieces of evidence — the run's next state:

- a result file that passes the check and says done: done (a measurement is a measurement);
- the scheduler says the job waits (also: requeued) or runs: submitted / running, whatever
  the run directory holds from an earlier attempt of the job;
- the scheduler ended it from outside (cancelled, timeout, node failure, preemption): that
  class, even where the job's own file says its trainer died of a signal;
- it ended on its own: the result file's word; broken if the file fails the check; lost if
  there is none;
- the scheduler answered and does not know the job (after `grace_s`): the same as ended;
- the scheduler did not answer: nothing changes, and the report says so. A job is never
  called lost by silence.

The collector, not this module, lands results and their metrics.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from orchestrator.store import queries
from orchestrator import runstate
from orchestrator.backends import Backend, SchedulerView, UnknownBackend, backend_class
from orchestrator.results.resultfile import RESULT_NAME, BadResult, inside, read_regular, read_result
from orchestrator.store.sql_adapters import Rows
from trainers.common import failure_classes as fc


@dataclass
class Evidence:
    """What a run directory holds."""

    result: Optional[dict[str, Any]] = None  # a result file that passes collect's check
    broken: Optional[str] = None             # why a present result file fails that check
    started: Optional[dict[str, Any]] = None  # job.json: the job began on a node


#: The most a job's job.json (a few fields: its node, its start) may hold.
JOB_JSON_BYTES = 64 * 1024


def evidence_in(run_dir: Optional[str]) -> Evidence:
    """The evidence in a run directory (none for a run without one)."""
    if not run_dir:
        return Evidence()
    evidence = Evidence()
    # os.path, not pathlib: `status` looks into every open run's directory (1,000 of them: 25 ms less)
    result = os.path.join(run_dir, RESULT_NAME)
    if os.path.exists(result):
        try:
            evidence.result = read_result(Path(result))
        except BadResult as exc:
            evidence.broken = str(exc)
        except Exception as exc:  # noqa: BLE001 - a hostile file is a broken one, never a crash
            evidence.broken = f"{type(exc).__name__}: {exc}"
    try:  # a regular file only: the run directory is the database's word (read_regular says why)
        started = json.loads(read_regular(os.path.join(run_dir, "job.json"), JOB_JSON_BYTES))
        evidence.started = started if isinstance(started, dict) else None
    except (OSError, ValueError, RecursionError, BadResult):
        pass
    return evidence


def result_of_this_start(evidence: Evidence) -> Optional[dict[str, Any]]:
    """The result file, unless the job started this run again after writing it (a requeued
    job rewrites job.json when it restarts): then it is an earlier incarnation's word."""
    result, started = evidence.result, evidence.started or {}
    if result is None:
        return None
    begun, wrote = started.get("started_at"), result.get("started_at")
    if isinstance(begun, (int, float)) and isinstance(wrote, (int, float)) and begun > wrote:
        return None
    return result


def _from_result(result: dict[str, Any]) -> dict[str, Any]:
    error = result.get("error") or {}
    return {"state": result["state"], "state_detail": None, "node": result.get("node"),
            "started_at": result.get("started_at"), "ended_at": result.get("ended_at"),
            "error_class": error.get("class"), "error_message": error.get("message"),
            "log_path": (result.get("paths") or {}).get("stderr")}


#: How a waiting run's state_detail says its job can never start (the queued verdict below).
NEVER = ": can never start: "


def decide(evidence: Evidence, seen: Optional[SchedulerView], *, job_id: Optional[str], backend: str,
           submitted_at: Optional[float], now: float, grace_s: float, logs: str = "its log",
           previous: Optional[str] = None) -> Optional[dict[str, Any]]:
    """A run's new fields from its directory's evidence and its scheduler's word, or None.

    `previous` is the run's state_detail so far: a job this poll finds cancelled that an earlier
    poll found unable ever to start is `unplaceable` (rerunnable), whatever accounting kept of why.

    `seen` None means the scheduler gave no answer about this job (or the run has no job).
    """
    if evidence.result is not None and evidence.result["state"] == runstate.DONE:
        return _from_result(evidence.result)
    if seen is None:  # no answer about its job: left as it was; no job: the directory is all there is
        return None if job_id is not None else _without_scheduler(evidence, now)
    if seen.phase in ("queued", "running"):
        return _live(evidence, seen)
    if seen.phase == "unknown" and now - (submitted_at or 0.0) < grace_s:
        return None  # just submitted: the scheduler may not list it yet
    if (seen.phase == "ended" and seen.error_class == fc.CANCELLED and evidence.result is None
            and NEVER in (previous or "")):
        return {"state": runstate.FAILED, "state_detail": seen.state, "error_class": fc.UNPLACEABLE,
                "error_message": f"{backend} job {job_id} was cancelled while it waited; it could never "
                                 f"start: {previous.split(NEVER, 1)[1]}", "ended_at": now}
    if seen.phase == "ended" and seen.imposed:
        own = evidence.result.get("error") if evidence.result else None
        said = f" (the job's own record: {own.get('class')}: {own.get('message')})" if own else ""
        state = _state_of(seen.error_class)
        detail = f" ({seen.detail})" if seen.detail else ""
        return {"state": state, "state_detail": seen.state, "error_class": seen.error_class,
                "error_message": f"{backend} ended job {job_id} as {seen.state}{detail}{said}; see {logs}",
                "ended_at": now}
    if evidence.result is not None:
        return _from_result(evidence.result)
    if evidence.broken is not None:
        return _broken(evidence.broken, now)
    if seen.phase == "ended" and seen.error_class:
        state = _state_of(seen.error_class)
        detail = f" ({seen.detail})" if seen.detail else ""
        return {"state": state, "state_detail": seen.state, "error_class": seen.error_class,
                "error_message": f"{backend} ended job {job_id} as {seen.state}{detail} before it wrote "
                                 f"a result; see {logs}", "ended_at": now}
    says = f" ({backend} reports {seen.state})" if seen.state else f" ({backend} no longer knows it)"
    return {"state": runstate.LOST, "state_detail": seen.state or None, "error_class": fc.LOST,
            "error_message": f"job {job_id} ended without writing {RESULT_NAME}{says}; see {logs}",
            "ended_at": now}


def _without_scheduler(evidence: Evidence, now: float) -> Optional[dict[str, Any]]:
    """A run with no scheduler to ask (a foreground run), from its directory alone."""
    if evidence.result is not None:
        return _from_result(evidence.result)
    if evidence.broken is not None:
        return _broken(evidence.broken, now)
    if evidence.started is not None:
        return {"state": runstate.RUNNING, "node": evidence.started.get("node"),
                "started_at": evidence.started.get("started_at")}
    return None


def _live(evidence: Evidence, seen: SchedulerView) -> dict[str, Any]:
    """A run whose job the scheduler still holds (queued or running)."""
    if seen.phase == "queued":
        reason = f" ({seen.detail})" if seen.detail else ""
        never = f"{NEVER}{seen.never}" if seen.never else ""
        return {"state": runstate.SUBMITTED, "state_detail": f"{seen.state}{reason}{never}"}
    ended = result_of_this_start(evidence)
    if ended is not None and (ended.get("error") or {}).get("class") != fc.SIGNALLED:
        return _from_result(ended)  # this run ended; the job runs its next repeat
    # (a trainer ended by a signal while Slurm still holds the job: wait for Slurm's word)
    started = evidence.started or {}
    return {"state": runstate.RUNNING, "state_detail": seen.state,
            "node": started.get("node") or seen.detail, "started_at": started.get("started_at")}


def _state_of(error_class: str) -> str:
    """The state of a run its scheduler ended with `error_class`: cancelled, else failed."""
    return runstate.CANCELLED if error_class == fc.CANCELLED else runstate.FAILED


def _broken(reason: str, now: float) -> dict[str, Any]:
    return {"state": runstate.FAILED, "state_detail": None, "error_class": fc.BROKEN_RESULT,
            "error_message": f"{RESULT_NAME} is present but broken: {reason}", "ended_at": now}


@dataclass
class Reconciled:
    """What one reconciliation did: runs changed, and the schedulers that did not answer."""

    changed: int = 0
    #: backend name -> what went wrong, for backends whose poll got no answer
    silent: dict[str, str] = field(default_factory=dict)
    #: backend name -> what failed, for backends that answered about some jobs only
    partial: dict[str, str] = field(default_factory=dict)
    #: backend name -> open runs left as they were because it did not answer about them
    kept: dict[str, int] = field(default_factory=dict)
    #: backend name -> when it last answered about a run it now kept silent on
    as_of: dict[str, float] = field(default_factory=dict)
    #: the runs folder of the command (None: any run directory is read), and the open runs whose
    #: recorded directory is not under it: left as they were, their files not read
    runs: Optional[str] = None
    outside: int = 0
    #: the folders of run directories resolved so far, in this reconciliation (resultfile.realpath_via)
    folders: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def reads(self, run_dir: Optional[str]) -> bool:
        """Whether `run_dir` (the database's word) resolves under the command's runs folder."""
        if self.runs is None or not run_dir:
            return True
        return inside(self.runs, run_dir, self.folders)

    def _as_of(self, name: str) -> str:
        when = self.as_of.get(name)
        return f"states as of {time.strftime('%H:%M', time.localtime(when))}" if when else "states as last seen"

    def messages(self) -> list[str]:
        out = []
        for name, error in sorted(self.silent.items()):
            out.append(f"{name} did not answer ({error}): {self._as_of(name)} for {self.kept.get(name, 0)} "
                       f"open run(s); nothing is marked lost or offered for rerun until it answers")
        for name, error in sorted(self.partial.items()):
            out.append(f"{name} answered in part ({error}): {self._as_of(name)} for the "
                       f"{self.kept.get(name, 0)} open run(s) it could not tell about")
        if self.outside:
            out.append(f"{self.outside} open run(s) recorded with a run directory outside {self.runs} (another "
                       f"user's runs folder, or a row no sweep wrote) left as they were: --runs DIR reads theirs")
        return out


#: The columns of an open run that reconcile reads (and `_changed` compares).
_OPEN_RUN = ("id", "sweep_id", "cell_id", "executor", "job_id", "run_dir", "submitted_at", "observed_at",
             "state", "state_detail", "node", "started_at", "ended_at", "error_class", "error_message", "log_path")


def reconcile(rows: Rows, sweep_id: Optional[str] = None,
              backends: Optional[dict[str, Backend]] = None, runs: Optional[str] = None) -> Reconciled:
    """Brings every open, uncollected run up to date; commits. `backends` (name -> instance)
    lets a caller that polls repeatedly keep the count of polls in a row without an answer.
    `runs`: only runs whose recorded directory is under it are read (the others are counted).

    SQL text (orchestrator.store.queries) over `rows` (orchestrator.store.sql_adapters): `status` reconciles every open run each time it is
    typed, without importing SQLAlchemy. The open runs are read as rows and only what changed is
    written, one executemany per set of columns. Between the read and the write the database is
    let go (a commit: on a network file system that ends this host's turn of the lease), so that
    the schedulers' polls (sacct, squeue: up to 30 s each) and the run directories' files keep
    no other command waiting; the write then changes only runs still as they were read."""
    backends = {} if backends is None else backends
    report = Reconciled(runs=runs)
    by_backend: dict[str, list[Any]] = {}
    for run in queries.open_runs(rows, _OPEN_RUN, sweep_id):
        by_backend.setdefault(run.executor if run.job_id else "", []).append(run)
    clusters = {name: _cluster_config(rows, runs[0]) for name, runs in by_backend.items() if name}
    rows.commit()  # nothing held while the schedulers answer
    now = time.time()
    changes: dict[tuple[str, ...], list[dict[str, Any]]] = {}  # the columns set -> each run's values
    for name, runs in by_backend.items():
        backend = _backend(backends, name, clusters.get(name)) if name else None
        answers = _poll(backend, name, runs, report)
        for run in runs:
            values = _verdict(run, name, backend, answers, now, report)
            if values:
                changes.setdefault(tuple(sorted(values)), []).append(
                    {"b_id": run.id, "b_state": run.state, **values})
    for columns, values in changes.items():  # counted as written: a run changed since is left alone
        written = queries.update_runs(rows, columns, values)
        report.changed += written if set(columns) != {"observed_at"} else 0
    rows.commit()
    return report


def _backend(backends: dict[str, Backend], name: str, cluster: Optional[dict[str, Any]]) -> Optional[Backend]:
    """The backend of that name, made once per caller; None for one this release does not know."""
    try:
        return backends.get(name) or backends.setdefault(name, backend_class(name)(cluster or {}))
    except UnknownBackend:
        return None


def _poll(backend: Optional[Backend], name: str, runs: list[Any], report: Reconciled) -> Optional[dict[str, Any]]:
    """The backend's word on the runs' jobs (None: no answer, said in the report)."""
    if backend is None:
        return None
    answers = backend.poll({r.job_id for r in runs})
    if answers is None:
        report.silent[name] = f"{backend.last_error}; {backend.failures} poll(s) in a row"
        report.kept[name] = len(runs)
    elif backend.last_error:
        report.partial[name] = backend.last_error
        report.kept[name] = sum(1 for r in runs if r.job_id not in answers)
    return answers


def _verdict(run: Any, name: str, backend: Optional[Backend], answers: Optional[dict[str, Any]], now: float,
             report: Reconciled) -> dict[str, Any]:
    """What changes of one run, from its directory and its scheduler's word (nothing, counted,
    for a run whose recorded directory is not under the command's runs folder)."""
    if not report.reads(run.run_dir):
        report.outside += 1
        return {}
    logs = (f"{os.path.dirname(os.path.dirname(run.run_dir))}/.submitit" if run.run_dir
            else "the .submitit folder")
    seen = (answers or {}).get(run.job_id) if name else None
    values = {"observed_at": now} if seen is not None else {}
    if seen is None and name and run.observed_at:
        report.as_of[name] = max(report.as_of.get(name, 0.0), run.observed_at)
    verdict = decide(evidence_in(run.run_dir), seen,
                    job_id=run.job_id if name else None, backend=name or "job", now=now,
                    submitted_at=run.submitted_at, grace_s=backend.grace_s if backend else 0.0,
                    logs=f"its log under {logs}", previous=run.state_detail)
    values.update(_changed(run, verdict or {}))
    return values


def _cluster_config(rows: Rows, run: Any) -> dict[str, Any]:
    """The cluster config the run's sweep recorded (a later shell has no other), or none."""
    config = queries.recorded_config(rows, run.sweep_id, run.cell_id)
    cluster = config.get("cluster") if isinstance(config, dict) else None
    return dict(cluster) if isinstance(cluster, dict) else {}


def _changed(run: Any, update: dict[str, Any]) -> dict[str, Any]:
    """The values of `update` that change the run (a None changes nothing but state_detail)."""
    return {key: value for key, value in update.items()
            if (value is not None or key == "state_detail") and getattr(run, key) != value}
