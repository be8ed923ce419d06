"""Scaling: speedups of cells that differ only in `gpus`, or only in `threads`.

Multi-GPU scaling compares a cell on N GPUs with the same cell on one GPU (every other setting
equal, the hardware included): speedup = images/s on N ÷ images/s on 1, parallel efficiency =
speedup ÷ N, ideal 1. Under `strong` scaling the global batch is split across the GPUs, under
`weak` each GPU takes the whole batch; the ideal speedup is N either way, and each series says
which it is. CPU thread scaling compares a cell's thread counts with its fewest (every other
setting equal): speedup = images/s ÷ images/s at the fewest threads t0, ideal t ÷ t0, beside
the node's physical cores (more threads than cores share them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from orchestrator.report.labels import hardware_label
from orchestrator.report.tables import OK, Entry


@dataclass(frozen=True)
class Point:
    x: int                   # GPUs or threads
    median: float            # images/s
    speedup: float           # over the series' base
    efficiency: float        # speedup / ideal speedup
    ideal: float


@dataclass
class Series:
    """One cell's settings swept over GPUs or threads."""

    settings: dict[str, Any]  # the settings the points share (the swept one None)
    over: str                 # "gpus" or "threads"
    points: list[Point] = field(default_factory=list)
    cells: list[str] = field(default_factory=list)  # the points' cell ids
    cores: Optional[int] = None  # threads: the node's physical cores

    @property
    def label(self) -> str:
        s = self.settings
        where = hardware_label(s["hardware"], s["gpus"]) if self.over == "threads" else str(s["hardware"])
        text = f"{s['framework']} {s['model']}/{s['dataset']} on {where}"
        if self.over == "gpus":
            text += f" ({s['scaling']})"
        return text


def _series(entries: Sequence[Entry], over: str, base: Any = None) -> list[Series]:
    """Entries with a number grouped by every setting but `over`; groups with at least two
    values of it and its base (`base`, else the smallest), in a stable order."""
    groups: dict[tuple, list[Entry]] = {}
    for e in entries:
        if e.status != OK or e.median is None or e.settings.get(over) is None:
            continue
        if over == "gpus" and not e.settings["gpus"]:
            continue  # the CPU is not a point on a GPU-scaling line
        key = tuple(sorted((k, v) for k, v in e.settings.items() if k != over))
        groups.setdefault(key, []).append(e)
    out = []
    for key, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        members.sort(key=lambda e: e.settings[over])
        xs = [e.settings[over] for e in members]
        if len(set(xs)) < 2:
            continue
        x0 = base if base is not None else xs[0]
        if x0 not in xs:
            continue
        m0 = next(e.median for e in members if e.settings[over] == x0)
        if not m0:
            continue
        series = Series(dict(key) | {over: None}, over)
        for e in members:
            x = e.settings[over]
            speedup, ideal = e.median / m0, x / x0
            series.points.append(Point(x, e.median, speedup, speedup / ideal, ideal))
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
