"""Inference's figures: batch latency percentiles, jitter and the validity rule (docs/measurement.md).

An inference run (trainers/common/inference.py) times each batch alone, the device synchronised, and
sends each as a `step` event with no loss; the measured window is training's (warmup_end .. run_end),
so throughput (`images_per_sec`: samples/s), the host and GPU samples and energy come from
orchestrator/job/metrics.py as for training. This module adds what only inference has: the batch
latencies' distribution, the first batch apart from the steady state, and whether the run met the rule.

Percentiles follow MLPerf LoadGen's rank rule (mlcommons/inference, loadgen/results.cc,
PerformanceSummary::ProcessLatencies: `sample_latencies[sample_count * percentile]` of the sorted
latencies): the value at 0-based index floor(n x p), no interpolation, so a percentile is always a
latency that was measured. numpy's percentile has no method that is this rule for every n (`higher`
differs at n=10, p=0.05; `inverted_cdf` wherever n x p is a whole number), so it is written here as
the index itself.

A percentile is stated only where the count supports it (SUPPORTED_FROM: the 99th from 100 batches,
the 99.9th from 1,000, where the tail holds at least one batch beyond it); below that it is left out
(NULL in `results`: n/a) and `latency_batches` says why. The run's rule (RULE: 64 batches and 10 s of
measured time, the declared defaults of min_batches and min_seconds) is the project's: a run that
timed less, because its cell lowered them (CI's short runs) or the trainer stopped short, is flagged
`below_rule` and its reason says so. A run that asked for more (run_start's min_batches and min_seconds:
`+preset=mlperf_like`'s 1,000 batches and 600 s) is held to what it asked for.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Optional

import numpy as np

from trainers.common import settings

#: metric -> the percentile it is, as a fraction
#: (LoadGen's report: p50, p90, p95, p97, p99, p99.9, loadgen/results.cc)
PERCENTILES = {"latency_p50_s": 0.5, "latency_p90_s": 0.9, "latency_p95_s": 0.95, "latency_p97_s": 0.97,
               "latency_p99_s": 0.99, "latency_p999_s": 0.999}
#: percentile metric -> the fewest timed batches it is stated from (at least one batch beyond it)
SUPPORTED_FROM = {"latency_p50_s": 1, "latency_p90_s": 10, "latency_p95_s": 20, "latency_p97_s": 34,
                  "latency_p99_s": 100, "latency_p999_s": 1000}
#: The consistency constant that makes the MAD estimate a normal distribution's standard deviation.
MAD_TO_SIGMA = 1.4826
#: The validity rule: at least this many measured batches and this many measured seconds.
RULE = {"batches": settings.DEFAULTS["min_batches"], "seconds": settings.DEFAULTS["min_seconds"]}


def loadgen_percentile(ordered: np.ndarray, p: float) -> float:
    """The p-th fraction of ascending `ordered` latencies by LoadGen's rule: the value at index
    floor(n x p) (n x p computed in doubles, as LoadGen's size_t cast of it does)."""
    return float(ordered[min(int(len(ordered) * p), len(ordered) - 1)])


def jitter(latencies: np.ndarray) -> float:
    """1.4826 x the median absolute deviation from the median: a spread a few slow batches do not
    inflate, equal to the standard deviation for normally distributed latencies."""
    return MAD_TO_SIGMA * float(np.median(np.abs(latencies - np.median(latencies))))


def distribution(latencies: Iterable[float]) -> dict[str, float]:
    """Mean, jitter, count and each percentile its count supports, of measured batch latencies."""
    values = np.asarray([float(v) for v in latencies], dtype=np.float64)
    if not len(values):
        return {}
    ordered = np.sort(values)
    out = {"latency_mean_s": float(values.mean()), "latency_jitter_s": jitter(values),
           "latency_batches": float(len(values))}
    for name, p in PERCENTILES.items():
        if len(values) >= SUPPORTED_FROM[name]:
            out[name] = loadgen_percentile(ordered, p)
    return out


def below_rule(batches: int, seconds: float, rule: Optional[dict[str, float]] = None) -> Optional[str]:
    """Why a run of `batches` measured batches over `seconds` misses the rule (RULE), or None."""
    rule = RULE if rule is None else rule
    if batches >= rule["batches"] and seconds >= rule["seconds"]:
        return None
    return (f"below the validity rule: {batches} batches over {seconds:.3g} s measured, the rule is at least "
            f"{rule['batches']} batches and {rule['seconds']:g} s; its latencies are indicative only (raise "
            f"min_batches and min_seconds)")


def own_rule(start: dict[str, Any]) -> dict[str, float]:
    """The rule a run is held to: the project's (RULE), raised to the minimums its run_start says it
    asked for where those are more (a preset's), never lowered by them."""
    asked = {"batches": start.get("min_batches"), "seconds": start.get("min_seconds")}
    return {k: max(RULE[k], v) if number(v) else RULE[k] for k, v in asked.items()}


def inference_metrics(events: list[dict[str, Any]], measured: list[dict[str, Any]]) -> tuple[dict[str, float], list[str]]:
    """The latency metrics of an inference run's events (none for a training run) and the notes its
    reader must see: a percentile left out for its count, a run below the rule. `measured` are the
    measured `step` events (metrics.measured_steps)."""
    start = next((e for e in events if e.get("event") == "run_start"), {})
    if start.get("phase") != "inference":
        return {}, []
    dts = [float(s["dt"]) for s in measured if number(s.get("dt"))]
    out = distribution(dts)
    notes = []
    first = next((e for e in events if e.get("event") == "first_batch"), None)
    if first is not None and number(first.get("dt")):
        out["first_batch_s"] = float(first["dt"])
        out["first_batch_cold"] = 1.0 if first.get("cold") else 0.0
    missing = [name for name in PERCENTILES if dts and name not in out]
    if missing:
        notes.append(f"n/a for {len(dts)} batches: " + ", ".join(
            f"{name} (needs {SUPPORTED_FROM[name]})" for name in missing))
    why = below_rule(len(dts), float(sum(dts)), own_rule(start))
    out["below_rule"] = 0.0 if why is None else 1.0
    if why:
        notes.append(why)
    return out, notes


def number(value: Any) -> bool:
    """A JSON number of an event (bools are ints to Python, not numbers to the protocol)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
