"""Rerunning failed cells: the cell their sweep recorded, submitted again as a new attempt.

`orchestrator rerun --failed` picks every (cell, repeat) whose latest attempt (schema.latest_runs)
is rerunnable (runstate.RERUNNABLE: failed, lost or cancelled) and was submitted by the caller
(`--user NAME`, `--all-users` widen it: on a shared database, another user's failures are theirs
to judge); a repeat whose job the scheduler still has in flight is open, so it is never offered.
Without `--class`, a repeat whose class trainers/common/failure_classes.py declares not
`retried` (unsupported, unplaceable: run unchanged, it can only be refused again) is left out
and counted, unless the rerun asks for less than the request that could not be placed (`--time`
or `--mem` below it); `--class` names what it picks, any class.
Filters narrow it by sweep, failure class or cell setting. Each gets attempt n+1 in the sweep it failed in (run directory
`<repeat>.<attempt>/`): the cell's recorded settings and request — so a rerun measures the same
thing — on the caller's own site configuration (orchestrator/launch/rerun_config.py: nothing the
database holds is run as a command or used as a path), with more time or memory if asked
(neither is part of the cell's identity). A timed-out repeat rerun without `--time` gets twice its last limit, capped
by its partition's MaxTime (refused, with the way out, where it had MaxTime already).
Submission goes through the launcher's own `submit_runs` (so a rerun whose sweep asked for
`retry.timeout` gets its follow-up job too). `retry.timeout`'s follow-up job picks with
`follow_up`: the timeouts with a retry left in their sweep.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from orchestrator.sweep import config_checks, time_limits
from orchestrator.store import launch_records, queries, schema
from orchestrator.launch import retry
from orchestrator import runstate, setting_registry
from orchestrator.backends import Backend, backend_for
from orchestrator.backends.base import max_time_min
from orchestrator.sweep.cell import Cell, CellError
from orchestrator.sweep.config_checks import ConfigError
from orchestrator.launch.rerun_config import Site, rerecorded
from orchestrator.results.resultfile import inside, run_uid
from orchestrator.store.sql_adapters import Rows
from orchestrator.launch.submit import Planned, submit_runs
from orchestrator.launch.submit_options import Options, SubmitReport
from orchestrator.launch.submit_plan import new_run
from trainers.common import failure_classes


@dataclass
class Pick:
    """One repeat to run again: the run that failed last and the config to submit."""

    last: schema.Run
    cell: Cell
    attempt: int


def pick(session: Session, site: Site, sweep_id: Optional[str] = None, classes: Optional[list[str]] = None,
         where: Optional[dict[str, list[Any]]] = None, time_min: Optional[int] = None,
         mem_gb: Optional[int] = None, follow_up: bool = False,
         user: Optional[str] = None) -> tuple[list[Pick], list[str]]:
    """The repeats to rerun, and the reasons some failed ones cannot be (or are not, unasked).
    `site`: the caller's own configuration, which every pick runs on (rerun_config.py).
    `user`: only the repeats whose latest attempt this user submitted (None: everyone's).
    `follow_up` (retry.timeout's follow-up job, orchestrator/launch/retry.py): only timeouts whose
    attempt has a retry left by the config their sweep recorded; the others are not mentioned."""
    if follow_up:
        classes = [failure_classes.TIMEOUT]
    picks: list[Pick] = []
    problems = [f"--class {name}: not a failure class; one of {', '.join(failure_classes.NAMES)}"
                for name in classes or () if name not in failure_classes.BY_NAME and name not in runstate.RERUNNABLE]
    unasked: dict[str, int] = {}  # class not retried unless named -> repeats left out
    others: dict[Optional[str], int] = {}  # another user's repeats (by user; None: unknown) -> left out
    backends: dict[str, Backend] = {}  # by cluster: MaxTime read once per cluster
    firsts: dict[str, dict[tuple[str, int], int]] = {}  # by sweep: the first attempt of each repeat
    for last in _matching(session, sweep_id, classes, where):
        unsafe = _unsafe_names(last, site.runs)
        if unsafe:
            problems.append(unsafe)
            continue
        if user is not None and last.submit_user != user:
            others[last.submit_user] = others.get(last.submit_user, 0) + 1
            continue
        recorded = queries.recorded_config(Rows.of(session), last.sweep_id, last.cell_id)
        declared = failure_classes.BY_NAME.get(last.error_class)
        if not classes and declared is not None and not declared.retried \
                and not (declared.name == failure_classes.UNPLACEABLE and _asks_less(recorded, time_min, mem_gb)):
            unasked[declared.name] = unasked.get(declared.name, 0) + 1
            continue
        if not recorded:
            problems.append(f"{last.uid}: no recorded config for this cell (sweep recorded before "
                            f"rerun existed); type its sweep again instead")
            continue
        if follow_up and not retry.retry_left(recorded, last.attempt, _first_attempt(session, last, firsts)):
            continue
        try:
            cell = site.rebuilt(recorded, last.cell_id, time_min, mem_gb)
        except (CellError, ConfigError) as exc:
            problems.append(f"{last.uid}: {exc}")
            continue
        problem = None if time_min or last.error_class != failure_classes.TIMEOUT else _more_time(cell.config, last, backends)
        if problem:
            problems.append(problem)
            continue
        picks.append(Pick(last=last, cell=cell, attempt=last.attempt + 1))
    return picks, problems + _left_out(unasked, others)


def _unsafe_names(last: schema.Run, runs: str) -> Optional[str]:
    """Why `last`'s recorded sweep and cell ids may not become a run directory
    (`<runs>/<sweep>/<cell>/`) and a job name: each must be a plain name (a row written with SQL
    could say `../../home/alice` or hold a newline), and the directory must resolve under `runs`
    (not through a symlink planted in it). None where they may."""
    try:
        for key, value in (("sweep id", last.sweep_id), ("cell id", last.cell_id)):
            config_checks.name(key, value, "a row no sweep could have written: leave it, or type its sweep again")
    except ConfigError as exc:
        return f"run {last.uid!r}: {exc}"
    if not inside(runs, Path(runs, last.sweep_id, last.cell_id)):
        return (f"run {last.uid!r}: its run directory {runs}/{last.sweep_id}/{last.cell_id} resolves outside "
                f"{runs} (a symlink there); remove the link, or rerun with another --runs")
    return None


def _matching(session: Session, sweep_id: Optional[str], classes: Optional[list[str]],
              where: Optional[dict[str, list[Any]]]) -> Iterator[schema.Run]:
    """The rerunnable latest attempts of this sweep (None: any), these classes (None: any) and
    cells whose settings match `where`."""
    for last in launch_records.rerunnable_latest(session):
        if sweep_id and last.sweep_id != sweep_id:
            continue
        if classes and (last.error_class or last.state) not in classes:
            continue
        cell_row = session.get(schema.Cell, last.cell_id)  # its record: read with its defaults filled in
        values = setting_registry.filled({k: getattr(cell_row, k, None) for k in where or {}})
        if where and not all(str(values[k]) in {str(v) for v in vs} for k, vs in where.items()):
            continue
        yield last


def _asks_less(recorded: Optional[dict[str, Any]], time_min: Optional[int], mem_gb: Optional[int]) -> bool:
    """Whether a rerun asks for less than the recorded request did (--time below its limit,
    --mem below its memory): what may let an `unplaceable` request be placed."""
    hardware = recorded.get("hardware") if isinstance(recorded, dict) else None
    if not isinstance(hardware, dict):
        return False
    had_time, had_mem = hardware.get("time_min"), hardware.get("mem_gb")
    return bool((time_min and isinstance(had_time, int) and time_min < had_time)
                or (mem_gb and isinstance(had_mem, int) and mem_gb < had_mem))


def _left_out(unasked: dict[str, int], others: dict[Optional[str], int]) -> list[str]:
    """The lines that say what was left out unasked: classes not retried unless named, and other
    users' repeats."""
    lines = [f"{n} repeat(s) of class {name} unchanged ({failure_classes.BY_NAME[name].meaning}): "
             f"{failure_classes.way_out(name)}" for name, n in sorted(unasked.items())]
    if others.get(None):  # rows from before submitters were recorded
        lines.append(f"{others[None]} repeat(s) of unknown submitter: --all-users takes them")
    others = {user: n for user, n in others.items() if user is not None}
    if others:
        whose = ", ".join(f"{user}: {n}" for user, n in sorted(others.items()))
        lines.append(f"{sum(others.values())} repeat(s) of other users ({whose}): not yours; "
                     f"--user NAME or --all-users takes them (on your own site configuration)")
    return lines


def _first_attempt(session: Session, last: schema.Run, firsts: dict[str, dict[tuple[str, int], int]]) -> int:
    """The first attempt `last`'s sweep made of its repeat: what its retries count from
    (retry.retry_left); each sweep's read once (`firsts`, by sweep)."""
    if last.sweep_id not in firsts:
        firsts[last.sweep_id] = launch_records.first_attempts(Rows.of(session), last.sweep_id)
    return firsts[last.sweep_id][(last.cell_id, last.repeat)]


def _more_time(config: dict[str, Any], last: schema.Run, backends: dict[str, Backend]) -> Optional[str]:
    """A timed-out attempt rerun without --time gets twice its limit (`config`'s, which the
    sweep recorded for its latest attempt), capped by its partition's MaxTime; why not, where it
    had MaxTime already."""
    hardware = config["hardware"]
    key = repr(sorted(config["cluster"].items()))
    backend = backends.setdefault(key, backend_for(config["cluster"]))
    had, most = time_limits.configured(hardware, config["cluster"]), max_time_min(backend, config)
    more = time_limits.doubled(had, most)
    if more is None:
        return (f"{last.uid}: timed out at {had} min, which is already its partition's MaxTime; lower its "
                f"iterations (type the sweep again with iterations=N) or use a partition with a longer "
                f"MaxTime (hardware.partition=NAME)")
    hardware.update(time_min=more, time_floor=None, time_source=f"{time_limits.RERUN}: twice {had} min")
    return None


def submit(session: Session, picks: list[Pick]) -> list[SubmitReport]:
    """Records attempt n+1 of every pick in its sweep and submits them, one report per sweep.
    A pick whose attempt another rerun recorded meanwhile (two `rerun --failed` of one repeat at
    once: the run's uid is taken) was resubmitted by it: skipped with a note, the rest go on."""
    by_sweep: dict[str, list[Pick]] = {}
    for p in picks:
        by_sweep.setdefault(p.last.sweep_id, []).append(p)
    reports = []
    for sweep_id, mine in by_sweep.items():
        report = SubmitReport(sweep_id=sweep_id)
        opts = Options.from_config(mine[0].cell.config)
        planned = _record(session, sweep_id, mine, opts, report)
        if planned:
            submit_runs(session, sweep_id, planned, opts, report)
        reports.append(report)
    return reports


def _record(session: Session, sweep_id: str, mine: list[Pick], opts: Options,
            report: SubmitReport) -> list[Planned]:
    """The picks' new runs inserted and committed, grouped by cell and request (one job each);
    those whose uid another rerun took first left out, said in `report`'s notes."""
    while True:  # each conflict removes at least one pick: it ends
        planned: dict[str, Planned] = {}
        for p in mine:
            run = new_run(sweep_id, p.cell.id, p.last.repeat, p.attempt, opts)
            run.submitted_at = time.time()
            key = p.cell.id + repr(sorted(p.cell.config["hardware"].items()))
            planned.setdefault(key, (p.cell, []))[1].append(run)
        uids = [run.uid for _, runs in planned.values() for run in runs]
        try:
            runs = [run for _, runs in planned.values() for run in runs]
            launch_records.insert_runs(session, [run.row() for run in runs], [(r.cell_id, r.repeat) for r in runs])
            for p in mine:  # the sweep's record is its latest attempt's config: what a next rerun doubles
                row = session.get(schema.SweepCell, (sweep_id, p.cell.id))
                row.config = rerecorded(p.cell.recorded, queries.json_value(row.config))
            session.commit()
            return list(planned.values())
        except IntegrityError:
            session.rollback()
            taken = launch_records.taken_uids(session, uids)
            if not taken:
                raise
            report.notes.append(f"{len(taken)} repeat(s) already resubmitted by another rerun meanwhile "
                                f"(run {', '.join(sorted(taken))}): left to it")
            mine = [p for p in mine if run_uid(sweep_id, p.cell.id, p.last.repeat, p.attempt) not in taken]
