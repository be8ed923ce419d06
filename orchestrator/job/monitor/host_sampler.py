"""The host sampler: CPU and memory of the trainer's process tree and of the whole node (psutil).

The trainer may do its work in children (DDP workers, MPI ranks, Caffe's `caffe train`), so the
whole tree is walked at every sample, and each process keeps its psutil object from one sample
to the next: `cpu_percent` is a rate since the previous call on the same object.
"""
from __future__ import annotations

from typing import Any

import psutil


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
