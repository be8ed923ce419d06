"""Submitting a sweep: record it, skip what is done, hand one job per cell to the executor.

This is the body of the project's launch (orchestrator/front_door.py), kept out of the Hydra
plugin so it reads without Hydra's API around it. It does not wait for the jobs: the sweep, its
cells, its runs and their job ids are in the DB before it returns, and any later shell follows
them with `orchestrator status`. It does not care which scheduler it is given (backends/base.py).

The steps live beside it, each in its own module: the options (submit_options.py), the plan of
what each cell still needs and its learned time limit (submit_plan.py), the refused cells'
records (submit_refusals.py), the interrupted submissions (submit_adopt.py) and every statement
(launch_records.py). Here: the order of the steps, the grouping into one submission per resource
request, and the hand-over.
"""
from __future__ import annotations

import operator
import secrets
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, Optional

from sqlalchemy.orm import Session, sessionmaker

from orchestrator.store import db, launch_records, schema
from orchestrator.launch import retry
from orchestrator import runstate
from orchestrator.backends import SchedulerUnavailable
from orchestrator.backends.base import array_limit, refusal, request, resources, signature, submit
from orchestrator.sweep.cell import Cell
from orchestrator.sweep.dataset_files import MADE_ON_FIRST_USE, made_on_first_use
from orchestrator.job.run import run_cell
from orchestrator.store.sql_adapters import Rows
from orchestrator.store.sqlite_lease import who
from orchestrator.launch.submit_adopt import adopt_interrupted, submitting
from orchestrator.launch.submit_options import Options, SubmitReport, new_sweep_id
from orchestrator.launch.submit_plan import NewRun, cell_rows, job_spec, learn_time_limits, plan_runs
from orchestrator.launch.submit_refusals import refusal as refusal_row
from trainers.common import failure_classes

#: A cell and the runs one submission carries for it.
Planned = tuple[Cell, list[NewRun]]
#: What submit_runs and its steps report progress to.
Progress = Callable[[str], None]


@dataclass
class Batch:
    """One submission: one resource request (submitit parameters), its name, its cells' runs."""

    params: dict[str, Any]
    name: str
    members: list[Planned]

    def runs(self) -> list[NewRun]:
        return [run for _, runs in self.members for run in runs]


def submit_sweep(cells: list[Cell], opts: Options, argv: list[str] | None = None,
                 refused: list[tuple[str, str]] | None = None, foreground: bool = False,
                 progress: Progress = lambda line: None,
                 refused_settings: Mapping[str, Mapping[str, Any]] | None = None,
                 factory: sessionmaker | None = None) -> SubmitReport:
    """Records the sweep and submits one job per cell that still needs runs; returns at once.
    `cells` are distinct (the launcher keeps the first spelling of a cell typed twice: tf, tensorflow).

    The cells refused at expansion (`refused`: override line, reason) are recorded with the sweep
    (schema.Refusal), with what their config said of their settings (`refused_settings`, by override
    line: submit_refusals.refusal_settings), so that a report can name them and why. `factory`: the
    launch's handle. Each run is recorded marked with the submission it goes out in (or failed
    `unplaceable`), so that the sweep and its runs are committed once before anything is submitted."""
    report = SubmitReport(sweep_id=new_sweep_id(), refused=list(refused or []))
    step = None if foreground else array_limit(opts.backend)  # the cluster's facts, asked before any lock is held
    factory = factory or db.open_db(opts.db_url)
    with factory() as session:
        adopt_interrupted(session, opts.backend)
        _record_sweep(session, report, cells, argv, refused_settings)
        known, existing = launch_records.known(session, (cell.id for cell in cells))
        planned, cells = _plan(session, report, cells, opts, existing)
        batches = [] if foreground else _batches(planned, report.sweep_id, opts, report, step)
        new, members = cell_rows(report.sweep_id, cells, known, {cell.id for cell, _ in planned})
        with launch_records.cached(session):  # its cells, runs and kept lines held in memory until the commit
            launch_records.insert_cells(session, new, members)
            runs = [run for _, runs in planned for run in runs]
            had = {(run.cell_id, run.repeat) for runs in existing.values() for run in runs}
            launch_records.insert_runs(session, [run.row() for run in runs],
                                       [(run.cell_id, run.repeat) for run in runs if (run.cell_id, run.repeat) in had])
        report.notes += made_on_first_use({c.config["dataset"]["dir"] for c, _ in planned if c.config["dataset"]
                                           .get("name") in MADE_ON_FIRST_USE and c.config["dataset"].get("dir")})
        session.commit()  # the sweep and its marked runs exist before anything is submitted
        if foreground:
            _run_here(session, report, planned, opts)
        else:
            _send(session, report, batches, opts, progress)
    return report


def _record_sweep(session: Session, report: SubmitReport, cells: list[Cell], argv: Optional[list[str]],
                  refused_settings: Optional[Mapping[str, Mapping[str, Any]]]) -> None:
    """The sweep's row, first (its refusals refer to it; on SQLite its flush takes the write lock,
    on PostgreSQL a lock of launches is taken first, so a second launch of the same cells waits and
    then sees this one's runs), and its refusals."""
    user, host = who()
    launch_records.one_launch_at_a_time(session)  # on PostgreSQL: what the flush's write lock is on SQLite
    session.add(schema.Sweep(id=report.sweep_id, created_at=time.time(), argv=db.recordable(argv or sys.argv),
                             overrides=[db.recordable(c.overrides) for c in cells], n_cells=len(cells),
                             submit_user=user, submit_host=host))
    session.flush()
    for overrides, reason in report.refused:
        session.add(refusal_row(report.sweep_id, overrides, reason, (refused_settings or {}).get(overrides)))


def _plan(session: Session, report: SubmitReport, cells: list[Cell], opts: Options,
          existing: dict[str, list[Any]]) -> tuple[list[Planned], list[Cell]]:
    """The cells that need runs, with their runs and learned time limits (the skipped ones in the
    report), and every cell with its learned limit."""
    planned: list[Planned] = []
    submitter = who()
    for cell in cells:
        runs, reason = plan_runs(report.sweep_id, cell, opts, existing.get(cell.id, []), submitter)
        if runs:
            planned.append((cell, runs))
        else:
            report.skipped.append((cell, reason))
    learned = {c.id: c for c in learn_time_limits([cell for cell, _ in planned], opts, Rows.of(session))}
    return [(learned[c.id], runs) for c, runs in planned], [learned.get(c.id, c) for c in cells]


def _batches(planned: list[Planned], sweep_id: str, opts: Options, report: SubmitReport,
             step: Optional[int]) -> list[Batch]:
    """The submissions: one per resource request (cells whose requests give equal submitit
    parameters share one), split at the scheduler's array limit (`step`).
    A request the scheduler can never place (backends.base.refusal: no node of its partition
    holds it) is refused: its runs failed `unplaceable` with the reason, never submitted. Each
    run of a submission is marked with its name and index (submit_adopt.submitting)."""
    groups: dict[str, tuple[dict[str, Any], list[Planned]]] = {}
    keys: dict[Hashable, str] = {}  # request -> its parameters' signature: derived once per request, not per cell
    for cell, runs in planned:
        asked = request(opts.backend, cell.config)
        if asked not in keys:
            params = resources(opts.backend, cell.config)
            keys[asked] = signature(params)
            groups.setdefault(keys[asked], (params, []))
        groups[keys[asked]][1].append((cell, runs))
    batches, checked, step = [], True, step or len(planned) or 1
    for params, group in groups.values():
        try:
            reason = refusal(opts.backend, group[0][0].config) if checked else None  # one request per group
        except SchedulerUnavailable as exc:  # silence refuses nothing: submit as asked
            checked, reason = False, None
            report.notes.append(f"requests not checked against the cluster ({exc}); submitted as asked")
        if reason:
            _fail([run for _, runs in group for run in runs], failure_classes.UNPLACEABLE, reason)
            report.refused += [(" ".join(cell.overrides), f"{cell.label}: {reason}") for cell, _ in group]
            continue
        for i in range(0, len(group), step):
            batch = Batch(params, f"orch-{sweep_id}-{secrets.token_hex(3)}", group[i:i + step])
            for index, (_, runs) in enumerate(batch.members):
                for run in runs:
                    run.state_detail = submitting(batch.name, index, len(batch.members))
            batches.append(batch)
    return batches


def _fail(runs: list[NewRun], error_class: str, message: str) -> None:
    """Puts runs in `failed` with this class and message (in memory: the caller writes them)."""
    now = time.time()
    for run in runs:
        run.state, run.job_id, run.submitted_at = runstate.FAILED, None, now
        run.error_class, run.error_message, run.state_detail = error_class, message, None


def _write(session: Session, runs: list[NewRun], columns: tuple[str, ...]) -> None:
    """Writes these columns of recorded runs (their values in memory) and commits."""
    values = operator.attrgetter("uid", *columns)
    launch_records.update_runs(session, columns, [values(run) for run in runs])
    session.commit()


#: What a submission's outcome changes of its runs.
_OUTCOME = ("state", "job_id", "submitted_at", "state_detail", "error_class", "error_message")


def submit_runs(session: Session, sweep_id: str, planned: list[Planned], opts: Options, report: SubmitReport,
                progress: Progress = lambda line: None) -> None:
    """Hands runs recorded pending (rerun's) to the executor: one submission per resource request
    (an array on Slurm), each run marked with its submission first (committed), as submit_sweep
    records its own runs marked."""
    batches = _batches(planned, sweep_id, opts, report, array_limit(opts.backend))
    _write(session, [run for _, runs in planned for run in runs], _OUTCOME)
    _send(session, report, batches, opts, progress)


def _run_here(session: Session, report: SubmitReport, planned: list[Planned], opts: Options) -> None:
    """A foreground run: each cell's job run in this process, one after the other."""
    for cell, runs in planned:
        for run in runs:
            run.state, run.submitted_at, run.state_detail = runstate.RUNNING, time.time(), None
        _write(session, runs, ("state", "submitted_at", "state_detail"))
        run_cell(job_spec(cell, report.sweep_id, runs, opts))
        report.submitted.append((cell, "foreground", len(runs)))


def _send(session: Session, report: SubmitReport, batches: list[Batch], opts: Options, progress: Progress) -> None:
    """Each batch handed over; its runs' job ids committed as soon as the scheduler answers (a
    submission killed in between is found again by name: submit_adopt). A batch that fails is
    recorded failed (`submit`) and the others go on. Where `retry.timeout` leaves a retry, one
    follow-up job waits for the batches' jobs (retry.py)."""
    sweep_id, followed = report.sweep_id, []  # (cell, job) whose runs may still be retried
    first = launch_records.first_attempts(Rows.of(session), sweep_id) if opts.retry_timeout else {}
    for batch in batches:
        try:
            # one executor per array: submitit's update_parameters merges, so a parameter one array set (its
            # --time-min, GPUs) stayed on every later array that sets none (issue 35: found through sbatch)
            executor = opts.backend.executor(opts.runs / sweep_id / ".submitit")
            job_ids = submit(opts.backend, executor, run_cell,
                             [job_spec(c, sweep_id, r, opts) for c, r in batch.members], batch.params, batch.name)
        except Exception as exc:  # one group's submission failing never stops the sweep
            _fail(batch.runs(), "submit", f"{type(exc).__name__}: {exc}")
            _write(session, batch.runs(), _OUTCOME)
            report.failed += [(cell, str(exc)) for cell, _ in batch.members]
            continue
        now = time.time()
        for (cell, runs), job_id in zip(batch.members, job_ids):
            for run in runs:
                run.state, run.job_id, run.submitted_at, run.state_detail = runstate.SUBMITTED, job_id, now, None
            report.submitted.append((cell, job_id, len(runs)))
            progress(f"submitted {cell.label} as job {job_id}")
            if any(retry.retry_left(cell.config, run.attempt, first.get((cell.id, run.repeat), 1)) for run in runs):
                followed.append((cell, job_id))
        _write(session, batch.runs(), ("state", "job_id", "submitted_at", "state_detail"))
    if followed:
        report.notes.append(retry.follow_up(sweep_id, [job for _, job in followed], followed[0][0].config,
                                            opts.backend, opts.db_url, opts.runs, followed[0][0].overrides))
