"""Rerunning failed cells: their recorded resolved config, submitted again as a new attempt.

`orchestrator rerun --failed` picks every (cell, repeat) whose latest attempt (schema.latest_runs)
is rerunnable (runstate.RERUNNABLE: failed, lost or cancelled); a repeat whose job the
scheduler still has in flight is open, so it is never offered. Without `--class`, a repeat whose
class trainers/common/failure_classes.py declares not `retried` (unsupported: run unchanged, it
can only be refused again) is left out and counted; `--class` names what it picks, any class.
Filters narrow it by sweep, failure class or cell setting. Each gets attempt n+1 in the sweep it failed in (run directory
`<repeat>.<attempt>/`), submitted with the config that sweep recorded for the cell — so a
rerun measures the same thing — with more time or memory if asked (neither is part of the
cell's identity). A timed-out repeat rerun without `--time` gets twice its last limit, capped
by its partition's MaxTime (refused, with the way out, where it had MaxTime already).
Submission goes through the launcher's own `submit_runs` (so a rerun whose sweep asked for
`retry.timeout` gets its follow-up job too). `retry.timeout`'s follow-up job picks with
`follow_up`: the timeouts with a retry left in their sweep.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any, Optional

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from orchestrator import retry, schema, runstate, time_limits
from orchestrator.backends import Backend, backend_for
from orchestrator.cell import Cell
from orchestrator.submit import Options, SubmitReport, insert_runs, new_run, submit_runs
from trainers.common import failure_classes


@dataclass
class Pick:
    """One repeat to run again: the run that failed last and the config to submit."""

    last: schema.Run
    cell: Cell
    attempt: int


def pick(session: Session, sweep_id: Optional[str] = None, classes: Optional[list[str]] = None,
         where: Optional[dict[str, list[Any]]] = None, time_min: Optional[int] = None,
         mem_gb: Optional[int] = None, follow_up: bool = False) -> tuple[list[Pick], list[str]]:
    """The repeats to rerun, and the reasons some failed ones cannot be (or are not, unasked).
    `follow_up` (retry.timeout's follow-up job, orchestrator/retry.py): only timeouts whose
    attempt has a retry left by the config their sweep recorded; the others are not mentioned."""
    if follow_up:
        classes = [failure_classes.TIMEOUT]
    latest = aliased(schema.Run, schema.latest_runs())
    query = (select(latest).where(latest.state.in_(runstate.RERUNNABLE))
             .order_by(latest.cell_id, latest.repeat))
    picks, problems = [], []
    for name in classes or ():
        if name not in failure_classes.BY_NAME and name not in runstate.RERUNNABLE:
            problems.append(f"--class {name}: not a failure class; one of {', '.join(failure_classes.NAMES)}")
    unasked: dict[str, int] = {}  # class not retried unless named -> repeats left out
    backends: dict[str, Backend] = {}  # by cluster: MaxTime read once per cluster
    for last in session.scalars(query).all():
        if sweep_id and last.sweep_id != sweep_id:
            continue
        if classes and (last.error_class or last.state) not in classes:
            continue
        cell_row = session.get(schema.Cell, last.cell_id)
        if where and not all(str(getattr(cell_row, k, None)) in {str(v) for v in vs} for k, vs in where.items()):
            continue
        declared = failure_classes.BY_NAME.get(last.error_class)
        if not classes and declared is not None and not declared.retried:
            unasked[declared.name] = unasked.get(declared.name, 0) + 1
            continue
        link = session.get(schema.SweepCell, (last.sweep_id, last.cell_id))
        if link is None or not link.config:
            problems.append(f"{last.uid}: no recorded config for this cell (sweep recorded before "
                            f"rerun existed); type its sweep again instead")
            continue
        if follow_up and not retry.retry_left(link.config, last.attempt, _first_attempt(session, last)):
            continue
        config = copy.deepcopy(link.config)
        if time_min:
            config["hardware"].update(time_min=int(time_min), time_floor=None, time_source="rerun --time")
        elif last.error_class == failure_classes.TIMEOUT:
            problem = _more_time(config, last, backends)
            if problem:
                problems.append(problem)
                continue
        if mem_gb:
            config["hardware"]["mem_gb"] = int(mem_gb)
        cell = Cell(settings=dict(cell_row.settings), config=config)
        picks.append(Pick(last=last, cell=cell, attempt=last.attempt + 1))
    for name, n in sorted(unasked.items()):
        problems.append(f"{n} repeat(s) of class {name} unchanged ({failure_classes.BY_NAME[name].meaning}): "
                        f"{failure_classes.way_out(name)}")
    return picks, problems


def _first_attempt(session: Session, last: schema.Run) -> int:
    """The first attempt `last`'s sweep made of its repeat: what its retries count from (retry.retry_left)."""
    return session.scalar(select(func.min(schema.Run.attempt)).where(
        schema.Run.sweep_id == last.sweep_id, schema.Run.cell_id == last.cell_id, schema.Run.repeat == last.repeat))


def _more_time(config: dict[str, Any], last: schema.Run, backends: dict[str, Backend]) -> Optional[str]:
    """A timed-out attempt rerun without --time gets twice its limit (`config`'s, which the
    sweep recorded for its latest attempt), capped by its partition's MaxTime; why not, where it
    had MaxTime already."""
    hardware = config["hardware"]
    key = repr(sorted(config["cluster"].items()))
    backend = backends.setdefault(key, backend_for(config["cluster"]))
    had, most = time_limits.configured(hardware, config["cluster"]), backend.max_time_min(config)
    more = time_limits.doubled(had, most)
    if more is None:
        return (f"{last.uid}: timed out at {had} min, which is already its partition's MaxTime; lower its "
                f"iterations (type the sweep again with iterations=N) or use a partition with a longer "
                f"MaxTime (hardware.partition=NAME)")
    hardware.update(time_min=more, time_floor=None, time_source=f"{time_limits.RERUN}: twice {had} min")
    return None


def submit(session: Session, picks: list[Pick]) -> list[SubmitReport]:
    """Records attempt n+1 of every pick in its sweep and submits them, one report per sweep."""
    by_sweep: dict[str, list[Pick]] = {}
    for p in picks:
        by_sweep.setdefault(p.last.sweep_id, []).append(p)
    reports = []
    for sweep_id, mine in by_sweep.items():
        report = SubmitReport(sweep_id=sweep_id)
        opts = Options.from_config(mine[0].cell.config)
        planned: dict[str, tuple[Cell, list[schema.Run]]] = {}
        for p in mine:
            run = new_run(sweep_id, p.cell.id, p.last.repeat, p.attempt, opts)
            run.submitted_at = time.time()
            key = p.cell.id + repr(sorted(p.cell.config["hardware"].items()))
            planned.setdefault(key, (p.cell, []))[1].append(run)
        insert_runs(session, [run for _, runs in planned.values() for run in runs])
        for p in mine:  # the sweep's record is its latest attempt's config: what a next rerun doubles
            session.get(schema.SweepCell, (sweep_id, p.cell.id)).config = p.cell.config
        session.commit()
        submit_runs(session, sweep_id, list(planned.values()), opts, report)
        reports.append(report)
    return reports
