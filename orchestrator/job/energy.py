"""Joules over a run's measured window from a GPU's samples, the two ways metrics.gpu_metrics
measures them: NVML's energy counter (exact where it covers the window) or the trapezoid rule
over power (any GPU that reports power); and the CPU packages' from RAPL's wrapping counters. Pure functions of the samples' times and readings,
apart from the metrics, so each can be checked on hand-made numbers; and what a reader of the GPU
figures must be told about the samples behind them (gpu_notes)."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

#: A stretch of the window longer than this with no GPU sample is named in the run's reason.
GAP_WARN_S = 1.0


def trapezoid_energy(times: list[float], watts: list[float], start: float, end: float) -> float:
    """Joules over [start, end] from power samples: the trapezoid rule over the samples inside,
    with the power at `start` and `end` interpolated from their neighbours (held flat beyond the
    first and last sample)."""
    if end <= start or not times:
        return 0.0
    order = np.argsort(times)
    t, p = np.asarray(times, float)[order], np.asarray(watts, float)[order]
    inside = (t > start) & (t < end)
    tt = np.concatenate(([start], t[inside], [end]))
    pp = np.concatenate(([np.interp(start, t, p)], p[inside], [np.interp(end, t, p)]))
    return float(np.sum((tt[1:] - tt[:-1]) * (pp[1:] + pp[:-1]) / 2.0))


def counter_energy(times: list[float], millijoules: list[float], start: float, end: float,
                   per_joule: float = 1000.0) -> Optional[float]:
    """Joules over [start, end] from an energy counter (NVML's total energy, in mJ; `per_joule`
    counts per joule), read off the samples by linear interpolation at both ends; None when the
    samples do not cover the window or the counter went backwards (a driver reload resets it)."""
    order = np.argsort(times)
    t, e = np.asarray(times, float)[order], np.asarray(millijoules, float)[order]
    if len(t) < 2 or t[0] > start or t[-1] < end or np.any(np.diff(e) < 0):
        return None
    return float(np.interp(end, t, e) - np.interp(start, t, e)) / per_joule


def unwrapped(counts: list[float], wraps_at: float) -> list[float]:
    """A counter that wraps to 0 after `wraps_at` (RAPL's energy_uj at max_energy_range_uj), made
    monotonic: each step down is a wrap, so the step is what was left to the top plus the new
    count. Sampled far faster than one wrap (about a minute at the top of a big package's power
    range, at the monitor's 0.1 s), so never two wraps between samples."""
    out, added = [], 0.0
    for i, count in enumerate(counts):
        if i and count < counts[i - 1]:
            added += wraps_at
        out.append(count + added)
    return out


def rapl_metrics(samples: list[dict[str, Any]], window: dict[str, Any]) -> dict[str, float]:
    """The CPU packages' energy over the window, summed over packages (J, and per image), from the
    RAPL sampler's counters; none where a package's samples do not cover the window."""
    rapl = sorted((s for s in samples if s.get("sampler") == "rapl" and s.get("energy_uj")), key=lambda s: s["t"])
    if not rapl or any(len(s["energy_uj"]) != len(rapl[0]["energy_uj"]) for s in rapl):
        return {}
    total = 0.0
    for zone in range(len(rapl[0]["energy_uj"])):
        counts = unwrapped([s["energy_uj"][zone] for s in rapl], float(rapl[0]["range_uj"][zone]))
        joules = counter_energy([s["t"] for s in rapl], counts, window["start"], window["end"], per_joule=1e6)
        if joules is None:
            return {}
        total += joules
    out = {"cpu_energy_j": total}
    if window.get("images"):
        out["cpu_energy_per_image_j"] = total / window["images"]
    return out


def gpu_notes(samples: list[dict[str, Any]], inside: list[dict[str, Any]], window: dict[str, Any],
              gpu: dict[str, float], energy: Optional[dict[str, Any]]) -> list[str]:
    """What the reader of the GPU figures must know: no power in the window, a gap the energy
    bridges, or a window too short for the energy to be more than coarse."""
    if any(s.get("sampler") == "gpu" and s.get("phase") != "idle" for s in samples) and "gpu_power_avg_w" not in gpu:
        return ["no GPU power: no GPU sample with power within the window"]
    notes = []
    if energy and energy["max_gap_s"] > GAP_WARN_S:
        notes.append(f"GPU samples missing for {energy['max_gap_s']:.2f} s of the window: energy "
                     f"bridges the gap, the GPU averages do not see it")
    in_window = sum(1 for s in inside if s.get("sampler") == "gpu")
    if energy and in_window < 20:
        notes.append(f"energy over a short window ({window['end'] - window['start']:.2f} s, {in_window} "
                     f"GPU samples) is coarse; raise iterations")
    return notes
