"""A cell's time limit learned from the runs the results database already has (issue 27).

A fixed limit is either far too long (120 min for a 1-minute LeNet cell: the job cannot be
backfilled into a short hole of a busy cluster) or too short (the run is killed and its
measurement lost). With `hardware.time_min: auto` the limit is predicted at submission:

1. **the same cell**: the longest wall time (`ended_at - started_at`) of its `recent` latest
   successful runs (a user's most recent runs predict best; the longest of them is the cautious
   choice, since a limit too short costs far more than one too long);
2. else **similar cells** (same framework, model, dataset, hardware and mode): each one's wall
   time scaled by the work of a run, the samples it steps through: (warmup + iterations) × the
   global batch (batch_size, × gpus × nodes under weak scaling), or epochs in accuracy mode
   (one pass is the dataset, the same for both). More GPUs or nodes are never assumed faster
   (a strong-scaling cell on 2 GPUs is predicted to take as long as on 1): the guess errs long.
   The largest such estimate counts;
3. else the hardware's ceiling `hardware.time_max` (what `time_min` was before).

A learned prediction P (minutes) becomes the limit `ceil(P × safety + allowance)`, capped by
the partition's MaxTime. The allowance is what a job spends outside its runs: start-up and the
monitor's idle window (`allowance_min`, 1: measured here, a job of the test cluster spent under a
second beside its run's wall time with its environment built), plus `build_min` where the cell's
environment is not built yet and the job will build it (a recipe changed since the runs learned
from: the runtime's `builds_in_job`). The defaults, safety 1.5 and 1 minute, are what
benchmarks/time_limits.py measured to meet the goal with one earlier run per cell (under 1 %
timed out, median asked ÷ used under 2) for run-to-run spreads up to 0.1 (10 %); a noisier
site raises `time_limits.safety` to 2 (its figures: docs/slurm.md), and `retry.timeout`
retries what still times out (orchestrator/retry.py). Only one learned from the same cell also gives sbatch's `--time-min`,
`ceil(P + allowance)`: Slurm's backfill may start the job in a hole that long and then really
give it only that (/work/shared/site-facts.md measured it), so it must be a time the job surely
finishes in: a measured one, never a scaled guess.

Everything here is a pure function of the history given (tested on canned history); the
question asked of the database is queries.limit_history.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional

from orchestrator import config_checks, queries, runstate, setting_registry
from orchestrator.sql_adapters import Rows

#: `hardware.time_min` that asks for a learned limit.
AUTO = "auto"
#: The time limit (minutes) of a cell whose hardware and cluster name none.
DEFAULT_TIME_MIN = 60
#: The defaults of the sweep's `time_limits:` keys (conf/config.yaml).
DEFAULTS = {"safety": 1.5, "allowance_min": 1.0, "build_min": 15.0, "recent": 3}
#: Where a limit came from (recorded as `hardware.time_source` of the cell's config).
SAME_CELL, SIMILAR, CEILING, SET, RERUN = "same cell", "similar cells", "ceiling", "set", "rerun"


@dataclass(frozen=True)
class Past:
    """One earlier successful run, as the history query gives it."""

    cell_id: str
    wall_s: float
    settings: Mapping[str, Any]


@dataclass(frozen=True)
class Limit:
    """A cell's time limit (minutes), its `--time-min` (None: not asked) and where it came from."""

    minutes: int
    floor: Optional[int]
    source: str


def work(settings: Mapping[str, Any]) -> float:
    """The samples one run steps through, up to a constant shared by similar cells."""
    if settings.get("mode") == "accuracy":
        return float(settings.get("epochs") or 1)
    batch = int(settings.get("batch_size") or 1)
    if settings.get("scaling") == "weak":
        batch *= max(1, int(settings.get("gpus") or 1)) * max(1, int(settings.get("nodes") or 1))
    return float((int(settings.get("warmup") or 0) + int(settings.get("iterations") or 1)) * batch)


def predict(cell_id: str, settings: Mapping[str, Any], history: Iterable[Past], ceiling_min: int,
            safety: float = DEFAULTS["safety"], allowance_min: float = DEFAULTS["allowance_min"],
            recent: int = DEFAULTS["recent"], max_time_min: Optional[int] = None, runs: int = 1,
            build_min: float = DEFAULTS["build_min"], builds: bool = False) -> Limit:
    """The limit of one cell's job from `history` (similar cells' successful runs, newest first):
    the job runs `runs` repeats one after another under one limit (job.run_cell), so a run's
    predicted time counts that many times; the allowance once, with `build_min` where the job
    `builds` its environment first."""
    if builds:
        allowance_min += build_min
    history = list(history)
    own = [p.wall_s for p in history if p.cell_id == cell_id][:recent]
    if own:
        minutes, source = max(own) / 60.0, f"{SAME_CELL} (longest of {len(own)} run(s): {max(own):.0f} s)"
    else:
        others: dict[str, list[Past]] = {}
        mode = settings.get("mode") or "throughput"
        for p in history:
            if (p.settings.get("mode") or "throughput") == mode:
                others.setdefault(p.cell_id, []).append(p)
        scaled = [max(p.wall_s for p in runs[:recent]) * work(settings) / work(runs[0].settings)
                  for runs in others.values()]
        if not scaled:
            return Limit(cap(ceiling_min, max_time_min), None, CEILING)
        minutes, source = max(scaled) / 60.0, f"{SIMILAR} ({len(scaled)} cell(s), scaled by work)"
    if runs > 1:
        minutes, source = minutes * runs, f"{source} x {runs} repeats"
    limit = cap(math.ceil(minutes * safety + allowance_min), max_time_min)
    floor = cap(math.ceil(minutes + allowance_min), limit) if own else None
    return Limit(limit, floor, source)


def cap(minutes: int, max_time_min: Optional[int]) -> int:
    """At least a minute, at most the partition's MaxTime (None: unlimited)."""
    minutes = max(1, int(minutes))
    return min(minutes, max_time_min) if max_time_min else minutes


def doubled(minutes: int, max_time_min: Optional[int]) -> Optional[int]:
    """A timed-out attempt's next limit: twice its own, capped by MaxTime; None when the attempt
    already had MaxTime (more cannot be asked)."""
    if max_time_min and minutes >= max_time_min:
        return None
    return cap(2 * minutes, max_time_min)


def options(config: Mapping[str, Any]) -> dict[str, Any]:
    """The sweep's `time_limits:` keys with their defaults, each checked (config_checks.ConfigError)."""
    given = dict(config.get("time_limits") or {})
    out: dict[str, Any] = {}
    for key, default in DEFAULTS.items():
        value, where = given.get(key, default), f"time_limits.{key}"
        if isinstance(default, int):
            out[key] = config_checks.integer(where, value, 1, way_out=f"use {where}=N with N >= 1")
        else:
            out[key] = config_checks.number(where, value, 1.0 if key == "safety" else 0.0)
    return out


def configured(hardware: Mapping[str, Any], cluster: Mapping[str, Any]) -> int:
    """A cell's time limit in minutes as configured: its hardware's `time_min`; for `auto` not
    learned yet (a cell checked before its submission learns it), the ceiling `time_max`; else
    the cluster's `time_min`, else DEFAULT_TIME_MIN."""
    limit = hardware.get("time_min")
    if limit == AUTO:
        limit = hardware.get("time_max")
    return int(limit or cluster.get("time_min") or DEFAULT_TIME_MIN)


def recorded(config: Mapping[str, Any]) -> Optional[Limit]:
    """The limit a cell's recorded config (sweep_cells.config: learn's or rerun's `time_min`,
    `time_floor` and `time_source` in its hardware) ran under; None where it had none (no
    `time_min`: a foreground run without a limit). What the report and `status` show."""
    hardware = config.get("hardware") or {}
    if not hardware.get("time_min"):
        return None
    floor = hardware.get("time_floor")
    return Limit(configured(hardware, config.get("cluster") or {}), int(floor) if floor else None,
                 str(hardware.get("time_source") or SET))


def learn(cells: Iterable[Any], rows: Optional[Rows], max_time_of: Callable[[Mapping[str, Any]], Optional[int]],
          cluster: Mapping[str, Any], builds: Callable[[Any], bool] = lambda cell: False) -> None:
    """Turns each cell's `hardware.time_min: auto` into minutes (predict, from `rows`' history;
    None: no database yet) and records where they came from in its config's hardware:
    `time_min`, `time_floor` (--time-min, or None) and `time_source`: what the dry run shows, the
    sweep records with the cell (sweep_cells.config) and rerun doubles. A number stays as set.
    `max_time_of(config)`: the MaxTime of the cell's partition, None where unlimited or unknown;
    `builds(cell)`: whether its job will build its environment first (asked only of a cell with a
    learned limit)."""
    histories: dict[tuple[str, ...], list[Past]] = {}
    for cell in cells:
        hardware = cell.config["hardware"]
        if hardware.get("time_min") != AUTO:
            hardware.setdefault("time_source", SET)
            continue
        names = tuple(str(cell.settings[k]) for k in ("framework", "model", "dataset", "hardware"))
        if names not in histories:
            found = queries.limit_history(rows, *names, setting_registry.NAMES, runstate.DONE) if rows is not None else []
            histories[names] = [Past(r.cell_id, float(r.wall_s), r._asdict()) for r in found]
        history = histories[names]
        limit = predict(cell.id, cell.settings, history, configured(hardware, cluster),
                        **options(cell.config), max_time_min=max_time_of(cell.config),
                        runs=int(cell.config.get("repeats") or 1), builds=bool(history) and builds(cell))
        hardware.update(time_min=limit.minutes, time_floor=limit.floor, time_source=limit.source)
