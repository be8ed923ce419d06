"""Joules over a run's measured window from a GPU's samples, the two ways metrics.gpu_metrics
measures them: NVML's energy counter (exact where it covers the window) or the trapezoid rule
over power (any GPU that reports power). Pure functions of the samples' times and readings,
apart from the metrics, so each can be checked on hand-made numbers."""
from __future__ import annotations

from typing import Optional

import numpy as np


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


def counter_energy(times: list[float], millijoules: list[float], start: float, end: float) -> Optional[float]:
    """Joules over [start, end] from NVML's total-energy counter (mJ), read off the samples by
    linear interpolation at both ends; None when the samples do not cover the window or the
    counter went backwards (a driver reload resets it)."""
    order = np.argsort(times)
    t, e = np.asarray(times, float)[order], np.asarray(millijoules, float)[order]
    if len(t) < 2 or t[0] > start or t[-1] < end or np.any(np.diff(e) < 0):
        return None
    return float(np.interp(end, t, e) - np.interp(start, t, e)) / 1000.0
