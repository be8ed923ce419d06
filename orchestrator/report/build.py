"""`orchestrator report`: a set of sweeps' tables, figures and page, written into one directory.

    <out>/index.html                 the page (self-contained: figures embedded)
    <out>/tables/<metric>.csv, .md   one table per metric (tables.SPECS)
    <out>/tables/scaling_nodes.*     images/s and efficiency against nodes (where a sweep asked for nodes)
    <out>/tables/time_limits.*       each cell's requested time limit and the time its job used
    <out>/figures/<name>.svg, .png   each figure (figures.py)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from orchestrator.report import figures, page, query, scaling_table, speedup, tables, time_table


@dataclass
class Report:
    """What a report wrote, and what it could not draw."""

    out: Path
    tables: list[Path] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    cells: int = 0

    @property
    def index(self) -> Path:
        return self.out / "index.html"


def write_report(session: Any, sweep_ids: Sequence[str], out: Path, noisy_cv: float) -> Report:
    """Reads the sweeps from the database and writes the report into `out` (made if needed;
    files of an earlier report there are replaced)."""
    report = Report(out)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    all_tables = tables.from_db(session, sweep_ids, noisy_cv)
    for table in all_tables:
        name = table.spec.metric.name
        report.tables += [tables.write_csv(table, out / "tables" / f"{name}.csv"),
                          tables.write_markdown(table, out / "tables" / f"{name}.md")]
    by_name = {t.spec.metric.name: t for t in all_tables}
    speed = by_name["images_per_sec"]
    nodes = None  # the node scaling series, where a sweep asked for more than one node
    if any((e.settings.get("nodes") or 1) > 1 for e in speed.entries):
        nodes = speedup.node_scaling(speed.entries, query.node_addrs(session, sweep_ids))
        report.tables += scaling_table.write(nodes, out / "tables")
    times = time_table.rows(speed, query.job_times(session, sweep_ids), query.recorded_configs(session, sweep_ids))
    report.tables += time_table.write(times, out / "tables")
    drawn, report.skipped = figures.write_all(speed, by_name["energy_per_image_j"],
                                              query.cores(session, sweep_ids), nodes, out / "figures")
    report.figures = [p for f in drawn for p in (f.svg, f.png)]
    report.cells = len(by_name["images_per_sec"].entries)
    html = page.render(query.sweeps(session, sweep_ids), query.span(session, sweep_ids), all_tables, drawn,
                       report.skipped, query.provenance(session, sweep_ids), noisy_cv, nodes, times)
    report.index.write_text(html, encoding="utf-8")
    return report
