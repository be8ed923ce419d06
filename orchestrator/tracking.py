"""Tracking: what became of runs the DB has not yet collected, read from where they ran.

Any later shell can call `reconcile`: for each uncollected run it looks at what the job left in
the run directory (`result.json` → done or failed; `job.json` → running) and asks the executor
whether the job is still alive. A job that is gone and left no result ends as `lost`, never
stays `running` forever. The collector, not this module, ingests results and their metrics.

Executors differ only in `alive(job_id)`: the local one checks the controller process; the
Slurm one (its issue) asks sacct/squeue in one batched call per poll.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterable

import psutil
from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator import db

OPEN_STATES = ("pending", "submitted", "running")


class LocalTracker:
    """Local jobs are submitit controller processes; the job id is the controller's pid."""

    def alive(self, job_ids: Iterable[str]) -> dict[str, bool]:
        out = {}
        for job_id in job_ids:
            try:
                proc = psutil.Process(int(job_id))
                out[job_id] = (proc.status() != psutil.STATUS_ZOMBIE
                               and any("submitit" in part for part in proc.cmdline()))
            except (ValueError, psutil.Error):
                out[job_id] = False
        return out


TRACKERS = {"local": LocalTracker}


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
        if seen and seen["state"] != "running":
            changed += _apply(run, seen)
            continue
        if seen:
            changed += _apply(run, seen)
        if run.job_id and run.executor in TRACKERS:
            unresolved.setdefault(run.executor, []).append(run)
    for executor, pending in unresolved.items():
        alive = TRACKERS[executor]().alive({r.job_id for r in pending})
        for run in pending:
            if alive.get(run.job_id):
                continue
            seen = _observe(run)  # it may have finished between the two looks
            if seen and seen["state"] != "running":
                changed += _apply(run, seen)
            else:
                changed += _apply(run, {
                    "state": "lost",
                    "error_class": "lost",
                    "error_message": f"job {run.job_id} ended without writing {run.run_dir}/result.json; "
                                     f"see its submitit log under {Path(run.run_dir).parent.parent}/.submitit",
                    "ended_at": time.time()})
    session.commit()
    return changed


def _apply(run: db.Run, seen: dict) -> int:
    changed = 0
    for key, value in seen.items():
        if value is not None and getattr(run, key) != value:
            setattr(run, key, value)
            changed = 1
    return changed
