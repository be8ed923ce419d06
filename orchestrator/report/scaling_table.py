"""The node scaling table: images/s and scaling efficiency per cell against its node count.

A row per node scaling series (speedup.node_scaling: cells that differ only in `nodes`), a
column per node count; an entry is the images/s median with the speedup over one node and the
efficiency (speedup ÷ nodes), or n/a and why (refused across nodes, failed ...), the whole
reason in a numbered note. A row whose runs' nodes shared one host (the test cluster's emulated
nodes) says so: its efficiency measures the collectives on one machine, not a network.

Files: `tables/scaling_nodes.csv`, one row per series × node count (the series' settings with
that `nodes`, then the numbers), and `tables/scaling_nodes.md`; the page shows the same grid.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from orchestrator.report.speedup import Series
from orchestrator.report.tables import OK, Notes, number
from orchestrator.metric_registry import BY_NAME
from orchestrator.setting_registry import NAMES as SETTINGS

#: The CSV's columns: the cell's settings (its `nodes` the column's count), then its numbers.
CSV_COLUMNS = (*SETTINGS, "gpus_total", "median", "speedup", "efficiency", "ideal", "status", "reason", "detail",
               "shared_host", "cell")
#: What a row whose nodes shared a host says (the page and the Markdown put it under the table).
CAVEAT = ("nodes that shared one host (emulated, as on the test cluster: several slurmd on one machine, one "
          "address): their efficiency measures the frameworks' collectives on that machine and says nothing "
          "about a network")


@dataclass(frozen=True)
class Shown:
    """One entry: images/s and the speedup and efficiency under it, or n/a and why."""

    value: Optional[str]
    below: str = ""
    note: Optional[int] = None


def counts(series: Sequence[Series]) -> list[int]:
    """The node counts, the table's columns."""
    return sorted({p.x for s in series for p in s.points} | {m.x for s in series for m in s.missing})


def grid(series: Sequence[Series]) -> tuple[list[int], list[tuple[Series, list[Optional[Shown]]]], list[str]]:
    """(node counts, a row per series: its entries per count (None: not in these sweeps), the notes)."""
    notes, columns, rows = Notes(), counts(series), []
    for s in series:
        points, missing = {p.x: p for p in s.points}, {m.x: m for m in s.missing}
        shown: list[Optional[Shown]] = []
        for x in columns:
            if x in points:
                p = points[x]
                shown.append(Shown(number(p.median, BY_NAME["images_per_sec"]),
                                   f"speedup {p.speedup:.2f}, efficiency {p.efficiency * 100:.0f}%"))
            elif x in missing:
                m = missing[x]
                shown.append(Shown(None, m.reason, notes.ref(m.detail) if m.detail else None))
            else:
                shown.append(None)
        rows.append((s, shown))
    return columns, rows, notes.texts


def markdown(series: Sequence[Series]) -> str:
    columns, rows, notes = grid(series)
    out = ["## Scaling over nodes (images/s)", "", "The median over each cell's repeats; speedup over the same cell on "
           "1 node, efficiency = speedup / nodes (strong: the global batch split over the nodes; weak: a batch per "
           "node).", "", "| series | " + " | ".join(f"{x} node{'s' if x != 1 else ''}" for x in columns) + " |",
           "|---|" + "--:|" * len(columns)]
    for s, shown in rows:
        cells = ["not in these sweeps" if c is None else (f"{c.value} ({c.below})" if c.value is not None
                 else f"n/a ({c.below})") + (f" [{c.note}]" if c.note else "") for c in shown]
        label = s.label + (" (nodes on one host: emulated)" if s.shared_host else "")
        out.append("| " + " | ".join(v.replace("|", "\\|") for v in [label, *cells]) + " |")
    if notes:
        out += [""] + [f"{i}. {text}".replace("|", "\\|") for i, text in enumerate(notes, 1)]
    if any(s.shared_host for s in series):
        out += ["", f"Emulated: {CAVEAT}."]
    return "\n".join(out) + "\n"


def csv_rows(series: Sequence[Series]) -> list[dict[str, object]]:
    out = []
    for s in series:
        points, missing = {p.x: p for p in s.points}, {m.x: m for m in s.missing}
        for x in counts([s]):
            p, m = points.get(x), missing.get(x)
            out.append({**{k: s.settings.get(k) for k in SETTINGS}, "nodes": x,
                        "gpus_total": s.settings["gpus"] * x,
                        "median": p.median if p else None, "speedup": p.speedup if p else None,
                        "efficiency": p.efficiency if p else None, "ideal": p.ideal if p else None,
                        "status": OK if p else "n/a", "reason": m.reason if m else "", "detail": m.detail if m else "",
                        "shared_host": s.shared_host or "", "cell": p.cell if p else None})
    return out


def write(series: Sequence[Series], tables_dir: Path) -> list[Path]:
    """tables/scaling_nodes.csv and .md."""
    path = tables_dir / "scaling_nodes.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in csv_rows(series):
            writer.writerow({k: "" if v is None else repr(v) if isinstance(v, float) else v for k, v in row.items()})
    md = tables_dir / "scaling_nodes.md"
    md.write_text(markdown(series))
    return [path, md]
