"""The monitor: samplers polled on a fixed period beside the trainer, every sample timestamped.

Samples are stamped with `time.time()`, the clock the trainer stamps its events with, so the
metrics can be cut to the trainer's measured window (warmup_end → run_end) afterwards instead of
averaging over the job's lifetime. Samplers are independent objects with one small interface —
`start(pid)`, `sample() -> dict`, `close()`, `describe() -> dict` — so the NVML sampler slots in
beside the host sampler without the monitor changing. Raw samples go to a JSONL file in the run
directory as they are taken, so a crash keeps what was measured.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Protocol

import psutil


class Sampler(Protocol):
    name: str
    method: str

    def start(self, pid: int) -> None: ...
    def sample(self) -> dict[str, Any]: ...
    def close(self) -> None: ...
    def describe(self) -> dict[str, Any]: ...


class HostSampler:
    """CPU and memory of the trainer's process tree (psutil) and of the whole host."""

    name = "host"
    method = "psutil"

    def __init__(self) -> None:
        self._root: psutil.Process | None = None
        self._procs: dict[int, psutil.Process] = {}

    def start(self, pid: int) -> None:
        self._root = psutil.Process(pid)
        self._procs = {}
        psutil.cpu_percent(None)  # prime: the next call measures since now
        self._tree()

    def _tree(self) -> list[psutil.Process]:
        """The root and its descendants, reusing Process objects so cpu_percent has a baseline."""
        try:
            current = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return []
        alive = []
        for proc in current:
            known = self._procs.get(proc.pid)
            if known is None:
                known = self._procs[proc.pid] = proc
                try:
                    known.cpu_percent(None)  # first call only sets the baseline
                except psutil.Error:
                    continue
            alive.append(known)
        return alive

    def sample(self) -> dict[str, Any]:
        cpu, rss = 0.0, 0
        for proc in self._tree():
            try:
                with proc.oneshot():
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
            except psutil.Error:  # exited between listing and reading
                continue
        return {
            "proc_cpu_percent": cpu,
            "proc_rss_bytes": rss,
            "host_cpu_percent": psutil.cpu_percent(None),
            "host_mem_used_bytes": psutil.virtual_memory().used,
        }

    def close(self) -> None:
        self._procs = {}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "method": self.method, "cpus": psutil.cpu_count()}


class Monitor:
    """Polls its samplers every `period_s` on a thread and appends the samples to `path`."""

    def __init__(self, samplers: list[Sampler], period_s: float = 0.1, path: Path | None = None):
        if period_s <= 0:
            raise ValueError(f"monitor.period_s={period_s} must be > 0")
        self.samplers = samplers
        self.period_s = period_s
        self.path = path
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._counts = {s.name: 0 for s in samplers}
        self._errors: dict[str, str] = {}

    def start(self, pid: int) -> "Monitor":
        for sampler in list(self.samplers):
            try:
                sampler.start(pid)
            except Exception as exc:  # a sampler that cannot start is recorded, never fatal
                self._errors[sampler.name] = f"{type(exc).__name__}: {exc}"
                self.samplers.remove(sampler)
        self._thread = threading.Thread(target=self._loop, name="monitor", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        out = open(self.path, "a") if self.path else None
        try:
            start = time.monotonic()
            tick = 0
            while not self._stop.is_set():
                self._take(out)
                tick += 1  # fixed schedule: a slow sample does not shift later ones
                delay = start + tick * self.period_s - time.monotonic()
                if delay > 0:
                    self._stop.wait(delay)
            self._take(out)  # one last sample at the stop, so a short run is still covered
        finally:
            if out:
                out.close()

    def _take(self, out) -> None:
        for sampler in self.samplers:
            t = time.time()
            try:
                record = sampler.sample()
            except Exception as exc:
                self._errors.setdefault(sampler.name, f"{type(exc).__name__}: {exc}")
                continue
            record = {"t": t, "sampler": sampler.name, **record}
            self.samples.append(record)
            self._counts[sampler.name] += 1
            if out:
                out.write(json.dumps(record) + "\n")
        if out:
            out.flush()

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        if self._thread:
            self._thread.join()
        for sampler in self.samplers:
            sampler.close()
        return self.samples

    def describe(self) -> list[dict[str, Any]]:
        """How each sampler measured: method, period and sample count (for result.json)."""
        described = []
        for sampler in self.samplers:
            described.append({**sampler.describe(), "period_s": self.period_s,
                              "samples": self._counts.get(sampler.name, 0),
                              **({"error": self._errors[sampler.name]} if sampler.name in self._errors else {})})
        for name, error in self._errors.items():
            if name not in {s.name for s in self.samplers}:
                described.append({"name": name, "error": error, "samples": 0})
        return described


def default_samplers() -> list[Sampler]:
    """The samplers a job runs. The NVML sampler joins this list in its issue."""
    return [HostSampler()]
