"""What a set of sweeps holds, as the report's records: the read layer's rows (cell_stats.py,
which asks the database every question) made into Stats, Attempts, SweepInfo and JobTime.

A sweep's cells are those it named (`sweep_cells`) and those its expansion refused
(`refusals`). A cell's numbers are over the latest attempt of each of its repeats where that
attempt is done (cell_stats.py says why).
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from statistics import median
from typing import Any, Iterable, Optional, Sequence

from sqlalchemy.orm import Session

from orchestrator.job import batch_curve
from orchestrator.store import cell_stats, queries
from orchestrator.store import run_history
from orchestrator.setting_registry import HEADLINE, NAMES as SETTINGS, filled
from orchestrator.metric_registry import BY_NAME, MetricDef
from orchestrator.store.sql_adapters import Rows


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


def sweeps(session: Session, sweep_ids: Sequence[str]) -> list[SweepInfo]:
    """The sweeps, oldest first, with the command that made each."""
    return [SweepInfo(s.id, s.created_at, shlex.join(str(a) for a in (queries.json_value(s.argv) or [])),
                      s.n_cells or 0,
                      f"{s.submit_user or '?'}@{s.submit_host or '?'}" if s.submit_user or s.submit_host else None)
            for s in reversed(queries.sweeps(Rows.of(session), sweep_ids))]


def recorded_configs(session: Session, sweep_ids: Sequence[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """(sweep id, cell id) -> the config that sweep recorded for the cell, for every sweep that
    recorded one of these sweeps' cells (queries.named_configs)."""
    return queries.named_configs(Rows.of(session), sweep_ids)


def cells(session: Session, sweep_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """cell id -> its settings, defaults filled in, for every cell the sweeps named (run_history.cells)."""
    return run_history.cells(session, sweep_ids)


def refusals(session: Session, sweep_ids: Sequence[str]) -> list[tuple[dict[str, Any], str]]:
    """(settings as far as they resolved, reason) of each cell the sweeps' expansions refused."""
    out = []
    for row in run_history.refusal_records(session, sweep_ids):
        settings = {key: None for key in SETTINGS} | dict(row.settings or {})
        settings.update({key: getattr(row, key) for key in HEADLINE})
        out.append((filled(settings), row.reason))
    return out


def stats(session: Session, sweep_ids: Sequence[str], metrics: Iterable[MetricDef]) -> dict[tuple[str, str], Stats]:
    """(cell id, metric name) -> its Stats over the cell's measured repeats, for each metric (a
    metric named `params` is the runs' parameter count, not a metrics row): cell_stats.metric_stats."""
    return {(cell, name): Stats(n, median, mean, sd, lo, hi)
            for cell, name, n, median, mean, sd, lo, hi in cell_stats.metric_stats(session, sweep_ids, list(metrics))}


def values(session: Session, sweep_ids: Sequence[str], metric: MetricDef) -> dict[str, list[float]]:
    """cell id -> the measured repeats' values of `metric` behind its Stats (compare's test)."""
    out: dict[str, list[float]] = {}
    for cell, _, value in cell_stats.metric_values(session, sweep_ids, [metric]):
        out.setdefault(cell, []).append(value)
    return out


def attempts(session: Session, sweep_ids: Sequence[str]) -> dict[str, list[Attempts]]:
    """cell id -> its repeats' latest attempts by state and error class (with one message each)."""
    out: dict[str, list[Attempts]] = {}
    for cell, state, error_class, n, message in cell_stats.attempt_counts(session, sweep_ids):
        out.setdefault(cell, []).append(Attempts(state, error_class, n, message))
    return out


def provenance_records(session: Session, cell_ids: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """cell id -> the provenance records of its latest attempts that ran (run_history.provenance_records):
    what a build's runs loaded, for the report's builds section."""
    out: dict[str, list[dict[str, Any]]] = {}
    for cell, record in run_history.provenance_records(session, list(cell_ids)):
        out.setdefault(cell, []).append(record)
    return out


@dataclass(frozen=True)
class JobTime:
    """One job that ran latest attempts of a cell: its sweep, its runs, and its wall time (its
    first run's start to its last run's end; None while a run of it has not ended)."""

    sweep_id: str
    attempt: int
    runs: int
    wall_s: Optional[float]


def job_times(session: Session, sweep_ids: Sequence[str]) -> dict[str, list[JobTime]]:
    """cell id -> the jobs that ran its latest attempts (that started), oldest attempt first: the
    time a limit is set against is the job's, not one run's (queries.latest_jobs)."""
    out: dict[str, list[JobTime]] = {}
    for j in queries.named_jobs(Rows.of(session), sweep_ids):
        out.setdefault(j.cell_id, []).append(
            JobTime(j.sweep_id, j.attempt, j.runs, j.ended_at - j.started_at if j.ended == j.runs else None))
    return out


#: An inference point's figures: the latency-throughput figure's and the per-batch table's.
POINT_FIGURES = ("images_per_sec", "latency_p50_s", "latency_p99_s", "first_batch_s", "energy_per_image_j",
                 "cpu_energy_per_image_j", "below_rule")


@dataclass(frozen=True)
class Point:
    """One batch size of an inference cell: a fixed cell's own batch, or one of a batch_size=auto run's
    points (`searched`); each figure the median over the cell's measured repeats (n of them), but
    below_rule the largest: a point is below the rule where any of its repeats was."""

    cell: str
    settings: dict[str, Any]
    batch: int
    searched: bool
    n: int
    values: dict[str, float]


def inference_points(session: Session, sweep_ids: Sequence[str]) -> list[Point]:
    """Every measured batch size of the sweeps' inference cells: a fixed cell's figures
    (metric_stats), and each point of a batch_size=auto run (batch_curve's `auto.b<batch>.<metric>`
    rows, whose run's own figures are its fastest point's and would count it twice)."""
    settings = {c: s for c, s in cells(session, sweep_ids).items() if s.get("phase") == "inference"}
    out = []
    got = stats(session, sweep_ids, [BY_NAME[m] for m in POINT_FIGURES])
    for cell, s in settings.items():
        if s.get("batch_search") != "auto" and (cell, "images_per_sec") in got:
            values = {m: got[cell, m].hi if m == "below_rule" else got[cell, m].median
                      for m in POINT_FIGURES if (cell, m) in got}
            out.append(Point(cell, s, int(s["batch_size"]), False, got[cell, "images_per_sec"].n, values))
    runs: dict[str, dict[str, list[float]]] = {}
    for cell, name, value in cell_stats.named_values(session, sweep_ids, batch_curve.PREFIX):
        runs.setdefault(cell, {}).setdefault(name, []).append(value)
    for cell, named in runs.items():
        if cell in settings:
            for point in batch_curve.curve({name: max(vs) if name.endswith(".below_rule") else median(vs)
                                            for name, vs in named.items()}):
                n = len(named.get(f"{batch_curve.PREFIX}{int(point['batch']):05d}.images_per_sec", ()))
                out.append(Point(cell, settings[cell], int(point.pop("batch")), True, n, point))
    return out
