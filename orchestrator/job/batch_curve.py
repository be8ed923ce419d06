"""batch_size=auto's result (issue 38 item 4): one run, its points as per-batch metrics.

The trainer (trainers/common/batch_search.py) measures batch 1, 2, 4, ... in one process, each point
a fixed-batch inference run of its own (`point` {batch}, then first_batch ... run_end). Here each
point's events are measured as a fixed run's are (metrics.compute, handed in: this module imports no
other stage's code) and the run keeps them all as ONE run:
    - the run's own metrics (the `results` view's columns) are its fastest point's (by batch ÷ p50
      latency, `steady_rate`: what the trainer's stop rule compares), with `auto_batch`
      naming that batch, `auto_points` the points measured and `auto_oom_batch` the batch the device
      could not hold (absent where throughput stopped the search);
    - every point's figures as `auto.b<batch, 5 digits>.<metric>` (images_per_sec, latency_p50_s,
      latency_p90_s, latency_p99_s, latency_batches, first_batch_s, below_rule and, where measured, the GPU
      and CPU energy per sample), which the report's latency-throughput figure and per-batch table read
      (report/query.inference_points).
Why one run and not one row per point: the run is one measurement of one cell (one job, one start,
one failure class, one repeat); as several runs its points would count as repeats of the cell in the
summary's statistics and in `latest`, and a point is no cell a sweep could ask for by itself.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Iterable

PREFIX = "auto.b"
#: The figures kept for each point.
POINT_METRICS = ("images_per_sec", "latency_p50_s", "latency_p90_s", "latency_p99_s", "latency_batches",
                 "first_batch_s", "below_rule", "energy_per_image_j", "cpu_energy_per_image_j")
_NAME = re.compile(r"^auto\.b(\d{5})\.(\w+)$")


def is_search(events: Iterable[dict[str, Any]]) -> bool:
    """Whether a run's events are a batch search's (they hold `point` events)."""
    return any(e.get("event") == "point" for e in events)


def segments(events: list[dict[str, Any]]) -> list[tuple[int, list[dict[str, Any]]]]:
    """(batch, that point's events with the run's run_start first) for each point, in order."""
    start = [e for e in events if e.get("event") == "run_start"][:1]
    found: list[tuple[int, list[dict[str, Any]]]] = []
    for event in events:
        if event.get("event") == "point":
            found.append((int(event["batch"]), list(start)))
        elif found and event.get("event") not in ("point_oom", "search_end", "run_start"):
            found[-1][1].append(event)
    return found


def steady_rate(batch: int, got: Any) -> float:
    """A point's samples/s as the search compares them (batch_search.decision_rate): batch ÷ its
    median batch latency, which a few batches stalled by a neighbour do not move; its summed-time
    samples/s where no median was stated."""
    p50 = got.get("latency_p50_s")
    return batch / p50 if p50 else got["images_per_sec"]


def compute(events: list[dict[str, Any]], measure: Callable[..., Any], metrics_type: type, **kw: Any) -> Any:
    """The run's metrics (`metrics_type`, as `measure` gives them) from a batch search's events."""
    points = [(batch, measure(part, **kw)) for batch, part in segments(events)]
    points = [(batch, got) for batch, got in points if got.get("images_per_sec")]
    end = next((e for e in events if e.get("event") == "search_end"), None)
    oom = next((e for e in events if e.get("event") == "point_oom"), None)
    if not points:
        return metrics_type({}, None, "no measured point in the batch search")
    best_batch, best = max(points, key=lambda p: steady_rate(*p))
    values = dict(best, auto_batch=float(best_batch), auto_points=float(len(points)))
    if oom is not None:
        values["auto_oom_batch"] = float(oom["batch"])
    for batch, got in points:
        values.update({f"{PREFIX}{batch:05d}.{name}": got[name] for name in POINT_METRICS if name in got})
    stopped = end["stopped"] if end else "the search sent no search_end: it ended early"
    reason = "; ".join(filter(None, (f"batch search stopped: {stopped}", best.reason)))
    return metrics_type(values, best.window, reason, best.energy, best.implausible)


def curve(metrics: dict[str, float]) -> list[dict[str, float]]:
    """A run's points from its metrics rows, by batch: [{batch, images_per_sec, latency_p50_s...}]."""
    points: dict[int, dict[str, float]] = {}
    for name, value in metrics.items():
        match = _NAME.match(name)
        if match:
            points.setdefault(int(match.group(1)), {"batch": float(match.group(1))})[match.group(2)] = value
    return [points[b] for b in sorted(points)]
