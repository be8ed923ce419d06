"""Tracking: what became of runs the DB has not yet collected, read from where they ran.

Any later shell can call `reconcile`: for each uncollected run it looks at what the job left in
the run directory (`result.json` → done or failed; `job.json` → running) and asks the executor's
tracker about the rest, all of a poll's job ids in one call. A job that is gone and left no
result ends as `lost` (or with the failure class its scheduler gives), never stays `running`
forever. The collector, not this module, ingests results and their metrics.

Trackers answer `observe(job_ids) -> {job_id: Seen}`: the local one checks the controller
process; the Slurm one asks `sacct` (one batched call), with `squeue` for pending reasons and as
the fallback where accounting is off.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import psutil
from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator import db

OPEN_STATES = ("pending", "submitted", "running")
#: A job the scheduler does not know yet (accounting lags submission) is not lost before this.
GRACE_S = 120.0


@dataclass
class Seen:
    """What a scheduler says of one job: `queued`, `running`, `ended` or `unknown` (forgotten)."""

    phase: str
    state: str = ""             # the scheduler's own word (PENDING, TIMEOUT, ...)
    detail: Optional[str] = None  # e.g. squeue's pending reason, the node
    error_class: Optional[str] = None  # for an end without a result file


class LocalTracker:
    """Local jobs are submitit controller processes; the job id is the controller's pid."""

    def observe(self, job_ids: Iterable[str]) -> dict[str, Seen]:
        out = {}
        for job_id in job_ids:
            try:
                proc = psutil.Process(int(job_id))
                alive = (proc.status() != psutil.STATUS_ZOMBIE
                         and any("submitit" in part for part in proc.cmdline()))
            except (ValueError, psutil.Error):
                alive = False
            # a local job id is a pid on this machine: once it is gone, the job has ended
            out[job_id] = Seen("running", "RUNNING") if alive else Seen("ended", "", None, "lost")
        return out

    def find(self, names: Iterable[str]) -> dict[str, str]:
        return {}  # a local controller carries no name; an interrupted local submission is cancelled


#: Slurm's job states → (phase, failure class of a job that ended without a result file).
SLURM_STATES = {
    "PENDING": ("queued", None), "CONFIGURING": ("queued", None), "REQUEUED": ("queued", None),
    "REQUEUE_FED": ("queued", None), "REQUEUE_HOLD": ("queued", None), "RESV_DEL_HOLD": ("queued", None),
    "SUSPENDED": ("running", None), "RUNNING": ("running", None), "COMPLETING": ("running", None),
    "STAGE_OUT": ("running", None), "SIGNALING": ("running", None), "RESIZING": ("running", None),
    "COMPLETED": ("ended", "lost"), "FAILED": ("ended", "crash"), "TIMEOUT": ("ended", "timeout"),
    "DEADLINE": ("ended", "timeout"), "CANCELLED": ("ended", "cancelled"),
    "OUT_OF_MEMORY": ("ended", "out_of_memory"), "NODE_FAIL": ("ended", "node_fail"),
    "BOOT_FAIL": ("ended", "node_fail"), "PREEMPTED": ("ended", "preempted"),
    "REVOKED": ("ended", "cancelled"), "SPECIAL_EXIT": ("ended", "crash"),
}


def _run(argv: list[str]) -> Optional[str]:
    """A Slurm command's stdout, or None where it fails (accounting off, daemon down)."""
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _array_base(job_id: str) -> str:
    """`123` of an array task `123_4` or a pending range `123_[4-9%2]`; a plain id as it is."""
    return job_id.split("_", 1)[0]


class SlurmTracker:
    """One `sacct` call per poll for every open job; `squeue` for pending reasons and as fallback."""

    def observe(self, job_ids: Iterable[str]) -> dict[str, Seen]:
        wanted = sorted(set(job_ids))
        if not wanted:
            return {}
        seen: dict[str, Seen] = {}
        bases = sorted({_array_base(j) for j in wanted})
        # -X: allocations only (not steps); array tasks come one per line once they started,
        # a still-pending array as one `123_[4-9%2]` line.
        out = _run(["sacct", "-X", "-n", "-P", "--format=JobID,State,NodeList,ExitCode",
                     "-j", ",".join(bases)])
        pending_arrays: dict[str, Seen] = {}
        known_bases: set[str] = set()
        for line in (out or "").splitlines():
            parts = line.split("|")
            if len(parts) < 3:
                continue
            job, state, node = parts[0], parts[1].split()[0] if parts[1] else "", parts[2]
            phase, klass = SLURM_STATES.get(state, ("unknown", None))
            record = Seen(phase, state, node if phase != "queued" and node not in ("", "None assigned") else None, klass)
            known_bases.add(_array_base(job))
            if "_[" in job:
                pending_arrays[_array_base(job)] = record
            else:
                seen[job] = record
        for job_id in wanted:
            if job_id not in seen and _array_base(job_id) in pending_arrays and "_" in job_id:
                seen[job_id] = pending_arrays[_array_base(job_id)]
        # squeue: the reason a job waits (sacct has none), and every job sacct did not list
        # (accounting off or lagging).
        need = [j for j in wanted if j not in seen or seen[j].phase == "queued"]
        if need:
            queue = _run(["squeue", "-h", "-r", "-o", "%i|%T|%r|%N",
                          "-j", ",".join(sorted({_array_base(j) for j in need}))])
            listed = set()
            for line in (queue or "").splitlines():
                parts = line.split("|")
                if len(parts) >= 4:
                    known_bases.add(_array_base(parts[0]))
                if len(parts) < 4 or parts[0] not in need:
                    continue
                listed.add(parts[0])
                phase, klass = SLURM_STATES.get(parts[1], ("unknown", None))
                detail = parts[2] if phase == "queued" else (parts[3] or None)
                seen[parts[0]] = Seen(phase, parts[1], detail, klass)
            if queue is not None:
                # sacct keeps a not-yet-started array's tasks as one PENDING range even after
                # one of them is cancelled (and lags a fresh submission); the queue is the
                # authority on what still waits: a task of a known array that it no longer
                # lists, with no record of its own, left without starting.
                for job_id in need:
                    queued = seen[job_id].phase == "queued" if job_id in seen else "_" in job_id \
                        and _array_base(job_id) in known_bases
                    if job_id not in listed and queued:
                        seen[job_id] = Seen("ended", "CANCELLED", "left the queue before it started",
                                            "cancelled")
        for job_id in wanted:
            seen.setdefault(job_id, Seen("unknown", "UNKNOWN"))
        return seen

    def find(self, names: Iterable[str]) -> dict[str, str]:
        """Job ids (the array's base id) of jobs submitted under these names."""
        names = sorted(set(names))
        if not names:
            return {}
        found: dict[str, str] = {}
        out = _run(["sacct", "-X", "-n", "-P", "--format=JobID,JobName", "-S", "now-30days",
                    "--name", ",".join(names)])
        queue = _run(["squeue", "-h", "-o", "%i|%j", "--name", ",".join(names)])
        for line in (out or "").splitlines() + (queue or "").splitlines():
            parts = line.split("|")
            if len(parts) >= 2 and parts[1] in names:
                found.setdefault(parts[1], _array_base(parts[0]))
        return found


TRACKERS = {"local": LocalTracker, "slurm": SlurmTracker}


def find_jobs_by_name(cluster: dict, names: Iterable[str]) -> dict[str, str]:
    """The scheduler's job ids of submissions made under these names (see launch.adopt_interrupted)."""
    tracker = TRACKERS.get(cluster.get("executor", "local"))
    if tracker is None or (tracker is SlurmTracker and shutil.which("sacct") is None):
        return {}
    return tracker().find(names)


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _observe(run: db.Run) -> dict | None:
    """What the run directory says: the result's state, or running, or nothing yet."""
    if not run.run_dir:
        return None
    run_dir = Path(run.run_dir)
    result = _read_json(run_dir / "result.json")
    if result and result.get("state") in ("done", "failed"):
        error = result.get("error") or {}
        return {"state": result["state"], "node": result.get("node"),
                "started_at": result.get("started_at"), "ended_at": result.get("ended_at"),
                "error_class": error.get("class"), "error_message": error.get("message"),
                "log_path": (result.get("paths") or {}).get("stderr")}
    started = _read_json(run_dir / "job.json")
    if started:
        return {"state": "running", "node": started.get("node"), "started_at": started.get("started_at")}
    return None


def reconcile(session: Session, sweep_id: str | None = None) -> int:
    """Updates the state of every uncollected open run; returns how many changed."""
    query = select(db.Run).where(db.Run.collected_at.is_(None), db.Run.state.in_(OPEN_STATES))
    if sweep_id:
        query = query.where(db.Run.sweep_id == sweep_id)
    runs = session.scalars(query).all()
    changed = 0
    unresolved: dict[str, list[db.Run]] = {}
    for run in runs:
        seen = _observe(run)
        if seen:
            changed += _apply(run, seen)
            if seen["state"] != "running":
                continue
        if run.job_id and run.executor in TRACKERS:
            unresolved.setdefault(run.executor, []).append(run)
    now = time.time()
    for executor, pending in unresolved.items():
        verdicts = TRACKERS[executor]().observe({r.job_id for r in pending})
        for run in pending:
            verdict = verdicts.get(run.job_id, Seen("unknown"))
            if verdict.phase == "queued":
                reason = f" ({verdict.detail})" if verdict.detail and verdict.detail != "None" else ""
                changed += _apply(run, {"state": "submitted", "state_detail": f"{verdict.state}{reason}"})
                continue
            if verdict.phase == "running":
                changed += _apply(run, {"state": "running", "state_detail": verdict.state,
                                        "node": run.node or verdict.detail})
                continue
            if verdict.phase == "unknown" and now - (run.submitted_at or 0) < GRACE_S:
                continue  # just submitted: accounting may not list it yet
            seen = _observe(run)  # it may have finished between the two looks
            if seen and seen["state"] != "running":
                changed += _apply(run, seen)
                continue
            logs = f"{Path(run.run_dir).parent.parent}/.submitit" if run.run_dir else "the .submitit folder"
            if verdict.phase == "ended" and verdict.error_class not in (None, "lost"):
                changed += _apply(run, {
                    "state": "failed", "state_detail": verdict.state, "error_class": verdict.error_class,
                    "error_message": f"{executor} ended job {run.job_id} as {verdict.state} before it "
                                     f"wrote a result; see its log under {logs}",
                    "ended_at": now})
            else:
                changed += _apply(run, {
                    "state": "lost", "state_detail": verdict.state or None, "error_class": "lost",
                    "error_message": f"job {run.job_id} ended without writing {run.run_dir}/result.json"
                                     f"{' (' + executor + ' reports ' + verdict.state + ')' if verdict.state else ''}; "
                                     f"see its log under {logs}",
                    "ended_at": now})
    session.commit()
    return changed


def _apply(run: db.Run, seen: dict) -> int:
    changed = 0
    for key, value in seen.items():
        if value is not None and getattr(run, key) != value:
            setattr(run, key, value)
            changed = 1
    return changed
