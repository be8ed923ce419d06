"""A cell's time limit learned from the runs the results database already has (issue 27).

A fixed limit is either far too long (120 min for a 1-minute LeNet cell: the job cannot be
backfilled into a short hole of a busy cluster) or too short (the run is killed and its
measurement lost). With `hardware.time_min: auto` the limit is predicted at submission:

1. **the same cell**: the longest wall time (`ended_at - started_at`) of its `recent` latest
   successful runs (a user's most recent runs predict best; the longest of them is the cautious
   choice, since a limit too short costs far more than one too long);
2. else **similar cells** (same framework, model, dataset, hardware, mode, precision and input:
   `similar`; never a run on fewer devices or nodes than the cell, whose communication nothing
   models; in throughput mode only a run with a trusted step time, `trusted_step`): each run's
   start-up (its wall time less its measured steps, `step_time_mean` × iterations) kept as it
   was, and only its steps scaled to the cell's warm-up and iterations by step_factor: the batch
   per device, one sample's FLOPs and the CPU threads, each factor never below 1 (a smaller step
   is never assumed cheaper than the history's: it costs more per sample; a larger one scales
   linearly, which errs long since a larger batch uses a device better). In accuracy mode the
   whole wall time by epochs, old ÷ new devices and the per-sample cost, never below the
   history's. The largest such estimate counts;
3. else the hardware's ceiling `hardware.time_max` (what `time_min` was before).

A learned prediction P (minutes) becomes the limit `ceil(P × safety + allowance)`, capped by
the partition's MaxTime. The allowance is what a job spends outside its runs: start-up and the
monitor's idle window (`allowance_min`, 1: measured here, a job of the test cluster spent under a
second beside its run's wall time with its environment built), plus `build_min` where the cell's
environment is not built yet and the job will build it (a recipe changed since the runs learned
from: the runtime's `builds_in_job`). The defaults, safety 1.5 and 1 minute, are what
benchmarks/time_limits.py measured to meet the goal with one earlier run per cell (under 1 %
timed out, also counting Slurm's early USR2, median asked ÷ used under 2) for run-to-run
spreads up to 0.1 (10 %); a noisier site raises `time_limits.safety` to 2 and `floor_safety`
to 1.8 (figures: docs/slurm.md), and `retry.timeout`
retries what still times out (orchestrator/launch/retry.py). Only one learned from the same cell also
gives sbatch's `--time-min`, `ceil(P × floor_safety + allowance)`: Slurm's backfill may start the
job in a hole that long and then really give it only that (/work/shared/site-facts.md measured
it), so it must be a time the job surely finishes in: a measured one, never a scaled guess, with
its own margin (floor_safety 1.4: benchmarks/time_limits.py measured under 1 % of runs past it at
10 % spread with one earlier run, 0.21 %, 0.67 % counting Slurm's early USR2; without a margin,
20.95 % and 34.09 %). A cell whose latest attempt timed out gets at least twice that attempt's
limit (`predict`'s `timed_out_min`): what it had is known not to be enough.

The limit is kept in the cell's config (its hardware's `time_min`, `time_floor`, `time_source`:
what sbatch, the job and the sweep's record read), but never written into a config given:
`learn` returns new cells whose config and hardware are copies (expand.py shares the rest of a
composition's config between its cells), and nothing else writes a cell's config (rerun
deep-copies the recorded one first).

Everything here is a pure function of the history given (tested on canned history); the
questions asked of the database are run_history.limit_history, limit_timeouts and limit_left_out.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional

from orchestrator.sweep import config_checks
from orchestrator.store import queries
from orchestrator import runstate, setting_registry
from orchestrator.store.sql_adapters import Rows
from trainers.common import failure_classes, flops, inputs
from trainers.common.errors import Unsupported
from trainers.common.settings import TRANSFORMER_SHAPE

#: `hardware.time_min` that asks for a learned limit.
AUTO = "auto"
#: The time limit (minutes) of a cell whose hardware and cluster name none.
DEFAULT_TIME_MIN = 60
#: The defaults of the sweep's `time_limits:` keys (conf/config.yaml).
DEFAULTS = {"safety": 1.5, "floor_safety": 1.4, "allowance_min": 1.0, "build_min": 15.0, "recent": 3}
#: Where a limit came from (recorded as `hardware.time_source` of the cell's config).
SAME_CELL, SIMILAR, CEILING, SET, RERUN = "same cell", "similar cells", "ceiling", "set", "rerun"
#: The fewest measured steps, and seconds of them, whose step time a similar cell's guess trusts.
MIN_TIMED_STEPS, MIN_TIMED_S = 20, 5.0


@dataclass(frozen=True)
class Past:
    """One earlier successful run, as the history query gives it: its wall time and, where its
    result file had one, its mean measured step time (`step_s`, the metric step_time_mean): the
    part of the wall time that scales with the work; the rest is start-up, compile and warm-up."""

    cell_id: str
    wall_s: float
    settings: Mapping[str, Any]
    step_s: Optional[float] = None


@dataclass(frozen=True)
class Limit:
    """A cell's time limit (minutes), its `--time-min` (None: not asked) and where it came from."""

    minutes: int
    floor: Optional[int]
    source: str


def _devices(settings: Mapping[str, Any]) -> int:
    """The devices a run steps on: its GPUs, or one process per node on CPU, times its nodes."""
    return max(1, int(settings["gpus"])) * int(settings["nodes"])


def _per_device(settings: Mapping[str, Any]) -> float:
    """The samples each device steps through per step: the batch under weak scaling, the batch
    split over its devices under strong scaling (trainers/common/scaling.py)."""
    batch = float(settings["batch_size"])
    return batch if settings.get("scaling") == "weak" else batch / _devices(settings)


def _sample_flops(settings: Mapping[str, Any]) -> Optional[float]:
    """One sample's training FLOPs by the layer tables (trainers/common/flops.py) at the input
    the model sees; else its height x width (never its channels alone: a first convolution over
    3 channels costs little more than over 1, issue 35); None if unknown."""
    try:
        return _model_flops(str(settings["model"]), str(setting_registry.shape_of(settings)),
                            settings.get("seq_len"), *(settings.get(k) for k in TRANSFORMER_SHAPE))
    except KeyError:
        return None


@functools.lru_cache(maxsize=None)
def _model_flops(model: str, like: str, seq_len: Optional[int] = None, *shape_: Optional[int]) -> float:
    """_sample_flops of a model on a data shape (a sequence network's at its seq_len, a Transformer's
    at its layers, width, heads), counted once (the layer tables are walked)."""
    shape = inputs.input_shape(model, like, seq_len)
    try:
        network = inputs.network_shape(model, *shape_)
        return float(flops.training_flops(model, shape, inputs.DATASETS[like].classes, network))
    except (KeyError, ValueError, Unsupported):
        return float(shape[1] * shape[2]) if len(shape) == 3 else float(shape[0])


def _ratios(cell: Mapping[str, Any], past: Mapping[str, Any]) -> tuple[float, float, float]:
    """One step of `cell` over one of `past`: samples per device, one sample's FLOPs (1 where
    unknown) and CPU threads (fewer: up to proportionally slower; more: never assumed faster).
    Precision is not scaled: similar cells share it (`similar`)."""
    work, work_past = _sample_flops(cell), _sample_flops(past)
    threads = max(1.0, float(past["threads"]) / float(cell["threads"]))
    return _per_device(cell) / _per_device(past), (work / work_past if work and work_past else 1.0), threads


def work_ratio(cell: Mapping[str, Any], past: Mapping[str, Any]) -> float:
    """How many times one step of `cell` is the work of one step of `past` (_ratios' product)."""
    return math.prod(_ratios(cell, past))


def step_factor(cell: Mapping[str, Any], past: Mapping[str, Any]) -> float:
    """How many times one step of `cell` costs one step of `past`, erring long: each of _ratios
    never below 1. A smaller batch per device or a smaller input costs less per step but more
    per sample (a step's fixed overhead, a device used worse), by how much nothing here knows:
    the history's step time is the floor, factor by factor (a batch 64 times smaller on an input
    64 times larger is not the same step). More work scales linearly, which errs long: a larger
    batch uses a device better. Measured: benchmarks/time_limits.py's similar cells."""
    return math.prod(max(1.0, r) for r in _ratios(cell, past))


def trusted_step(past: "Past") -> bool:
    """Whether `past`'s measured step time may be extrapolated: at least MIN_TIMED_STEPS steps
    and MIN_TIMED_S seconds of them (a few short steps are mostly timer and warm-up noise)."""
    iterations = int(past.settings["iterations"])
    return bool(past.step_s) and iterations >= MIN_TIMED_STEPS and past.step_s * iterations >= MIN_TIMED_S


def scaled(settings: Mapping[str, Any], past: "Past") -> float:
    """A similar cell's run `past` scaled to `settings` (seconds), erring long. Throughput mode
    (similar only with a trusted step time): the start-up (wall time less the measured steps)
    kept as it was, and the steps by step_factor, the cell's warm-up steps at full cost.
    Accuracy mode: an epoch is the whole dataset, so a device's samples scale with old ÷ new
    devices whatever the scaling (never assumed fewer), each sample's cost by the work ratio per
    sample (with the step floor); the result file separates no start-up here, so the whole wall
    time scales, and never below the history's (the start-up never shrinks)."""
    old = past.settings
    if settings["mode"] == "accuracy":
        epochs = float(settings["epochs"]) / float(old["epochs"])
        devices = max(1.0, _devices(old) / _devices(settings))
        per_sample = step_factor(settings, old) * _per_device(old) / _per_device(settings)
        return past.wall_s * max(1.0, epochs * devices * per_sample)
    steps = int(settings["warmup"]) + int(settings["iterations"])
    start_up = max(0.0, past.wall_s - (past.step_s or 0.0) * int(old["iterations"]))
    return start_up + (past.step_s or 0.0) * step_factor(settings, old) * steps


#: What `similar` requires equal: each changes the speed by what nothing here models (a
#: precision's speed depends on the device's units; `input=memory` skips the pipeline a
#: `pipeline` run pays for).
SAME = ("mode", "precision", "input")


def similar(settings: Mapping[str, Any], past: "Past") -> bool:
    """Whether a run of another cell (same framework, model, dataset and hardware: the history
    query's) may be scaled to this one: SAME equal; in throughput mode a trusted step time
    (trusted_step); and not a cell on more devices or nodes than the run, under either scaling
    (the communication they add is not modelled: a guess would err short, and under strong
    scaling the smaller batch each does saves less than it adds: benchmarks/time_limits.py); and
    on GPUs both or on CPU both (_devices counts a CPU run as one device: a GPU's step time says
    nothing of a CPU's)."""
    old = past.settings
    if not all(settings[k] == old[k] for k in SAME):
        return False
    if (int(settings["gpus"]) > 0) != (int(old["gpus"]) > 0):
        return False
    if settings["mode"] != "accuracy" and not trusted_step(past):
        return False
    more = _devices(settings) > _devices(old) or int(settings["nodes"]) > int(old["nodes"])
    return not more


def predict(cell_id: str, settings: Mapping[str, Any], history: Iterable[Past], ceiling_min: int,
            safety: float = DEFAULTS["safety"], allowance_min: float = DEFAULTS["allowance_min"],
            recent: int = DEFAULTS["recent"], max_time_min: Optional[int] = None, runs: int = 1,
            build_min: float = DEFAULTS["build_min"], builds: bool = False,
            floor_safety: float = DEFAULTS["floor_safety"], timed_out_min: Optional[float] = None) -> Limit:
    """The limit of one cell's job from `history` (similar cells' successful runs, newest first):
    the job runs `runs` repeats one after another under one limit (job.run_cell), so a run's
    predicted time counts that many times; the allowance once, with `build_min` where the job
    `builds` its environment first. `--time-min` (the floor) only from the same cell's runs,
    with its own margin `floor_safety`. `timed_out_min`: the limit the cell's latest timed-out
    attempt had, if it has one newer than its last success: the limit is then at least twice
    that (as a rerun's, `doubled`), since that one is known not to be enough."""
    if builds:
        allowance_min += build_min
    limit = _learned(cell_id, settings, list(history), ceiling_min, recent, max_time_min, runs, builds and build_min,
                     safety, allowance_min, floor_safety)
    if timed_out_min:
        more = doubled(math.ceil(timed_out_min), max_time_min) or cap(math.ceil(timed_out_min), max_time_min)
        if more > limit.minutes:
            source = f"{limit.source}; timed out at {timed_out_min:.0f} min before: at least twice that"
            return Limit(more, limit.floor, source)
    return limit


def _learned(cell_id: str, settings: Mapping[str, Any], history: list[Past], ceiling_min: int, recent: int,
             max_time_min: Optional[int], runs: int, build_min: float, safety: float, allowance_min: float,
             floor_safety: float) -> Limit:
    """predict's limit from the history alone: the same cell's, else similar cells', else the ceiling."""
    own = [p.wall_s for p in history if p.cell_id == cell_id][:recent]
    if own:
        minutes, source = max(own) / 60.0, f"{SAME_CELL} (longest of {len(own)} run(s): {max(own):.0f} s)"
    else:
        others: dict[str, list[Past]] = {}
        for p in history:
            if similar(settings, p):
                others.setdefault(p.cell_id, []).append(p)
        if not others:
            return Limit(cap(ceiling_min, max_time_min), None, CEILING)
        estimates = [max(scaled(settings, p) for p in mine[:recent]) for mine in others.values()]
        minutes, source = max(estimates) / 60.0, f"{SIMILAR} ({len(estimates)} cell(s), scaled by work)"
    if runs > 1:
        minutes, source = minutes * runs, f"{source} x {runs} repeats"
    if build_min:
        source = f"{source} + {build_min:g} min to build its environment"
    limit = cap(math.ceil(minutes * safety + allowance_min), max_time_min)
    floor = cap(math.ceil(minutes * floor_safety + allowance_min), limit) if own else None
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
            out[key] = config_checks.number(where, value, 1.0 if key.endswith("safety") else 0.0)
    return out


def _options(config: Mapping[str, Any], read: dict[int, tuple[Any, dict[str, Any]]]) -> dict[str, Any]:
    """`options(config)`, kept in `read` by the identity of the config's `time_limits:` mapping
    (with it: no other object takes its id), which a sweep's cells share: checked once, not per cell."""
    given = config.get("time_limits")
    known = read.get(id(given))
    if known is None or known[0] is not given:
        known = read[id(given)] = (given, options(config))
    return known[1]


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
          cluster: Mapping[str, Any], builds: Callable[[Any], bool] = lambda cell: False) -> list[Any]:
    """The cells with each `hardware.time_min: auto` turned into minutes (predict, from `rows`'
    history; None: no database yet) and where they came from: `time_min`, `time_floor`
    (--time-min, or None) and `time_source` in its config's hardware: what the dry run shows, the
    sweep records with the cell (sweep_cells.config) and rerun doubles. A number stays as set.
    `max_time_of(config)`: the MaxTime of the cell's partition, None where unlimited or unknown;
    `builds(cell)`: whether its job will build its environment first (asked only of a cell with a
    learned limit).

    Nothing given is written: each cell that changes is a new Cell with a new config, its top
    level and its hardware copied (expand.py shares the rest of a composition's config between
    its cells, and a limit written into a shared dict became every later cell's, issue 35).
    A history row without a valid wall time (NULL, or an end before its start) is left out
    and counted in the source of its own cell; a cell's latest timeout (that no success
    followed) makes its limit at least twice the one it timed out at (predict)."""
    histories: dict[tuple[str, ...], History] = {}
    read: dict[int, tuple[Any, dict[str, Any]]] = {}  # a `time_limits:` mapping's options, read once per mapping
    out = []
    for cell in cells:
        hardware = cell.config["hardware"]
        if hardware.get("time_min") != AUTO:
            out.append(cell if hardware.get("time_source") else _with_hardware(cell, time_source=SET))
            continue
        names = tuple(str(cell.settings[k]) for k in ("framework", "model", "dataset", "hardware"))
        if names not in histories:
            histories[names] = History.read(rows, names)
        found = histories[names]
        limit = predict(cell.id, cell.settings, found.runs, configured(hardware, cluster),
                        **_options(cell.config, read), max_time_min=max_time_of(cell.config),
                        runs=int(cell.config.get("repeats") or 1), builds=bool(found.runs) and builds(cell),
                        timed_out_min=found.timed_out.get(cell.id))
        invalid = found.left_out.get(cell.id)
        source = limit.source + (f"; {invalid} run(s) without a valid wall time left out" if invalid else "")
        out.append(_with_hardware(cell, time_min=limit.minutes, time_floor=limit.floor, time_source=source))
    return out


@dataclass(frozen=True)
class History:
    """What the database says of the cells with one set of names: their successful runs with a
    valid wall time (newest first), per cell the count left out for want of one, and per cell the
    limit (minutes) its latest timeout that no success followed had."""

    runs: list[Past]
    left_out: Mapping[str, int]
    timed_out: Mapping[str, float]

    @classmethod
    def read(cls, rows: Optional[Rows], names: tuple[str, ...]) -> "History":
        if rows is None:
            return cls([], {}, {})
        # lazy: status imports this module (recorded) and reads without SQLAlchemy; learn holds a session
        from orchestrator.store import run_history

        found = run_history.limit_history(rows, *names, setting_registry.NAMES, runstate.DONE)
        runs = [Past(r.cell_id, float(r.wall_s), setting_registry.filled(r._asdict()),  # defaults filled in
                     float(r.step_s) if r.step_s else None) for r in found]
        timed_out: dict[str, float] = {}
        for r in run_history.limit_timeouts(rows, *names, runstate.FAILED, failure_classes.TIMEOUT, runstate.DONE):
            if r.cell_id not in timed_out:  # newest first: the latest one
                config = queries.recorded_config(rows, r.sweep_id, r.cell_id)
                limit = (config.get("hardware") or {}).get("time_min") if isinstance(config, dict) else None
                known = [float(v) for v in (limit, (r.wall_s or 0) / 60.0) if isinstance(v, (int, float)) and v > 0]
                if known:
                    timed_out[r.cell_id] = max(known)
        return cls(runs, run_history.limit_left_out(rows, *names, runstate.DONE), timed_out)


def _with_hardware(cell: Any, **changes: Any) -> Any:
    """`cell` with these keys of its hardware changed: a new Cell, config and hardware dict."""
    return cell.with_config({**cell.config, "hardware": {**cell.config["hardware"], **changes}})
