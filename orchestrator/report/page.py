"""The report as one self-contained HTML page (`index.html`): the sweeps' commands and dates,
what became of their cells, the figures (embedded as data: URIs, so the page needs nothing
else to open, offline, from a wiki or a mail), every table with its n/a reasons, and a
provenance summary. No script, style sheet, font or image is fetched from anywhere.

A small inline script checks, once the page has loaded, that every figure decoded; where one
did not, it says so at the top of the page (and records the counts on <body> as
`data-figures` / `data-figures-loaded`, which the browser test reads).
"""
from __future__ import annotations

import base64
import html
import time
from typing import Any, Optional, Sequence

from orchestrator import runstate
from orchestrator.report import query, scaling_table, time_table
from orchestrator.report.drawing import Written
from orchestrator.report.families import ORDER, family_of
from orchestrator.report.figures import throughput_name
from orchestrator.report.speedup import Series
from orchestrator.report.tables import NOT_MEASURED, NOT_YET_RUN, OK, Table, by_family, grid

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto; max-width: 1400px;
       padding: 0 1.5em; color: #1d1d1f; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
h3 { margin: 1.6em 0 0.2em; } .sub { color: #555; margin-top: 0; }
h3.family { font-size: 1.3em; margin-top: 2em; border-bottom: 1px solid #eee; } h4 { margin: 1.4em 0 0.2em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 13px; }
th, td { border: 1px solid #d6d6d6; padding: 3px 7px; vertical-align: top; }
th { background: #f3f4f6; text-align: left; } td.num { text-align: right; white-space: nowrap; }
td.num .v { font-weight: 600; } td .n { display: block; color: #666; font-size: 11px; }
td.noisy { background: #fff4e0; } td.noisy .n { color: #a05a00; }
td.na { background: #fbeaea; color: #8a1c1c; text-align: center; max-width: 16em; }
td.na .why { display: block; font-size: 11px; } td.na.waiting { background: #eaf1fb; color: #1c4a8a; }
td.na.quiet, td.na.hole { background: #f7f7f7; color: #777; }
ol.notes { font-size: 12px; color: #444; } code, pre { font: 12px/1.4 ui-monospace, Menlo, Consolas, monospace; }
pre { background: #f6f8fa; padding: 0.5em 0.8em; white-space: pre-wrap; word-break: break-all; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 12px; } #broken { display: none; background: #b00; color: white; padding: 0.5em 1em; }
.caveat { background: #fff4e0; border-left: 4px solid #b00; padding: 0.4em 0.8em; }
th.case { background: #e8eef7; } td.verdict.faster { color: #0a6b1f; } td.verdict.slower { color: #a00; font-weight: 600; }
.counts td { text-align: right; } dl.prov dt { font-weight: 600; margin-top: 0.6em; } dl.prov dd { margin-left: 1.2em; }
"""

#: Runs once the page has loaded: did every figure decode? (Says so on the page if not.)
SCRIPT = """
window.addEventListener('load', function () {
  var images = document.querySelectorAll('figure img'), loaded = 0;
  for (var i = 0; i < images.length; i++) {
    if (images[i].complete && images[i].naturalWidth > 0) { loaded++; }
  }
  document.body.setAttribute('data-figures', String(images.length));
  document.body.setAttribute('data-figures-loaded', String(loaded));
  if (loaded < images.length) {
    var note = document.getElementById('broken');
    note.textContent = (images.length - loaded) + ' of ' + images.length + ' figures did not load';
    note.style.display = 'block';
  }
});
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _when(t: Optional[float]) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "?"


def figure_html(figure: Written) -> str:
    """A figure embedded (its SVG as a data: URI) with its caption and its files."""
    data = base64.b64encode(figure.svg.read_bytes()).decode("ascii")
    return (f'<figure id="fig-{_e(figure.name)}"><img alt="{_e(figure.caption)}" src="data:image/svg+xml;base64,{data}">'
            f'<figcaption>{_e(figure.caption)} (files: figures/{_e(figure.svg.name)}, figures/{_e(figure.png.name)})'
            f'</figcaption></figure>')


def table_html(table: Table, family: str = "") -> str:
    """One metric's table with its notes (under the heading of its network `family`, if any)."""
    spec = table.spec
    head = "".join(f"<th>{_e(h)}</th>" for h in table.row_headers())
    head += "".join(f"<th>{_e(table.column_label(c))}</th>" for c in table.columns)
    rows, notes = grid(table)
    body = []
    for values, shown in rows:
        cells = "".join(f"<th>{_e(v)}</th>" for v in values)
        for c in shown:
            ref = f" <sup>[{c.note}]</sup>" if c.note else ""
            if c.value is not None:
                below = f'<span class="n">{_e(c.spread)}{ref}</span>' if c.spread or ref else ""
                cells += f'<td class="num{" noisy" if c.noisy else ""}"><span class="v">{_e(c.value)}</span>{below}</td>'
            else:
                kind = {None: " hole", NOT_MEASURED: " quiet", NOT_YET_RUN: " waiting"}.get(c.status, "")
                cells += f'<td class="na{kind}">n/a<span class="why">{_e(c.reason)}{ref}</span></td>'
        body.append(f"<tr>{cells}</tr>")
    notes_html = ('<ol class="notes">' + "".join(f"<li>{_e(t)}</li>" for t in notes) + "</ol>") if notes else ""
    return (f'<h4 id="t-{_e(family)}-{_e(spec.metric.name)}">{_e(spec.title)} ({_e(spec.unit)})</h4>'
            f'<p class="sub">{_e(spec.metric.description)}. Files: tables/{_e(spec.metric.name)}.csv, '
            f'tables/{_e(spec.metric.name)}.md</p>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{notes_html}")


def nodes_html(series: Optional[Sequence[Series]]) -> str:
    """The node scaling table (scaling_table.grid) with its notes and, where nodes shared one
    host, the caveat; nothing where no sweep asked for nodes."""
    if series is None:
        return ""
    if not series:
        return ('<h2 id="nodes">Scaling over nodes</h2><p>No cell was measured on 1 node and tried on more with every '
                'other setting equal.</p>')
    columns, rows, notes = scaling_table.grid(series)
    head = "<th>series</th>" + "".join(f"<th>{x} node{'s' if x != 1 else ''}</th>" for x in columns)
    body = []
    for s, shown in rows:
        cells = f"<th>{_e(s.label)}" + (' <span class="n">nodes on one host: emulated</span>' if s.shared_host
                                        else "") + "</th>"
        for c in shown:
            ref = f" <sup>[{c.note}]</sup>" if c is not None and c.note else ""
            if c is None:
                cells += '<td class="na hole">n/a<span class="why">not in these sweeps</span></td>'
            elif c.value is not None:
                cells += f'<td class="num"><span class="v">{_e(c.value)}</span><span class="n">{_e(c.below)}</span></td>'
            else:
                cells += f'<td class="na">n/a<span class="why">{_e(c.below)}{ref}</span></td>'
        body.append(f"<tr>{cells}</tr>")
    notes_html = ('<ol class="notes">' + "".join(f"<li>{_e(t)}</li>" for t in notes) + "</ol>") if notes else ""
    shared = sorted({s.shared_host for s in series if s.shared_host})
    caveat = (f'<p class="caveat"><strong>Emulated nodes.</strong> Rows marked so ran on {_e(scaling_table.CAVEAT)} '
              f'(recorded node addresses: {_e("; ".join(shared))}).</p>') if shared else ""
    return (f'<h2 id="nodes">Scaling over nodes</h2>{caveat}<p class="sub">Images/s, the median over the repeats of '
            f'each cell; speedup over the same cell on 1 node, efficiency = speedup / nodes. Files: '
            f'tables/scaling_nodes.csv, tables/scaling_nodes.md</p>'
            f'<table class="nodes"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>{notes_html}')


def times_html(found: Sequence[time_table.Row]) -> str:
    """Each cell's requested time limit beside the time its job used (time_table)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in time_table.HEADERS)
    body = "".join("<tr>" + f"<th>{_e(r.label)}</th><td>{_e(r.column)}</td>" + "".join(
        f'<td class="num">{_e(v)}</td>' if i != 1 else f"<td>{_e(v)}</td>" for i, v in enumerate(time_table.shown(r)))
        + "</tr>" for r in found)
    return (f'<h2 id="time-limits">{_e(time_table.TITLE)}</h2><p class="sub">{_e(time_table.NOTE)} Files: '
            f'tables/time_limits.csv, tables/time_limits.md</p>'
            f'<table class="times"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


def _counts(table: Table) -> str:
    """What became of the cells (from the throughput table: every cell once)."""
    counts: dict[str, int] = {}
    for e in table.entries:
        key = e.reason if e.status == runstate.FAILED else "measured" if e.status == OK else e.status
        counts[key] = counts.get(key, 0) + 1
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f'<table class="counts"><tr><th>cells</th><td>{len(table.entries)}</td></tr>{rows}</table>'


def _provenance(prov: dict[str, list[tuple[tuple[Any, ...], int]]]) -> str:
    items = []
    for title, values in prov.items():
        if not values:
            items.append(f"<dt>{_e(title)}</dt><dd>not recorded</dd>")
            continue
        shown = []
        for value, n in values:
            text = " ".join(_shown_value(title, v) for v in value if v is not None)
            shown.append(f"<code>{_e(text)}</code> ({n} run{'s' if n != 1 else ''})")
        items.append(f"<dt>{_e(title)}</dt><dd>{'; '.join(shown)}</dd>")
    return f'<dl class="prov">{"".join(items)}</dl>'


def _shown_value(title: str, value: Any) -> str:
    if title.startswith("git") and isinstance(value, bool):
        return "(dirty)" if value else "(clean)"
    if title.startswith("CPU") and isinstance(value, int):
        return f"({value} cores)"
    return str(value)


def render(sweeps: Sequence[query.SweepInfo], span: tuple[Optional[float], Optional[float]],
           tables: Sequence[Table], figures: Sequence[Written], skipped: Sequence[str],
           prov: dict[str, list[tuple[tuple[Any, ...], int]]], noisy_cv: float,
           nodes: Optional[Sequence[Series]] = None, times: Sequence[time_table.Row] = (), inference: str = "",
           builds: str = "") -> str:
    """The whole page; `nodes`: the node scaling series, None where no sweep asked for nodes;
    `times`: each cell's time limit and the time used (time_table); `inference`: the per-batch table's
    HTML (report/inference.py), empty where no inference cell was measured; `builds`: the builds
    section's (report/builds.py), empty where no cells differ only in their build."""
    title = "Benchmark report: " + (sweeps[0].id if len(sweeps) == 1 else f"{len(sweeps)} sweeps")
    commands = "".join(f"<tr><td><code>{_e(s.id)}</code></td><td>{_e(_when(s.created_at))}</td>"
                       f"<td>{_e(s.by or 'not recorded')}</td><td><pre>{_e(s.command)}</pre></td></tr>"
                       for s in sweeps)
    toc, tables_html = tables_by_family(tables)
    figures_html = figures_by_family(figures, tables[0] if tables else None)
    skipped_html = "".join(f"<li>{_e(s)}</li>" for s in skipped)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title><style>{STYLE}</style></head>
<body>
<div id="broken"></div>
<h1>{_e(title)}</h1>
<p class="sub">Measured {_e(_when(span[0]))} to {_e(_when(span[1]))}; report written {_e(_when(time.time()))}.
Each number is the median over a cell's repeats (the latest attempt of each); n repeats; noisy (shaded) where their
coefficient of variation exceeds {noisy_cv * 100:g}%. A cell without a number says why.</p>
<h2>Sweeps</h2>
<table><tr><th>sweep</th><th>created</th><th>by</th><th>command</th></tr>{commands}</table>
<h2>Cells</h2>
{_counts(tables[0]) if tables else ""}
<h2>Figures</h2>
{figures_html or "<p>No figure: nothing was measured.</p>"}
{f'<h3>Not drawn</h3><ul class="not-drawn">{skipped_html}</ul>' if skipped_html else ""}
{nodes_html(nodes)}
{inference}
{builds}
<h2>Tables</h2>
{toc}
{tables_html}
{times_html(times) if times else ""}
<h2>Provenance</h2>
<p class="sub">Over the runs that ran (the latest attempt of each repeat).</p>
{_provenance(prov)}
<script>{SCRIPT}</script>
</body></html>
"""


def tables_by_family(tables: Sequence[Table]) -> tuple[str, str]:
    """(contents, sections): each network family's tables (tables.by_family) under its heading, in
    families.ORDER, and a line of links per family."""
    toc, body = [], []
    for family, mine in by_family(tables):
        links = " · ".join(f'<a href="#t-{_e(family.name)}-{_e(t.spec.metric.name)}">{_e(t.spec.title)}</a>'
                           for t in mine)
        toc.append(f'<li><a href="#tables-{_e(family.name)}">{_e(family.title)}</a>: {links}</li>')
        body.append(f'<h3 class="family" id="tables-{_e(family.name)}">{_e(family.title)}</h3>'
                    + "".join(table_html(t, family.name) for t in mine))
    return f'<ul class="toc">{"".join(toc)}</ul>', "".join(body)


def figures_by_family(figures: Sequence[Written], speed: Optional[Table]) -> str:
    """The figures under their network family's heading (families.ORDER): a dataset × network's own
    under its network's family, those across networks (scaling, threads, energy) after them."""
    if not figures:
        return "<p>No figure: nothing was measured.</p>"
    cases = {(str(e.settings.get("dataset")), e.settings.get("model")) for e in speed.entries} if speed else set()
    family = {throughput_name(dataset, str(model)): family_of(model) for dataset, model in cases}
    groups: dict[Any, list[Written]] = {}
    for figure in figures:
        groups.setdefault(family.get(figure.name), []).append(figure)
    html = []
    for group in (*ORDER, None):
        if group in groups:
            name, title = (group.name, group.title) if group else ("across", "Across networks")
            html.append(f'<h3 class="family" id="figures-{_e(name)}">{_e(title)}</h3>'
                        + "".join(figure_html(f) for f in groups[group]))
    return "".join(html)
