"""The polling loop: samplers polled on a fixed period, every sample timestamped and written.

One loop serves both phases of a run. Before the trainer starts, `measure_idle` runs it in the
caller's thread for a fixed time over the samplers marked `idle` (the GPUs'), giving the idle
power that net energy is taken against; then `start` runs it on a thread over every sampler
until `stop`, with one last sample at the stop so a short run is still covered.

Samples are stamped with `time.time()`, the clock the trainer stamps its events with, so the
metrics can be cut to the trainer's measured window (warmup_end → run_end) afterwards instead of
averaging over the job's lifetime. The schedule is fixed (tick n at start + n·period), so a slow
sample does not shift the later ones. Each sample is appended to the run's `samples.jsonl` as it
is taken, so a crash keeps what was measured; idle-phase samples carry `"phase": "idle"`.

A sampler that cannot start is recorded and dropped, never fatal: `SamplerUnavailable` (nothing
to measure here: CPU node, gpus=0, no NVML) as `unavailable` with its reason, anything else as
`error`; `describe` gives result.json's `monitor` list either way.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path
from typing import IO, Any, Iterator, Optional

from orchestrator.job.monitor.sampler import Sampler, SamplerUnavailable

IDLE = "idle"  # the phase of the samples taken before the trainer starts


class Monitor:
    """Polls its samplers every `period_s` (idle phase, then on a thread) and appends the samples
    to `path` and to `samples`."""

    def __init__(self, samplers: list[Sampler], period_s: float = 0.1, path: Path | None = None):
        if period_s <= 0:
            raise ValueError(f"monitor.period_s={period_s} must be > 0")
        self.samplers = samplers
        self.period_s = period_s
        self.path = path
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._counts: dict[Optional[str], dict[str, int]] = {None: {}, IDLE: {}}  # phase -> name -> samples
        self._errors: dict[str, str] = {}
        self._unavailable: dict[str, tuple[str, str]] = {}  # name -> (method, reason)
        self._idle: dict[str, dict[str, Any]] = {}          # name -> {"idle_s", "idle_samples"}

    def _start_one(self, sampler: Sampler, pid: int) -> bool:
        """Starts a sampler; one that cannot start is recorded and dropped, never fatal."""
        try:
            sampler.start(pid)
            return True
        except SamplerUnavailable as exc:
            self._unavailable[sampler.name] = (getattr(sampler, "method", ""), str(exc))
        except Exception as exc:
            self._errors[sampler.name] = f"{type(exc).__name__}: {exc}"
        self.samplers.remove(sampler)
        return False

    def measure_idle(self, seconds: float) -> "Monitor":
        """Before the trainer starts: polls the samplers with `idle = True` (the GPU's) alone, in
        this thread, for `seconds`.

        They watch this process meanwhile (the trainer has no pid yet). Their samples carry
        `"phase": "idle"`, go to the same file and list, and give the idle power
        (metrics.gpu_metrics). Nothing is polled for `seconds <= 0`.
        """
        idle = [s for s in list(self.samplers) if getattr(s, "idle", False)]
        idle = [s for s in idle if self._start_one(s, os.getpid())]
        if idle and seconds > 0:
            self._poll(idle, IDLE, seconds)
            self._idle = {s.name: {"idle_s": seconds, "idle_samples": self._counts[IDLE].get(s.name, 0)}
                          for s in idle}
        return self

    def start(self, pid: int) -> "Monitor":
        """Starts every sampler on the trainer's process tree and polls them on a thread until `stop`."""
        for sampler in list(self.samplers):
            self._start_one(sampler, pid)
        self._thread = threading.Thread(target=self._poll, args=(self.samplers, None), name="monitor", daemon=True)
        self._thread.start()
        return self

    def _poll(self, samplers: list[Sampler], phase: Optional[str], seconds: Optional[float] = None) -> None:
        """The loop: a sample of each sampler per tick until `seconds` have been covered, or
        (`seconds` None) until `stop`, then one last sample at the stop."""
        with self._output() as out:
            start = time.monotonic()
            tick = 0
            while not self._stop.is_set():
                self._take(samplers, phase, out)
                tick += 1  # fixed schedule: a slow sample does not shift later ones
                if seconds is not None and tick * self.period_s >= seconds:
                    return
                delay = start + tick * self.period_s - time.monotonic()
                if delay > 0:
                    self._stop.wait(delay)
            self._take(samplers, phase, out)  # one last sample at the stop, so a short run is still covered

    @contextlib.contextmanager
    def _output(self) -> Iterator[Optional[IO[str]]]:
        """The samples file, opened for appending (the idle phase and the run share it), or None."""
        if not self.path:
            yield None
            return
        with open(self.path, "a") as out:
            yield out

    def _take(self, samplers: list[Sampler], phase: Optional[str], out: Optional[IO[str]]) -> None:
        """One sample of each sampler, stamped `t`; a sampler that fails keeps its first error."""
        counts = self._counts[phase]
        for sampler in samplers:
            t = time.time()
            try:
                reading = sampler.sample()
            except Exception as exc:
                self._errors.setdefault(sampler.name, f"{phase + ': ' if phase else ''}{type(exc).__name__}: {exc}")
                continue
            record = {"t": t, "sampler": sampler.name, **({"phase": phase} if phase else {}), **reading}
            self.samples.append(record)
            counts[sampler.name] = counts.get(sampler.name, 0) + 1
            if out:
                out.write(json.dumps(record) + "\n")
        if out:
            out.flush()

    def stop(self) -> list[dict[str, Any]]:
        """Stops the loop (after its last sample), closes the samplers; returns every sample taken."""
        self._stop.set()
        if self._thread:
            self._thread.join()
        for sampler in self.samplers:
            sampler.close()
        return self.samples

    def describe(self) -> list[dict[str, Any]]:
        """How each sampler measured: method, period and sample count, the idle phase's length
        and count where it ran, an error, or why it was unavailable (result.json `monitor`)."""
        described = []
        for sampler in self.samplers:
            described.append({**sampler.describe(), "period_s": self.period_s,
                              "samples": self._counts[None].get(sampler.name, 0),
                              **self._idle.get(sampler.name, {}),
                              **({"error": self._errors[sampler.name]} if sampler.name in self._errors else {})})
        for name, error in self._errors.items():
            if name not in {s.name for s in self.samplers}:
                described.append({"name": name, "error": error, "samples": 0})
        for name, (method, reason) in self._unavailable.items():
            described.append({"name": name, "method": method, "samples": 0, "unavailable": reason})
        return described
