"""The read layer in SQLAlchemy Core, its second half: what past sweeps and runs recorded — a set
of sweeps' cells, refusals, provenance and jobs (the report's), and the history a learned time
limit comes from (time_limits.learn's). cell_stats.py holds the views and the statistics; the
questions `status` asks too (the sweeps, their recorded configs) are queries.py's alone.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from sqlalchemy import and_, exists, func, select
from sqlalchemy.orm import Session, aliased

from orchestrator import setting_registry
from orchestrator.store.cell_stats import named_cells
from orchestrator.store.schema import Cell, Metric, Refusal, Run, latest_runs, setting_value


def cells(session: Session, sweep_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """cell id -> its settings (setting_registry.NAMES, defaults filled in), for every cell the sweeps named."""
    names = setting_registry.NAMES
    return {row[0]: dict(zip(names, row[1:])) for row in session.execute(
        select(Cell.id, *(setting_value(getattr(Cell, key)) for key in names))
        .where(Cell.id.in_(named_cells(sweep_ids))))}


def refusal_records(session: Session, sweep_ids: Sequence[str]) -> list[Refusal]:
    """The cells the sweeps' expansions refused, in the order they were recorded."""
    return list(session.scalars(select(Refusal).where(Refusal.sweep_id.in_(sweep_ids)).order_by(Refusal.id)))


def cores(session: Session, sweep_ids: Sequence[str]) -> dict[str, int]:
    """cell id -> the physical cores of the node its repeats ran on (the most, if several)."""
    latest = latest_runs()
    return dict(session.execute(
        select(latest.c.cell_id, func.max(latest.c.cpu_cores))
        .where(latest.c.cell_id.in_(named_cells(sweep_ids)), latest.c.cpu_cores.is_not(None))
        .group_by(latest.c.cell_id)).all())


def node_addrs(session: Session, sweep_ids: Sequence[str]) -> dict[str, list[str]]:
    """cell id -> the distinct node addresses its latest attempts across nodes recorded (each
    run's comma-separated, in rank order: runs.node_addrs)."""
    latest = latest_runs()
    out: dict[str, list[str]] = {}
    for cell, addrs in session.execute(
            select(latest.c.cell_id, latest.c.node_addrs).distinct()
            .where(latest.c.cell_id.in_(named_cells(sweep_ids)), latest.c.node_addrs.is_not(None))):
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
    latest = latest_runs()
    source = latest.join(Cell, Cell.id == latest.c.cell_id)
    out = {}
    for title, names in PROVENANCE.items():
        columns = [Cell.framework if name == "framework" else latest.c[name] for name in names]
        rows = session.execute(
            select(*columns, func.count()).select_from(source)
            .where(latest.c.cell_id.in_(named_cells(sweep_ids)), latest.c.node.is_not(None))
            .group_by(*columns).order_by(func.count().desc())).all()
        out[title] = [(tuple(row[:-1]), row[-1]) for row in rows if any(v is not None for v in row[:-1])]
    return out


def provenance_records(session: Session, cell_ids: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """(cell id, provenance record) of each run that ran (a node recorded) among the latest attempts
    of these cells: the whole record (result.json `provenance`), for what no column holds (the BLAS
    a build loaded, its compiler: the report's builds page)."""
    latest = latest_runs()
    found = session.execute(select(latest.c.cell_id, latest.c.provenance)
                            .where(latest.c.cell_id.in_(list(cell_ids)), latest.c.node.is_not(None)))
    return [(cell, record) for cell, record in found if isinstance(record, dict)]


def span(session: Session, sweep_ids: Sequence[str]) -> tuple[Optional[float], Optional[float]]:
    """When the first of the latest attempts started and the last ended."""
    latest = latest_runs()
    return tuple(session.execute(select(func.min(latest.c.started_at), func.max(latest.c.ended_at))
                                 .where(latest.c.cell_id.in_(named_cells(sweep_ids)))).one())


# --- the history a learned time limit comes from (time_limits.History.read) ---------------------

def _valid_wall() -> Any:
    """A run's wall time is valid: both ends recorded, the end not before the start."""
    return and_(Run.started_at.is_not(None), Run.ended_at.is_not(None), Run.ended_at >= Run.started_at)


def _named(framework: str, model: str, dataset: str, hardware: str) -> tuple[Any, ...]:
    return Cell.framework == framework, Cell.model == model, Cell.dataset == dataset, Cell.hardware == hardware


def limit_history(rows: Any, framework: str, model: str, dataset: str, hardware: str, settings: Sequence[str],
                  done: str, most: int = 200) -> list[Any]:
    """The `most` latest successful runs (state `done`) with a valid wall time (a missing or
    reversed one counts toward nothing, not even `most`) of the cells with these names, newest
    first, with their wall time (`wall_s`), their mean measured step time (`step_s`, the metric
    step_time_mean; None where none) and the cells' `settings` columns, through `rows` (a
    session's sql_adapters.Rows): what a learned time limit comes from (time_limits.learn)."""
    step = aliased(Metric, name="step")
    return rows.all(
        select(Run.cell_id, (Run.ended_at - Run.started_at).label("wall_s"), step.value.label("step_s"),
               *(Cell.__table__.c[name] for name in settings))
        .join(Cell, Cell.id == Run.cell_id)
        .outerjoin(step, and_(step.run_id == Run.id, step.name == "step_time_mean"))
        .where(Run.state == done, *_named(framework, model, dataset, hardware), _valid_wall())
        .order_by(Run.ended_at.desc()).limit(most))


def limit_left_out(rows: Any, framework: str, model: str, dataset: str, hardware: str, done: str) -> dict[str, int]:
    """Cell id -> how many of its successful runs have no valid wall time (limit_history leaves
    them out): what each cell's learned limit says of its own."""
    found = rows.all(
        select(Run.cell_id, func.count().label("n")).join(Cell, Cell.id == Run.cell_id)
        .where(Run.state == done, *_named(framework, model, dataset, hardware), ~_valid_wall())
        .group_by(Run.cell_id))
    return {r.cell_id: int(r.n) for r in found}


def limit_timeouts(rows: Any, framework: str, model: str, dataset: str, hardware: str, failed: str,
                   timeout: str, done: str) -> list[Any]:
    """The timed-out runs (state `failed`, class `timeout`) of the cells with these names that
    no success of their cell followed, newest first: each one's cell and sweep and its wall time
    (`wall_s`, None where unknown). Its sweep's recorded config of the cell (queries.recorded_config)
    holds the limit it timed out at (time_limits.learn asks at least twice that)."""
    later = aliased(Run, name="d")
    succeeded = exists().where(later.cell_id == Run.cell_id, later.state == done, later.ended_at > Run.ended_at)
    return rows.all(
        select(Run.cell_id, Run.sweep_id, (Run.ended_at - Run.started_at).label("wall_s"))
        .join(Cell, Cell.id == Run.cell_id)
        .where(Run.state == failed, Run.error_class == timeout, *_named(framework, model, dataset, hardware),
               ~succeeded)
        .order_by(Run.ended_at.is_(None), Run.ended_at.desc()))
