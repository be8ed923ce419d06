"""The report's figures (matplotlib, Agg, no pyplot state), each written as SVG and PNG.

- per dataset × network, grouped bars of training speed: frameworks on the axis, one bar per
  hardware configuration, error bars from the repeats (min to max), hatched when noisy; a cell
  without a number is marked `n/a` on the axis, never drawn as zero; a log axis where the
  values span more than `LOG_SPAN`; where no cell has a number, no figure, but why not;
- multi-GPU scaling: speedup and parallel efficiency from 1 to N GPUs, strong and weak labelled,
  with the ideal line; where a sweep asked for nodes, images/s and efficiency from 1 to N nodes
  (n/a marked, and a panel whose nodes shared one host says its efficiency says nothing about a
  network), and speedup against GPUs in all (gpus × nodes) where both vary;
- CPU thread scaling: speedup over the fewest threads, the ideal line and the node's physical
  core count marked;
- throughput against energy per image, one point per framework × hardware configuration, the
  efficient ones (no other point both faster and cheaper) joined and labelled.

Each drawing function returns the figure it wrote, or a line saying why it drew none (the page
lists those under "Not drawn"). What every figure shares (its panels, colours and legend, n/a
marks, log axes, titles fitted to its width, its files) is drawing.py's.
"""
from __future__ import annotations

import math
import multiprocessing
import os
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from orchestrator.report import speedup
from orchestrator.report.drawing import (LOG_SPAN, NA_COLOUR, STYLE, Written, case_title, colours, key_legend,
                                         log_axis, mark_na, panels, save, spans, styles)
from orchestrator.report.families import family_of
from orchestrator.report.labels import DATASETS, MODELS, order_of
from orchestrator.report.tables import OK, ROW_SETTINGS, Table

#: At most this many `n/a` labels are written on a bar chart's axis (beyond it, only the marks).
MAX_NA_LABELS = 40
#: Figures never grow wider than this (inches), however many cells they show.
MAX_WIDTH = 18.0


def throughput_bars(table: Table, dataset: str, model: str, out: Path) -> Written | str:
    """One dataset × network: frameworks (and other row settings) on the axis, a bar per hardware
    configuration; where no cell of it has a number, why not (an axis of n/a marks says nothing
    the tables do not)."""
    from matplotlib.patches import Patch  # lazy: matplotlib (~0.3 s) only in the processes that draw

    rows = [r for r in table.rows if (str(r[ROW_SETTINGS.index("dataset")]), str(r[ROW_SETTINGS.index("model")]))
            == (dataset, model)]
    columns = [c for c in table.columns if any(table.at(r, c) is not None for r in rows)]
    cells = [e for r in rows for c in columns if (e := table.at(r, c)) is not None]
    values = [e.median for e in cells if e.status == OK]
    if not values:
        reasons = Counter(e.reason or e.status for e in cells)
        return (f"{model} on {dataset}: training speed: no cell has images/s: all {len(cells)} n/a ("
                + ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items())) + ")")
    log, width = spans(values), 0.8 / len(columns)
    labelled = sum(1 for e in cells if e.status != OK) <= MAX_NA_LABELS
    fig, [[ax]], _ = panels(1, (min(MAX_WIDTH, max(6.5, 2.5 + len(rows) * (0.35 + 0.22 * len(columns)))), 3.8))
    legend = []
    for j, (column, colour) in enumerate(zip(columns, colours(len(columns)))):
        _bar_column(ax, [table.at(row, column) for row in rows], (j - (len(columns) - 1) / 2) * width, width,
                    min(values) / 2 if log else 0, colour, labelled)
        legend.append((Patch(facecolor=colour), table.column_label(column)))
    unit = family_of(model).unit  # a sequence network's samples are sequences
    _bar_axes(ax, [_row_label(table, r) for r in rows], log, legend, unit)
    ax.set_title(f"{model} on {dataset}: training speed\nmedian of repeats; whiskers: min to max; hatched: noisy; "
                 f"× n/a: no number (the tables say why)", fontsize=9, loc="left")
    caption = (f"{model} on {dataset}: {unit} per framework, one bar per hardware configuration"
               + (" (log axis: the values span more than a factor " f"{LOG_SPAN:g})" if log else ""))
    return save(fig, out, throughput_name(dataset, model), caption)


def throughput_name(dataset: str, model: str) -> str:
    """The file name (and the page's figure id) of one dataset × network's bars."""
    return f"throughput_{dataset}_{model}"


def _bar_column(ax: Any, entries: Sequence[Any], offset: float, width: float, bottom: float, colour: Any,
                labelled: bool) -> None:
    """One hardware configuration's bars, one per row's entry (None: no cell), `offset` from the
    row's place: the median up from `bottom`, whiskers from min to max, hatched when noisy; an
    entry without a number marked n/a on the axis, and labelled where the chart has room."""
    xs, heights, low, high, hatches, missing = [], [], [], [], [], []
    for i, e in enumerate(entries):
        if e is None:
            continue
        if e.status != OK:
            missing.append(i + offset)
            continue
        xs.append(i + offset)
        heights.append(e.median)
        low.append(e.median - e.stats.lo)
        high.append(e.stats.hi - e.median)
        hatches.append("///" if e.noisy else "")
    bars = ax.bar(xs, [h - bottom for h in heights], width * 0.92, bottom=bottom, color=colour,
                  yerr=[low, high] if xs else None, capsize=2 if len(entries) < 20 else 0,
                  error_kw={"elinewidth": 0.8, "ecolor": "#333"})
    for bar, hatch in zip(bars, hatches):
        if hatch:
            bar.set_hatch(hatch)
    mark_na(ax, missing, 5)
    for x in missing if labelled else ():
        ax.annotate("n/a", (x, 0), xycoords=("data", "axes fraction"), xytext=(0, 6), textcoords="offset points",
                    ha="center", va="bottom", rotation=90, fontsize=7, color=NA_COLOUR)


def _bar_axes(ax: Any, labels: list[str], log: bool, legend: list[tuple[Any, str]], unit: str) -> None:
    """A bar chart's axes: each row's label under its bars, the samples/s in `unit` (a log axis where the
    values span more than LOG_SPAN), the hardware configurations' legend beside the bars."""
    if log:
        log_axis(ax)
    ax.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 6 else 0,
                  ha="right" if len(labels) > 6 else "center", fontsize=9 if len(labels) <= 20 else 6)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_ylabel(f"{unit}{' (log)' if log else ''}")
    ax.legend(*zip(*legend), title="hardware", fontsize=7, title_fontsize=7, loc="upper left",
              bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.grid(axis="y", alpha=0.3)


def _case(settings: dict[str, Any]) -> tuple[str, str]:
    return str(settings.get("dataset")), str(settings.get("model"))


def _case_order(case: tuple[str, str]) -> tuple:
    return order_of(case[0], DATASETS), order_of(case[1], MODELS)


def _cases(table: Table) -> list[tuple[str, str]]:
    return sorted({_case(e.settings) for e in table.entries}, key=_case_order)


@dataclass(frozen=True)
class ScalingAxes:
    """What one scaling figure shows: its file, its x axis, the upper panel's quantity."""

    name: str
    xlabel: str
    top: str       # a Point's field: "speedup" (the ideal drawn) or "median" (images/s)
    top_label: str
    per: str       # the efficiency's denominator, in words
    caption: str


#: The scaling figures over GPUs, nodes and GPUs in all, by their series' `over`.
SCALING = {
    "gpus": ScalingAxes("scaling_gpus", "GPUs", "speedup", "speedup over 1 GPU", "GPUs",
                        "speedup and parallel efficiency from 1 to N GPUs, cells that differ only in gpus; strong "
                        "and weak scaling labelled; the ideal dotted"),
    "nodes": ScalingAxes("scaling_nodes", "nodes", "median", "images/s", "nodes",
                         "images/s and scaling efficiency (speedup over 1 node / nodes) from 1 to N nodes, cells "
                         "that differ only in nodes; strong and weak labelled; × n/a: no number (the node scaling "
                         "table says why)"),
    "gpus_total": ScalingAxes("scaling_gpus_total", "GPUs in all (GPUs per node × nodes)", "speedup",
                              "speedup over 1 GPU on 1 node", "GPUs",
                              "speedup and efficiency against the job's GPUs in all (gpus × nodes), cells that "
                              "differ only in gpus and nodes, a line per GPUs per node; the ideal dotted"),
}
#: Said on a panel whose nodes shared one host (speedup.shared_host), in lines that fit a panel.
EMULATED = "nodes shared one host (emulated):\nthe efficiency says nothing about a network"


def scaling(series: Sequence[speedup.Series], out: Path, over: str) -> Written | str:
    """Per dataset × network, a scaling quantity (above) and efficiency (below) against GPUs,
    nodes or GPUs in all, a line per cell: colour the framework, marker the hardware, solid
    strong and dashed weak scaling; the ideal dotted; a count without a number marked n/a; a
    panel whose nodes shared a host says so."""
    if not series:
        return NOT_DRAWN[over]
    from matplotlib.lines import Line2D  # lazy: matplotlib (~0.3 s) only in the processes that draw

    axes_of = SCALING[over]
    cases = sorted({_case(s.settings) for s in series}, key=_case_order)
    fig, cells, ncols = panels(len(cases), (4.0, 5.6), margin=(0.5, 0.6), rows_each=2)
    colour_of = styles([s.settings["framework"] for s in series], "colour")
    markers = styles([s.settings["hardware"] for s in series], "marker")
    for case, (top, eff) in zip(cases, cells):
        _scaling_panel(top, eff, case, [s for s in series if _case(s.settings) == case], axes_of, colour_of, markers)
    key_legend(fig, colour_of, "framework", markers, "hardware", [
        (Line2D([], [], color="#444", linestyle="-"), "strong (global batch split)"),
        (Line2D([], [], color="#444", linestyle="--"), f"weak (batch per {'node' if over == 'nodes' else 'GPU'})"),
        (Line2D([], [], color="black", linestyle=":"), "ideal")], columns=2 * ncols)
    emulated = "; " + EMULATED.replace(":\n", ": ") if any(s.shared_host for s in series) else ""
    return save(fig, out, axes_of.name, axes_of.caption + emulated)


def _scaling_panel(top: Any, eff: Any, case: tuple[str, str], mine: list[speedup.Series], axes_of: ScalingAxes,
                   colour_of: dict[str, Any], markers: dict[str, str]) -> None:
    """One dataset × network's scaling: its series' quantity above, their efficiency below (one
    line object per style, the series apart), the counts without a number marked n/a with the
    frameworks that lack them, the ideal dotted."""
    xs = sorted({p.x for s in mine for p in s.points} | {m.x for s in mine for m in s.missing})
    styled: dict[tuple[str, str, str], list[speedup.Series]] = {}
    for s in mine:  # one line object per style, the series apart (NaN), however many there are
        styled.setdefault((str(s.settings["framework"]), str(s.settings["hardware"]),
                           "--" if s.settings.get("scaling") == "weak" else "-"), []).append(s)
    for (framework, hardware, linestyle), group in styled.items():
        style = dict(color=colour_of[framework], marker=markers[hardware], linestyle=linestyle, linewidth=1,
                     markersize=4)
        top.plot(*_joined(group, axes_of.top), **style)
        eff.plot(*_joined(group, "efficiency"), **style)
    missing: dict[int, set[str]] = {}
    for s in mine:
        for m in s.missing:
            missing.setdefault(m.x, set()).add(str(s.settings["framework"]))
    mark_na(eff, list(missing), 6)
    for x, frameworks in missing.items():
        eff.annotate("n/a: " + ", ".join(sorted(frameworks)), (x, 0), xycoords=("data", "axes fraction"),
                     xytext=(0, 6), textcoords="offset points", ha="center", fontsize=7, color=NA_COLOUR)
    if axes_of.top == "speedup":
        top.plot([1, xs[-1]], [1, xs[-1]], ":", color="black")
    eff.axhline(1.0, linestyle=":", color="black")
    case_title(top, case, EMULATED if any(s.shared_host for s in mine) else "")
    top.set_ylabel(axes_of.top_label)
    eff.set_ylabel(f"efficiency (speedup / {axes_of.per})")
    eff.set_ylim(0, max([1.1] + [p.efficiency * 1.05 for s in mine for p in s.points]))
    for ax in (top, eff):
        ax.set_xticks(xs)
        ax.grid(alpha=0.3)
    eff.set_xlabel(axes_of.xlabel)


def _joined(series: Sequence[speedup.Series], what: str) -> tuple[list[float], list[float]]:
    """The series' points as one polyline, broken (NaN) between series."""
    xs: list[float] = []
    ys: list[float] = []
    for s in series:
        xs += [p.x for p in s.points] + [math.nan]
        ys += [getattr(p, what) for p in s.points] + [math.nan]
    return xs, ys


def thread_scaling(series: Sequence[speedup.Series], out: Path) -> Written | str:
    """Speedup over the fewest threads, a line per cell (labelled where they are few; otherwise
    colour the framework, marker the hardware); the ideal and the nodes' physical cores marked."""
    if not series:
        return NOT_DRAWN["thread_scaling"]
    fig, [[ax]], _ = panels(1, (7.0, 4.2))
    few = len(series) <= 10
    colour_of = styles([s.label if few else s.settings["framework"] for s in series], "colour")
    markers = styles([s.settings["hardware"] for s in series], "marker")
    for s in series:
        ax.plot([p.x for p in s.points], [p.speedup for p in s.points], marker="o" if few else markers[str(
            s.settings["hardware"])], color=colour_of[s.label if few else str(s.settings["framework"])],
                label=s.label if few else None, linewidth=1)
    xs = sorted({p.x for s in series for p in s.points})
    low = min(s.points[0].x for s in series)
    ax.plot([low, xs[-1]], [1, xs[-1] / low], ":", color="black", label="ideal" if few else None)
    for cores in sorted({s.cores for s in series if s.cores}):
        ax.axvline(cores, color="#b00", linestyle="--", linewidth=1)
        ax.annotate(f"{cores} physical cores", (cores, 1.0), xycoords=("data", "axes fraction"), xytext=(-3, -12),
                    textcoords="offset points", color="#b00", fontsize=8, ha="right")
    from matplotlib.ticker import NullFormatter  # lazy: matplotlib (~0.3 s) only in the processes that draw

    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("threads")
    ax.set_ylabel("speedup over the fewest threads")
    ax.set_title("CPU thread scaling", fontsize=9, loc="left")
    ax.grid(alpha=0.3)
    if few:
        ax.legend(fontsize=7, frameon=False, loc="upper left")
    else:
        from matplotlib.lines import Line2D  # lazy: matplotlib (~0.3 s) only in the processes that draw

        key_legend(fig, colour_of, "framework", markers, "hardware", [(Line2D([], [], color="black", linestyle=":"),
                                                                      "ideal")])
    return save(fig, out, "scaling_threads", "speedup over the fewest threads, cells that differ only in threads; "
                                              "the ideal dotted, the node's physical cores marked")


def efficiency(speed: Table, energy: Table, out: Path) -> Written | str:
    """Images/s against J/image per dataset × network, a point per framework × hardware
    configuration (colour the hardware, marker the framework); the points no other beats on both
    outlined, joined and labelled: the efficient choices."""
    joules = {(e.row, e.column): e.median for e in energy.entries if e.status == OK and e.median}
    points: dict[tuple[str, str], list[tuple[float, float, str, str]]] = {}
    for e in speed.entries:
        j = joules.get((e.row, e.column))
        if e.status == OK and j:
            points.setdefault(_case(e.settings), []).append((j, e.median, _row_label(speed, e.row),
                                                             speed.column_label(e.column)))
    if not points:
        return NOT_DRAWN["efficiency"]
    from matplotlib.lines import Line2D  # lazy: matplotlib (~0.3 s) only in the processes that draw

    cases = sorted(points, key=_case_order)
    fig, cells, ncols = panels(len(cases), (4.2, 3.4), margin=(0.5, 0.8))
    colour_of = styles([p[3] for ps in points.values() for p in ps], "colour")
    markers = styles(sorted({p[2].split(" ")[0] for ps in points.values() for p in ps}), "marker")
    for case, (ax,) in zip(cases, cells):
        _efficiency_panel(ax, case, points[case], colour_of, markers)
    key_legend(fig, colour_of, "hardware", markers, "framework", [
        (Line2D([], [], marker="o", markerfacecolor="none", markeredgecolor="black", linestyle="-", color="#555"),
         "efficient: no other point both faster and cheaper")], columns=2 * ncols)
    return save(fig, out, "throughput_vs_energy", "images/s against energy per image, a point per framework × "
                                                  "hardware configuration; outlined and joined: the efficient "
                                                  "choices (no other point is both faster and cheaper)")


def _efficiency_panel(ax: Any, case: tuple[str, str], ps: list[tuple[float, float, str, str]],
                      colour_of: dict[str, Any], markers: dict[str, str]) -> None:
    """One dataset × network's (J/image, images/s, framework, hardware) points; the efficient
    ones outlined and joined, and labelled where they are few; a log axis where J/image spans
    more than LOG_SPAN."""
    front = _pareto(ps)
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for j, ips, framework, config in ps:
        groups.setdefault((config, framework.split(" ")[0]), []).append((j, ips))
    for (config, framework), xy in groups.items():
        ax.scatter([p[0] for p in xy], [p[1] for p in xy], color=colour_of[config], marker=markers[framework], s=18,
                   zorder=3)
    line = sorted((j, ips) for j, ips, *_ in ps if (j, ips) in front)
    ax.scatter([p[0] for p in line], [p[1] for p in line], s=70, facecolors="none", edgecolors="black", zorder=4)
    ax.plot([p[0] for p in line], [p[1] for p in line], "-", color="#555", linewidth=0.8, zorder=2)
    for j, ips, framework, config in ps if len(front) <= 12 else ():
        if (j, ips) in front:
            ax.annotate(f"{framework}, {config}", (j, ips), xytext=(4, 3), textcoords="offset points", fontsize=7)
    if spans([p[0] for p in ps]):
        log_axis(ax, "x")
    case_title(ax, case)
    ax.set_xlabel("energy per image (J, gross)")
    ax.set_ylabel("images/s")
    ax.grid(alpha=0.3)


def _row_label(table: Table, row: Any) -> str:
    """A row's settings other than its dataset and network (each figure is of one of those)."""
    return " ".join(v for k, v in zip(table.row_fields, table.row_values(row)) if k not in ("dataset", "model"))


def _pareto(points: Sequence[tuple[float, float, str, str]]) -> set[tuple[float, float]]:
    """The (J/image, images/s) points no other point beats on both (cheaper and at least as fast)."""
    best, front = -1.0, set()
    for j, ips in sorted({(j, ips) for j, ips, *_ in points}, key=lambda p: (p[0], -p[1])):
        if ips > best:  # cheaper points come first: this one is kept only if faster than all of them
            front.add((j, ips))
            best = ips
    return front


#: Why a figure is missing, by its drawing function (where the reason is always the same).
NOT_DRAWN = {
    "gpus": "multi-GPU scaling: no cell was measured on 1 GPU and on more with every other setting equal",
    "nodes": "node scaling: no cell was measured on 1 node and tried on more with every other setting equal",
    "gpus_total": "GPUs in all: no cell was measured on 1 GPU of 1 node and on more GPUs and nodes, every other "
                  "setting equal",
    "thread_scaling": "thread scaling: no cell was measured with several thread counts and every other setting equal",
    "efficiency": "throughput against energy: no cell has a GPU energy measurement",
}


def _draw(job: tuple[str, tuple]) -> Written | str:
    """One figure, or why it is not drawn: `job` is (a drawing function's name here, its arguments)."""
    from matplotlib import rc_context  # lazy: matplotlib (~0.3 s) only in the processes that draw

    name, args = job
    with rc_context(STYLE):
        return globals()[name](*args)


def write_all(speed: Table, energy: Table, cores: dict[str, int], nodes: Optional[Sequence[speedup.Series]],
              out: Path, workers: Optional[int] = None) -> tuple[list[Written], list[str]]:
    """Every figure the tables allow, into `out`; (figures, what could not be drawn and why).
    `nodes`: the node scaling series (speedup.node_scaling), None where no sweep asked for nodes.

    The figures are independent, so they are drawn by `workers` processes at once (default: one
    per CPU, at most one per figure): matplotlib's drawing is most of a report's time."""
    # what every figure loads (fonts, both backends) is loaded before the workers fork, once
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.backends.backend_svg  # noqa: F401
    import matplotlib.figure  # noqa: F401
    from matplotlib import font_manager

    font_manager.findfont(font_manager.FontProperties())

    out.mkdir(parents=True, exist_ok=True)
    jobs = [("throughput_bars", (speed, dataset, model, out)) for dataset, model in _cases(speed)]
    jobs += [("scaling", (speedup.gpu_scaling(speed.entries), out, "gpus")),
             ("thread_scaling", (speedup.thread_scaling(speed.entries, cores), out)),
             ("efficiency", (speed, energy, out))]
    if nodes is not None:  # only where a sweep asked for nodes; GPUs in all only where both vary
        jobs += [("scaling", (nodes, out, "nodes"))]
        jobs += [("scaling", (total, out, "gpus_total")) for total in [speedup.total_gpu_scaling(speed.entries)] if total]
    workers = min(len(jobs), workers or os.cpu_count() or 1)
    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            drawn = list(pool.map(_draw, jobs))
    else:
        drawn = [_draw(job) for job in jobs]
    return [d for d in drawn if isinstance(d, Written)], [d for d in drawn if isinstance(d, str)]
