"""Step timing: one clock for durations, another for stamps.

Durations use time.perf_counter (monotonic, the finest resolution available); event
stamps use time.time, because the monitor stamps its samples with time.time and the
measured window must be placed among them. The framework's step must return only when
the device has finished (it synchronises), otherwise the time measured is the time to
queue the work.
"""
import time


def timed(fn, *args):
    """Call fn(*args); return (its result, seconds it took)."""
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start
