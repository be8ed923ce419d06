"""Inference by batch size (issue 38 item 7): the latency-throughput figure and the per-batch table.

Both read query.inference_points: a fixed cell is one point at its batch size, a batch_size=auto run
gives each batch its search measured. An inference cell's other tables (tables.py) show one number per
cell, which hides an auto run's curve; here every batch is a row, and the figure a line:
    - figure `latency_throughput`: a panel per dataset x network; x samples/s, y batch latency (p50 a
      solid line with dots, p99 dotted with crosses where 100 batches support it), one colour per series
      (framework, and compile mode, hardware or precision where the panel's points differ in them),
      each point labelled by its batch size. Up and to the left is worse: the curve shows what a larger
      batch buys in throughput and costs in latency, which one table column per metric does not.
    - table `inference_by_batch` (HTML on the page, CSV beside the other tables): a row per series and
      batch, samples/s, p50, p99, the first batch, GPU and CPU energy per sample, the validity rule.
"""
from __future__ import annotations

import csv
import html
from pathlib import Path
from typing import Any, Sequence

from orchestrator.report.drawing import Written, case_title, key_legend, log_axis, panels, save, spans, styles
from orchestrator.report.query import Point
from orchestrator.report.tables import ROW_SHOWN
from orchestrator.setting_registry import NAMES as SETTING_NAMES

#: What tells a panel's series apart, beside the framework, where the panel's points differ in it: every
#: setting but the panel's own (dataset, model), the framework (each label's first word: tables.ROW_SHOWN)
#: and the batch (each point's own; an auto search's points are marked `auto`).
SERIES = tuple(name for name in SETTING_NAMES if name not in ROW_SHOWN and name not in ("batch_size", "batch_search"))
#: The table's columns: (metric, header, scale to the shown unit).
COLUMNS = (("images_per_sec", "samples/s", 1.0), ("latency_p50_s", "p50 ms", 1e3), ("latency_p99_s", "p99 ms", 1e3),
           ("first_batch_s", "first batch ms", 1e3), ("energy_per_image_j", "GPU J/sample", 1.0),
           ("cpu_energy_per_image_j", "CPU J/sample", 1.0))
NOT_DRAWN = "latency against throughput: no inference cell was measured"


def _case(p: Point) -> tuple[str, str]:
    return (str(p.settings.get("dataset")), str(p.settings.get("model")))


def _series(points: Sequence[Point]) -> dict[tuple[str, str], dict[str, list[Point]]]:
    """case -> series label -> its points by batch. A label is the framework, what else differs among
    all the points (so that one series has one label, and one colour, in every panel) and `auto` for a
    batch_size=auto run's points (a line of their own beside the fixed cells')."""
    differ = [k for k in SERIES if len({str(p.settings.get(k)) for p in points}) > 1]
    out: dict[tuple[str, str], dict[str, list[Point]]] = {}
    for p in sorted(points, key=_case):
        label = " ".join([str(p.settings.get("framework"))] + [f"{k}={p.settings.get(k)}" for k in differ]
                         + (["auto"] if p.searched else []))
        out.setdefault(_case(p), {}).setdefault(label, []).append(p)
    return {case: {label: sorted(series[label], key=lambda p: p.batch) for label in sorted(series)}
            for case, series in out.items()}


def latency_throughput(points: Sequence[Point], out: Path) -> Written | str:
    """The figure (see the module's docstring), or why it is not drawn."""
    drawn = [p for p in points if p.values.get("images_per_sec") and p.values.get("latency_p50_s")]
    if not drawn:
        return NOT_DRAWN
    from matplotlib.lines import Line2D  # lazy: matplotlib (~0.3 s) only in the processes that draw

    by_case = _series(drawn)
    fig, cells, ncols = panels(len(by_case), (4.4, 3.4), margin=(0.5, 0.9))
    colour_of = styles([label for series in by_case.values() for label in series], "colour")
    for (case, series), (ax,) in zip(by_case.items(), cells):
        _panel(ax, case, series, colour_of)
    key_legend(fig, colour_of, "series", {}, "", [
        (Line2D([], [], color="#444", marker="o", linestyle="-"), "p50 batch latency"),
        (Line2D([], [], color="#444", marker="x", linestyle=":"), "p99 batch latency (from 100 batches)")],
        columns=2 * ncols)
    return save(fig, out, "latency_throughput", "batch latency against samples/s per dataset × network, a line per "
                                                "framework (and compile mode where both ran), each point labelled by "
                                                "its batch size; p50 solid, p99 dotted")


def _panel(ax: Any, case: tuple[str, str], series: dict[str, list[Point]], colour_of: dict[str, Any]) -> None:
    """One dataset x network: each series' p50 line and p99 line, points labelled b<batch>."""
    xs, ys = [], []
    for label, mine in series.items():
        x = [p.values["images_per_sec"] for p in mine]
        ax.plot(x, [p.values["latency_p50_s"] * 1e3 for p in mine], "-o", color=colour_of[label], markersize=4)
        tail = [(p.values["images_per_sec"], p.values["latency_p99_s"] * 1e3) for p in mine
                if p.values.get("latency_p99_s")]
        if tail:
            ax.plot(*zip(*tail), ":x", color=colour_of[label], markersize=5)
        for p in mine:
            ax.annotate(f"b{p.batch}", (p.values["images_per_sec"], p.values["latency_p50_s"] * 1e3),
                        xytext=(3, 3), textcoords="offset points", fontsize=7, color=colour_of[label])
        xs += x
        ys += [p.values["latency_p50_s"] * 1e3 for p in mine] + [t[1] for t in tail]
    for values, which in ((xs, "x"), (ys, "y")):
        if spans(values):
            log_axis(ax, which)
    case_title(ax, case)
    ax.set_xlabel("samples/s")
    ax.set_ylabel("batch latency (ms)")
    ax.grid(alpha=0.3)


def rows(points: Sequence[Point]) -> list[tuple[str, str, str, int, str, Point]]:
    """(dataset, network, series, batch, how: 'cell' or 'auto search', point) in the table's order."""
    return [(case[0], case[1], label, p.batch, "auto search" if p.searched else "cell", p)
            for case, series in _series(points).items() for label, mine in series.items() for p in mine]


def _shown(p: Point, metric: str, scale: float) -> str:
    value = p.values.get(metric)
    if value is None:
        return "n/a"
    return f"{value * scale:,.0f}" if abs(value * scale) >= 1000 else f"{value * scale:.4g}"


def _rule(p: Point) -> str:
    flag = p.values.get("below_rule")
    return "n/a" if flag is None else "below" if flag > 0 else "met"


def write_csv(points: Sequence[Point], path: Path) -> Path:
    """`inference_by_batch.csv`: the table's rows, the metrics in their stored units."""
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["dataset", "model", "series", "batch_size", "from", "n", *(m for m, _, _ in COLUMNS), "rule",
                      "cell"])
        for dataset, model, label, batch, how, p in rows(points):
            out.writerow([dataset, model, label, batch, how, p.n, *(p.values.get(m, "") for m, _, _ in COLUMNS),
                          _rule(p), p.cell])
    return path


def table_html(points: Sequence[Point]) -> str:
    """The per-batch table for the page; nothing where no inference cell was measured."""
    if not points:
        return ""
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in ("dataset", "network", "series", "batch", "from", "n",
                                                *(h for _, h, _ in COLUMNS), "rule"))
    body = "".join(
        f"<tr><th>{e(d)}</th><th>{e(m)}</th><th>{e(label)}</th><td class=\"num\">{batch}</td><td>{e(how)}</td>"
        f"<td class=\"num\">{p.n}</td>" + "".join(f'<td class="num">{_shown(p, k, s)}</td>' for k, _, s in COLUMNS)
        + f"<td>{_rule(p)}</td></tr>" for d, m, label, batch, how, p in rows(points))
    return ('<h2 id="inference">Inference by batch size</h2><p class="sub">A row per batch size of each inference '
            'cell, a batch_size=auto run\'s searched points among them (from: auto search); medians over the '
            'repeats; p99 n/a below 100 timed batches; energy per sample n/a where no GPU (NVML) or RAPL counter '
            'was read; rule: below where a run timed fewer batches or seconds than its validity rule. Files: '
            f'tables/inference_by_batch.csv</p><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')
