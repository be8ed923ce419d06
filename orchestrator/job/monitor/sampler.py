"""What a sampler is: the small interface the polling loop drives, and the way one stands aside.

Samplers are independent objects, so a new kind of measurement (the NVML sampler beside the
host's, a future one for another accelerator) slots in without the loop changing. The loop
stamps each sample with the time and the sampler's name; a sampler returns only its readings.
"""
from __future__ import annotations

from typing import Any, Protocol


class Sampler(Protocol):
    """One source of readings, polled by `Monitor`.

    `start(pid)` points it at the process tree to watch (called again with the trainer's pid
    after an idle phase: a second call must only retarget); `sample()` returns one reading as a
    JSON-able dict; `close()` releases what `start` opened; `describe()` says how it measured,
    for result.json. A sampler whose class sets `idle = True` is also polled alone before the
    trainer starts (`Monitor.measure_idle`).
    """

    name: str
    method: str

    def start(self, pid: int) -> None: ...
    def sample(self) -> dict[str, Any]: ...
    def close(self) -> None: ...
    def describe(self) -> dict[str, Any]: ...


class SamplerUnavailable(RuntimeError):
    """A sampler that has nothing to measure here (no library, no device, gpus=0): not an error.

    Raised from `start`; the monitor records the reason as the sampler's `unavailable` and the
    run carries on without it.
    """
