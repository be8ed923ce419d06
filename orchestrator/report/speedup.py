"""Scaling: speedups of cells that differ only in `gpus`, or only in `threads`.

Multi-GPU scaling compares a cell on N GPUs with the same cell on one GPU (every other setting
equal, the hardware included): speedup = images/s on N ÷ images/s on 1, parallel efficiency =
speedup ÷ N, ideal 1. Under `strong` scaling the global batch is split across the GPUs, under
`weak` each GPU takes the whole batch; the ideal speedup is N either way, and each series says
which it is. CPU thread scaling compares a cell's thread counts with its fewest (every other
setting equal): speedup = images/s ÷ images/s at the fewest threads t0, ideal t ÷ t0, beside
the node's physical cores (more threads than cores share them).

Node scaling compares a cell on N nodes with the same cell on one node, as GPU scaling does
(speedup and efficiency over nodes=1, strong or weak as the cell says), and keeps the node
counts without a number as n/a points with their reason (a framework refused across nodes). Where
both `gpus` and `nodes` vary, the same cells are also put against the job's GPUs in all (gpus ×
nodes), over the cell on one GPU of one node. A series whose runs' nodes shared a host (their
recorded addresses repeat, or are loopback: the test cluster's emulated nodes) says so: its
efficiency measures the frameworks' collectives on one machine, not a network.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from orchestrator.report.labels import hardware_label
from orchestrator.report.tables import OK, Entry


@dataclass(frozen=True)
class Point:
    x: int                   # GPUs or threads
    median: float            # images/s
    speedup: float           # over the series' base
    efficiency: float        # speedup / ideal speedup
    ideal: float
    cell: Optional[str] = None  # the cell measured there


@dataclass(frozen=True)
class Missing:
    """A point of a series without a number: its x, and why (a table entry's reason and detail)."""

    x: int
    reason: str
    detail: str = ""


@dataclass
class Series:
    """One cell's settings swept over GPUs, threads, nodes or GPUs in all (gpus × nodes)."""

    settings: dict[str, Any]  # the settings the points share (the swept one None)
    over: str                 # "gpus", "threads", "nodes" or "gpus_total"
    points: list[Point] = field(default_factory=list)
    cells: list[str] = field(default_factory=list)  # the points' cell ids
    cores: Optional[int] = None  # threads: the node's physical cores
    missing: list[Missing] = field(default_factory=list)  # nodes: the node counts without a number
    shared_host: Optional[str] = None  # nodes: how its runs' nodes shared a host; None: on their own

    @property
    def label(self) -> str:
        s = self.settings
        where = hardware_label(s["hardware"], s["gpus"]) if self.over == "threads" else str(s["hardware"])
        text = f"{s['framework']} {s['model']}/{s['dataset']} on {where}"
        if self.over == "gpus_total":
            text += f" ×{s['gpus']} per node"
        if self.over != "threads":
            text += f" ({s['scaling']})"
        return text


def _series(entries: Sequence[Entry], over: str, base: Any = None, keep_missing: bool = False) -> list[Series]:
    """Entries with a number grouped by every setting but `over`; groups with at least two
    values of it and its base (`base`, else the smallest), in a stable order. With
    `keep_missing`, entries without a number count as values too and become Missing points."""
    groups: dict[tuple, list[Entry]] = {}
    for e in entries:
        if e.settings.get(over) is None or (e.status != OK or e.median is None) and not keep_missing:
            continue
        if over == "gpus" and not e.settings["gpus"]:
            continue  # the CPU is not a point on a GPU-scaling line
        key = tuple(sorted((k, v) for k, v in e.settings.items() if k != over))
        groups.setdefault(key, []).append(e)
    out = []
    for key, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        members.sort(key=lambda e: e.settings[over])
        xs = [e.settings[over] for e in members]
        measured = {e.settings[over]: e.median for e in members if e.status == OK and e.median is not None}
        if len(set(xs)) < 2:
            continue
        x0 = base if base is not None else xs[0]
        m0 = measured.get(x0)
        if x0 not in xs or not m0 and not keep_missing:
            continue
        series = Series(dict(key) | {over: None}, over)
        for e in members:
            x = e.settings[over]
            if e.status != OK or e.median is None or not m0:
                why = e.reason or e.status if m0 or x == x0 else f"no number at {over}={x0} to scale from"
                series.missing.append(Missing(x, why, e.detail))
                continue
            speedup, ideal = e.median / m0, x / x0
            series.points.append(Point(x, e.median, speedup, speedup / ideal, ideal, e.cell))
            series.cells += [e.cell] if e.cell else []
        out.append(series)
    return out


def gpu_scaling(entries: Sequence[Entry]) -> list[Series]:
    """Speedup and efficiency from 1 to N GPUs, per cell that ran on one GPU and on more."""
    return _series(entries, "gpus", base=1)


def thread_scaling(entries: Sequence[Entry], cores: dict[str, int]) -> list[Series]:
    """Speedup over the fewest threads, per cell run with several thread counts; `cores`
    (cell id -> the node's physical cores) marks where threads start to share cores."""
    out = _series(entries, "threads")
    for series in out:
        found = [cores[c] for c in series.cells if c in cores]
        series.cores = max(found) if found else None
    return out


def node_scaling(entries: Sequence[Entry], addrs: Mapping[str, Sequence[str]]) -> list[Series]:
    """Images/s, speedup and efficiency from 1 to N nodes, per cell that ran on one node and on
    more (or was refused, or failed, there: n/a points); `addrs` (cell id -> its runs' recorded
    node addresses, each run's comma-separated) says where the nodes shared a host."""
    out = _series(entries, "nodes", base=1, keep_missing=True)
    for series in out:
        series.shared_host = shared_host([a for c in series.cells for a in addrs.get(c, ())])
    return out


def shared_host(runs: Sequence[str]) -> Optional[str]:
    """How runs' nodes shared a host, from their node addresses (each run's comma-separated, in
    rank order): addresses that repeat within a run, or loopback ones (nodes on one host,
    emulated: several slurmd on one machine); None where every run's nodes had their own."""
    shared = set()
    for run in runs:
        addrs = run.split(",")
        if len(set(addrs)) < len(addrs) or any(_loopback(a) for a in addrs):
            shared.add(f"{len(addrs)} nodes at {', '.join(sorted(set(addrs)))}")
    return "; ".join(sorted(shared)) or None


def _loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"


def total_gpu_scaling(entries: Sequence[Entry]) -> list[Series]:
    """Where cells differ in both `gpus` and `nodes`: speedup and efficiency against the job's GPUs
    in all (gpus × nodes), over the same cell on one GPU of one node, a series per GPUs per node."""
    groups: dict[tuple, list[Entry]] = {}
    for e in entries:
        if e.status == OK and e.median is not None and e.settings.get("gpus"):
            key = tuple(sorted((k, v) for k, v in e.settings.items() if k not in ("gpus", "nodes")))
            groups.setdefault(key, []).append(e)
    out = []
    for key, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if len({e.settings["gpus"] for e in members}) < 2 or len({e.settings["nodes"] for e in members}) < 2:
            continue
        m0 = next((e.median for e in members if e.settings["gpus"] == e.settings["nodes"] == 1), None)
        if not m0:
            continue
        for gpus in sorted({e.settings["gpus"] for e in members}):
            line = sorted((e for e in members if e.settings["gpus"] == gpus), key=lambda e: e.settings["nodes"])
            if len(line) < 2:
                continue
            series = Series(dict(key) | {"gpus": gpus, "nodes": None}, "gpus_total")
            for e in line:
                x = gpus * e.settings["nodes"]
                series.points.append(Point(x, e.median, e.median / m0, e.median / m0 / x, float(x), e.cell))
                series.cells += [e.cell] if e.cell else []
            out.append(series)
    return out
