"""The time table: each cell's requested time limit beside the time its job used (issue 27).

A row per cell of the throughput table, in its order: the limit its latest attempts' job asked
for (the config their sweep recorded: `time_limits.recorded`), with its `--time-min` and where
it came from (the same cell's runs, similar cells, the ceiling, as set, a rerun's doubling), and
the job's wall time, the median over the jobs that ran those attempts. A job runs every repeat
of its cell under one limit, so the time used is the job's (first run's start to last run's
end), not one run's; asked ÷ used says how far the limit was from the need (a job that ran out
of time used its whole limit: a ratio near 1 beside a timeout).

Files: `tables/time_limits.csv` (one row per cell: its settings, then the numbers) and
`tables/time_limits.md`; the page shows the same rows.
"""
from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from orchestrator.sweep import time_limits
from orchestrator.report.query import JobTime
from orchestrator.report.tables import Table
from orchestrator.setting_registry import NAMES as SETTINGS

#: The CSV's columns: the cell's settings and hardware label, then its limit and the time used.
CSV_COLUMNS = (*SETTINGS, "config", "limit_min", "time_min_floor", "source", "used_s", "jobs", "asked_over_used",
               "cell")
TITLE = "Time limits: requested and used"


@dataclass(frozen=True)
class Row:
    """One cell: the limit its job asked for (None: none recorded) and the time its jobs used."""

    label: str                       # the cell as the tables name it: row settings, then hardware
    settings: dict[str, Any]
    column: str                      # its hardware configuration (the tables' column label)
    cell: str
    limit: Optional[time_limits.Limit]
    used_s: Optional[float]          # median wall time over the jobs that ended; None: none ended
    jobs: int                        # the jobs that ended

    @property
    def ratio(self) -> Optional[float]:
        """Asked ÷ used (None where either is unknown)."""
        return self.limit.minutes * 60.0 / self.used_s if self.limit and self.used_s else None


def rows(table: Table, times: dict[str, list[JobTime]],
         configs: dict[tuple[str, str], dict[str, Any]]) -> list[Row]:
    """A row per cell of `table` (every cell the sweeps named once: the throughput table), from
    its jobs' times and the configs their sweeps recorded (query.job_times, query.recorded_configs).
    The limit is that of its newest job's sweep, else of any of the report's sweeps that recorded
    the cell (not yet run)."""
    out = []
    for row in table.rows:
        for column in table.columns:
            e = table.at(row, column)
            if e is None or e.cell is None:
                continue
            jobs = times.get(e.cell, [])
            ended = [j.wall_s for j in jobs if j.wall_s is not None]
            sweeps = [j.sweep_id for j in reversed(jobs)] + sorted(s for s, c in configs if c == e.cell)
            config = next((configs[s, e.cell] for s in sweeps if (s, e.cell) in configs), None)
            out.append(Row(" / ".join(table.row_values(row)), e.settings, table.column_label(column), e.cell,
                           time_limits.recorded(config) if config else None,
                           statistics.median(ended) if ended else None, len(ended)))
    return out


def minutes(seconds: Optional[float]) -> str:
    """A duration as the table shows it: seconds under two minutes, else minutes."""
    if seconds is None:
        return ""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def shown(row: Row) -> tuple[str, str, str, str]:
    """(limit, source, used, asked ÷ used) as the page and the Markdown print them."""
    limit = "none recorded" if row.limit is None else f"{row.limit.minutes} min" + (
        f" (--time-min {row.limit.floor})" if row.limit.floor else "")
    used = minutes(row.used_s) + (f" ({row.jobs} jobs)" if row.jobs > 1 else "") if row.jobs else "not yet ended"
    return limit, row.limit.source if row.limit else "", used, f"{row.ratio:.1f}" if row.ratio else ""


HEADERS = ("cell", "hardware", "limit asked", "limit from", "used by its job", "asked ÷ used")
NOTE = ("The limit each cell's job asked the scheduler for and where it came from (time_min: auto learns it from "
        "earlier runs); the time used is the job's wall time (every repeat of the cell runs in one job), the median "
        "over its jobs.")


def markdown(found: Sequence[Row]) -> str:
    out = [f"## {TITLE}", "", NOTE, "", "| " + " | ".join(HEADERS) + " |", "|---|---|--:|---|--:|--:|"]
    for r in found:
        out.append("| " + " | ".join(v.replace("|", "\\|") for v in (r.label, r.column, *shown(r))) + " |")
    return "\n".join(out) + "\n"


def write(found: Sequence[Row], tables_dir: Path) -> list[Path]:
    """tables/time_limits.csv and .md."""
    path = tables_dir / "time_limits.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for r in found:
            values = {**{k: r.settings.get(k) for k in SETTINGS}, "config": r.column,
                      "limit_min": r.limit.minutes if r.limit else None,
                      "time_min_floor": r.limit.floor if r.limit else None,
                      "source": r.limit.source if r.limit else None, "used_s": r.used_s, "jobs": r.jobs,
                      "asked_over_used": r.ratio, "cell": r.cell}
            writer.writerow({k: "" if v is None else repr(v) if isinstance(v, float) else v for k, v in values.items()})
    md = tables_dir / "time_limits.md"
    md.write_text(markdown(found))
    return [path, md]
