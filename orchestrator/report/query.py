"""The report's SQL: what a set of sweeps holds, read from the database only.

A sweep's cells are those it named (`sweep_cells`) and those its expansion refused
(`refusals`). A cell's numbers are over the latest attempt of each of its repeats
(`schema.latest_runs()`, as the `cell_summary` view takes them) where that attempt is done: so a
cell measured by an earlier sweep, or rerun by a later one, shows its current numbers. Every
statistic is computed by the database (one grouped query for all metrics), so a report over
100,000 runs moves a few thousand rows, not the runs.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

from sqlalchemy import Float, Select, case, cast, func, literal, select, union_all
from sqlalchemy.orm import Session

from orchestrator.store import schema
from orchestrator import runstate
from orchestrator.setting_registry import HEADLINE, NAMES as SETTINGS, filled
from orchestrator.metric_registry import MetricDef


@dataclass(frozen=True)
class Stats:
    """One metric of one cell over its measured repeats (values in the metric's view unit)."""

    n: int
    median: float
    mean: float
    sd: Optional[float]  # n-1; None for one repeat
    lo: float
    hi: float

    @property
    def cv(self) -> Optional[float]:
        return None if self.sd is None or not self.mean else self.sd / abs(self.mean)


@dataclass(frozen=True)
class Attempts:
    """The latest attempts of one cell's repeats, in one state (and error class)."""

    state: str
    error_class: Optional[str]
    n: int
    message: Optional[str]


@dataclass(frozen=True)
class SweepInfo:
    id: str
    created_at: float
    command: str
    n_cells: int
    #: `user@host` who typed it (None: recorded before the database kept it)
    by: Optional[str] = None


def _sweep_cells(sweep_ids: Sequence[str]) -> Select:
    return select(schema.SweepCell.cell_id).where(schema.SweepCell.sweep_id.in_(sweep_ids))


def sweeps(session: Session, sweep_ids: Sequence[str]) -> list[SweepInfo]:
    """The sweeps, oldest first, with the command that made each."""
    rows = session.scalars(select(schema.Sweep).where(schema.Sweep.id.in_(sweep_ids)).order_by(schema.Sweep.created_at))
    return [SweepInfo(s.id, s.created_at, shlex.join(str(a) for a in (s.argv or [])), s.n_cells or 0,
                      f"{s.submit_user or '?'}@{s.submit_host or '?'}" if s.submit_user or s.submit_host else None)
            for s in rows]


def cells(session: Session, sweep_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """cell id -> its settings (cell.SETTINGS), for every cell the sweeps named."""
    columns = [schema.setting_value(getattr(schema.Cell, key)) for key in SETTINGS]  # defaults filled in
    return {row[0]: dict(zip(SETTINGS, row[1:])) for row in session.execute(
        select(schema.Cell.id, *columns).where(schema.Cell.id.in_(_sweep_cells(sweep_ids))))}


def refusals(session: Session, sweep_ids: Sequence[str]) -> list[tuple[dict[str, Any], str]]:
    """(settings as far as they resolved, reason) of each cell the sweeps' expansions refused."""
    out = []
    for row in session.scalars(select(schema.Refusal).where(schema.Refusal.sweep_id.in_(sweep_ids)).order_by(schema.Refusal.id)):
        settings = {key: None for key in SETTINGS} | dict(row.settings or {})
        settings.update({key: getattr(row, key) for key in HEADLINE})
        out.append((filled(settings), row.reason))
    return out


def stats(session: Session, sweep_ids: Sequence[str], metrics: Iterable[MetricDef]) -> dict[tuple[str, str], Stats]:
    """(cell id, metric name) -> its Stats over the cell's measured repeats, for each metric (a
    metric named `params` is the runs' parameter count, not a metrics row).

    One query: the values of the latest attempts that are done (each divided by its metric's
    divisor, as the `results` view shows it), ranked per cell and metric for the median, then
    counted, summed and squared per cell and metric."""
    metrics = list(metrics)
    latest = schema.latest_runs()
    mine = (latest.c.state == runstate.DONE, latest.c.cell_id.in_(_sweep_cells(sweep_ids)))
    named = [m.name for m in metrics if m.name != "params"]
    divisors = {m.name: m.divisor for m in metrics if m.divisor != 1}
    value = schema.Metric.value / case(divisors, value=schema.Metric.name, else_=1.0) if divisors else schema.Metric.value
    parts = [select(latest.c.cell_id.label("cell"), schema.Metric.name.label("name"), value.label("value"))
             .join(schema.Metric, schema.Metric.run_id == latest.c.id).where(*mine, schema.Metric.name.in_(named))]
    if len(named) < len(metrics):
        parts.append(select(latest.c.cell_id, literal("params"), cast(latest.c.params, Float))
                     .where(*mine, latest.c.params.is_not(None)))
    values = (union_all(*parts) if len(parts) > 1 else parts[0]).subquery("v")
    per = (values.c.cell, values.c.name)
    ranked = select(values, func.row_number().over(partition_by=per, order_by=values.c.value).label("rn"),
                    func.count().over(partition_by=per).label("cnt")).subquery("ranked")
    x = ranked.c
    query = select(x.cell, x.name, func.count(), func.avg(case((x.rn.in_([(x.cnt + 1) // 2, (x.cnt + 2) // 2]), x.value))),
                   func.avg(x.value), func.min(x.value), func.max(x.value), func.sum(x.value * x.value)).group_by(x.cell, x.name)
    out = {}
    for cell, name, n, median, mean, lo, hi, squares in session.execute(query):
        variance = (squares - n * mean * mean) / (n - 1) if n > 1 else None
        sd = max(variance, 0.0) ** 0.5 if variance is not None else None
        out[(cell, name)] = Stats(n, median, mean, sd, lo, hi)
    return out


def attempts(session: Session, sweep_ids: Sequence[str]) -> dict[str, list[Attempts]]:
    """cell id -> its repeats' latest attempts by state and error class (with one message each)."""
    latest = schema.latest_runs()
    out: dict[str, list[Attempts]] = {}
    for cell, state, error_class, n, message in session.execute(
            select(latest.c.cell_id, latest.c.state, latest.c.error_class, func.count(), func.min(latest.c.error_message))
            .where(latest.c.cell_id.in_(_sweep_cells(sweep_ids)))
            .group_by(latest.c.cell_id, latest.c.state, latest.c.error_class)):
        out.setdefault(cell, []).append(Attempts(state, error_class, n, message))
    return out


def cores(session: Session, sweep_ids: Sequence[str]) -> dict[str, int]:
    """cell id -> the physical cores of the node its repeats ran on (the most, if several)."""
    latest = schema.latest_runs()
    return dict(session.execute(
        select(latest.c.cell_id, func.max(latest.c.cpu_cores))
        .where(latest.c.cell_id.in_(_sweep_cells(sweep_ids)), latest.c.cpu_cores.is_not(None))
        .group_by(latest.c.cell_id)).all())


def node_addrs(session: Session, sweep_ids: Sequence[str]) -> dict[str, list[str]]:
    """cell id -> the distinct node addresses its latest attempts across nodes recorded (each
    run's comma-separated, in rank order: runs.node_addrs)."""
    latest = schema.latest_runs()
    out: dict[str, list[str]] = {}
    for cell, addrs in session.execute(
            select(latest.c.cell_id, latest.c.node_addrs).distinct()
            .where(latest.c.cell_id.in_(_sweep_cells(sweep_ids)), latest.c.node_addrs.is_not(None))):
        out.setdefault(cell, []).append(addrs)
    return out


#: What the provenance summary lists, each as the runs' columns it groups by.
PROVENANCE = {
    "nodes": ("node",),
    "CPU models": ("cpu_model", "cpu_cores"),
    "GPU models": ("gpu_name",),
    "GPU driver / CUDA": ("gpu_driver", "cuda_driver"),
    "framework versions": ("framework", "framework_version"),
    "environments (venv or image digests)": ("framework", "environment"),
    "git revisions": ("git_revision", "git_dirty"),
    "energy methods": ("energy_method",),
}


def provenance(session: Session, sweep_ids: Sequence[str]) -> dict[str, list[tuple[tuple[Any, ...], int]]]:
    """Per PROVENANCE entry: each distinct value over the runs that ran (a node recorded) among the
    latest attempts, with how many runs had it; values nobody recorded are left out."""
    latest = schema.latest_runs()
    source = latest.join(schema.Cell, schema.Cell.id == latest.c.cell_id)
    out = {}
    for title, names in PROVENANCE.items():
        columns = [schema.Cell.framework if name == "framework" else latest.c[name] for name in names]
        rows = session.execute(
            select(*columns, func.count()).select_from(source)
            .where(latest.c.cell_id.in_(_sweep_cells(sweep_ids)), latest.c.node.is_not(None))
            .group_by(*columns).order_by(func.count().desc())).all()
        out[title] = [(tuple(row[:-1]), row[-1]) for row in rows if any(v is not None for v in row[:-1])]
    return out


def span(session: Session, sweep_ids: Sequence[str]) -> tuple[Optional[float], Optional[float]]:
    """When the first of the latest attempts started and the last ended."""
    latest = schema.latest_runs()
    return tuple(session.execute(select(func.min(latest.c.started_at), func.max(latest.c.ended_at))
                                 .where(latest.c.cell_id.in_(_sweep_cells(sweep_ids)))).one())


@dataclass(frozen=True)
class JobTime:
    """One job that ran latest attempts of a cell: its sweep, its runs, and its wall time (its
    first run's start to its last run's end; None while a run of it has not ended)."""

    sweep_id: str
    attempt: int
    runs: int
    wall_s: Optional[float]


def job_times(session: Session, sweep_ids: Sequence[str]) -> dict[str, list[JobTime]]:
    """cell id -> the jobs that ran its latest attempts (that started), oldest attempt first.

    A job runs every repeat of its cell under one time limit (job.run_cell), so the time a limit
    is set against is the job's, not one run's: runs group by their job id (a foreground run has
    none: by sweep and attempt instead), one row per job."""
    latest = schema.latest_runs()
    c = latest.c
    job = (c.cell_id, c.sweep_id, c.job_id, case((c.job_id.is_(None), c.attempt)))
    out: dict[str, list[JobTime]] = {}
    for cell, sweep, attempt, runs, ended, first, last in session.execute(
            select(c.cell_id, c.sweep_id, func.max(c.attempt), func.count(), func.count(c.ended_at),
                   func.min(c.started_at), func.max(c.ended_at))
            .where(c.cell_id.in_(_sweep_cells(sweep_ids)), c.started_at.is_not(None))
            .group_by(*job).order_by(c.cell_id, func.max(c.attempt))):
        out.setdefault(cell, []).append(JobTime(sweep, attempt, runs, last - first if ended == runs else None))
    return out


def recorded_configs(session: Session, sweep_ids: Sequence[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """(sweep id, cell id) -> the config that sweep recorded for the cell (sweep_cells.config: the
    time limit it asked for, in its hardware), for every sweep that recorded one of these
    sweeps' cells (a cell's latest attempts may have run in an earlier or a later sweep)."""
    link = schema.SweepCell
    return {(sweep, cell): config for sweep, cell, config in session.execute(
        select(link.sweep_id, link.cell_id, link.config)
        .where(link.cell_id.in_(_sweep_cells(sweep_ids)), link.config.is_not(None))) if config}
