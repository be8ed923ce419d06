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
lists those under "Not drawn"). Titles are wrapped to their figure's width (`_fit_titles`).
"""
from __future__ import annotations

import math
import multiprocessing
import os
import textwrap
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from orchestrator.report import speedup
from orchestrator.report.labels import DATASETS, MODELS, order_of
from orchestrator.report.tables import OK, ROW_SETTINGS, Table

#: Values spanning more than this factor get a log axis.
LOG_SPAN = 30.0
#: matplotlib's defaults for every figure: text stays text in the SVG (small, searchable).
STYLE = {"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
         "figure.dpi": 100}


@dataclass(frozen=True)
class Written:
    """One figure's files and what it shows."""

    name: str
    svg: Path
    png: Path
    caption: str


def _figure(width: float, height: float, ncols: int = 1) -> tuple[Any, list[Any]]:
    fig = _new_figure(width, height)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _new_figure(width: float, height: float) -> Any:
    """A figure laid out by matplotlib (constrained), with EDGE_PAD inches kept clear on every
    side: an axis that reaches the edge of the image looks cut, as a title does."""
    from matplotlib.figure import Figure  # lazy: matplotlib (~0.3 s) only in the processes that draw

    fig = Figure(figsize=(width, height), layout="constrained")
    fig.get_layout_engine().set(w_pad=EDGE_PAD, h_pad=EDGE_PAD)
    return fig


def _fit_titles(fig: Any) -> None:
    """Re-wraps every axes title that runs past the figure's right edge to the room it has, laid
    out again until all fit: a figure's width is chosen for its bars, not for its words."""
    # lazy: matplotlib (~0.3 s) only in the processes that draw
    from matplotlib.text import Text

    for _ in range(4):  # each wrap lets the layout move things; it settles in one or two
        fig.draw_without_rendering()  # lays out (constrained), so the titles have their final places
        right = fig.bbox.x1 - fig.dpi * FIT_PAD
        wrapped = False
        for ax in fig.axes:
            shown = {ax.get_title(loc) for loc in ("left", "center", "right")} - {""}
            for title in (a for a in ax.get_children() if isinstance(a, Text) and a.get_text() in shown):
                box = title.get_window_extent()
                if box.x1 <= right or box.x0 >= right:
                    continue
                lines = title.get_text().split("\n")
                chars = max(1, int(max(len(line) for line in lines) * (right - box.x0) / box.width) - 1)
                title.set_text("\n".join(textwrap.fill(line, chars) for line in lines))
                wrapped = True
        if not wrapped:
            return


def _save(fig: Any, out: Path, name: str, caption: str) -> Written:
    svg, png = out / f"{name}.svg", out / f"{name}.png"
    _fit_titles(fig)
    fig.savefig(svg, format="svg", metadata={"Date": None})
    fig.set_layout_engine("none")  # laid out once, by the first save: the second keeps those positions
    fig.savefig(png, format="png", dpi=100)
    return Written(name, svg, png, caption)


def _colours(n: int) -> list[Any]:
    from matplotlib import colormaps  # lazy: matplotlib (~0.3 s) only in the processes that draw

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


#: Markers for the second property a scatter or line tells apart (hardware, or framework).
MARKERS = "osD^vPX*h<>p"
#: At most this many `n/a` labels are written on a bar chart's axis (beyond it, only the marks).
MAX_NA_LABELS = 40
#: Figures never grow wider than this (inches), however many cells they show.
MAX_WIDTH = 18.0
#: A title ends at least this far (inches) from the figure's right edge (fonts differ a little
#: between matplotlib, which measures, and the browser, which draws the SVG's text).
FIT_PAD = 0.15
#: Inches kept clear at each edge of a figure by its layout (matplotlib's default: 3/72).
EDGE_PAD = 0.1


def _styles(values: Sequence[Any], kind: str) -> dict[Any, Any]:
    """A colour (kind="colour") or marker (kind="marker") for each distinct value, in sorted order."""
    ordered = sorted({str(v) for v in values})
    picks = _colours(len(ordered)) if kind == "colour" else [MARKERS[i % len(MARKERS)] for i in range(len(ordered))]
    return dict(zip(ordered, picks))


def _key_legend(fig: Any, colours: dict[str, Any], colour_title: str, markers: dict[str, str], marker_title: str,
                extra: Sequence[tuple[Any, str]] = (), columns: int = 6) -> None:
    """One legend below the figure that explains colours, markers and line styles, however many
    lines or points the figure has."""
    from matplotlib.lines import Line2D  # lazy: matplotlib (~0.3 s) only in the processes that draw

    handles = [Line2D([], [], color=c, marker="s", linestyle="") for c in colours.values()]
    labels = [f"{colour_title}: {name}" for name in colours]
    handles += [Line2D([], [], color="#444", marker=m, linestyle="") for m in markers.values()]
    labels += [f"{marker_title}: {name}" for name in markers]
    for handle, text in extra:
        handles.append(handle)
        labels.append(text)
    fig.legend(handles, labels, loc="outside lower center", ncols=min(columns, max(1, len(labels))), fontsize=7,
               frameon=False)


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
    log = _spans(values)
    missing_total = sum(1 for r in rows for c in columns if (e := table.at(r, c)) is not None and e.status != OK)
    width, legend = 0.8 / len(columns), []
    fig, (ax,) = _figure(min(MAX_WIDTH, max(6.5, 2.5 + len(rows) * (0.35 + 0.22 * len(columns)))), 3.8)
    bottom = min(values) / 2 if log else 0
    for j, (column, colour) in enumerate(zip(columns, _colours(len(columns)))):
        xs, heights, low, high, hatches, missing = [], [], [], [], [], []
        for i, row in enumerate(rows):
            x = i + (j - (len(columns) - 1) / 2) * width
            e = table.at(row, column)
            if e is None:
                continue
            if e.status != OK:
                missing.append(x)
                continue
            xs.append(x)
            heights.append(e.median)
            low.append(e.median - e.stats.lo)
            high.append(e.stats.hi - e.median)
            hatches.append("///" if e.noisy else "")
        bars = ax.bar(xs, [h - bottom for h in heights], width * 0.92, bottom=bottom, color=colour,
                      yerr=[low, high] if xs else None, capsize=2 if len(rows) < 20 else 0,
                      error_kw={"elinewidth": 0.8, "ecolor": "#333"})
        for bar, hatch in zip(bars, hatches):
            if hatch:
                bar.set_hatch(hatch)
        if missing:  # on the axis, never a bar of height 0
            ax.plot(missing, [0] * len(missing), linestyle="", marker="x", color="#b00", markersize=5,
                    transform=ax.get_xaxis_transform(), clip_on=False)
        for x in missing if missing_total <= MAX_NA_LABELS else ():
            ax.annotate("n/a", (x, 0), xycoords=("data", "axes fraction"), xytext=(0, 6), textcoords="offset points",
                        ha="center", va="bottom", rotation=90, fontsize=7, color="#b00")
        legend.append((Patch(facecolor=colour), table.column_label(column)))
    if log:
        _log(ax)
    ax.set_xticks(range(len(rows)), [" ".join(v for k, v in zip(table.row_fields, table.row_values(r))
                                              if k not in ("dataset", "model")) for r in rows],
                  rotation=30 if len(rows) > 6 else 0, ha="right" if len(rows) > 6 else "center",
                  fontsize=9 if len(rows) <= 20 else 6)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_ylabel(f"images/s{' (log)' if log else ''}")
    ax.set_title(f"{model} on {dataset}: training speed\nmedian of repeats; whiskers: min to max; hatched: noisy; "
                 f"× n/a: no number (the tables say why)", fontsize=9, loc="left")
    ax.legend(*zip(*legend), title="hardware", fontsize=7, title_fontsize=7, loc="upper left",
              bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    caption = (f"{model} on {dataset}: images/s per framework, one bar per hardware configuration"
               + (" (log axis: the values span more than a factor " f"{LOG_SPAN:g})" if log else ""))
    return _save(fig, out, f"throughput_{dataset}_{model}", caption)


def _log(ax: Any, which: str = "y") -> None:
    """A log axis labelled 1, 10, 100, 1,000 ... or 0.01, 0.1 (plain numbers: no mathtext to typeset)."""
    # lazy: matplotlib (~0.3 s) only in the processes that draw
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis = ax.yaxis if which == "y" else ax.xaxis
    (ax.set_yscale if which == "y" else ax.set_xscale)("log")
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 1 else f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _spans(values: Sequence[float]) -> bool:
    """Whether positive values span more than LOG_SPAN (a log axis shows them better)."""
    return bool(values) and min(values) > 0 and max(values) / min(values) > LOG_SPAN


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
    ncols = min(3, len(cases))
    nrows = -(-len(cases) // ncols)
    fig = _new_figure(4.0 * ncols + 0.5, 5.6 * nrows + 0.6)
    axes = fig.subplots(2 * nrows, ncols, squeeze=False)
    colours = _styles([s.settings["framework"] for s in series], "colour")
    markers = _styles([s.settings["hardware"] for s in series], "marker")
    for k, case in enumerate(cases):
        top, eff = axes[2 * (k // ncols)][k % ncols], axes[2 * (k // ncols) + 1][k % ncols]
        mine = [s for s in series if _case(s.settings) == case]
        xs = sorted({p.x for s in mine for p in s.points} | {m.x for s in mine for m in s.missing})
        styled: dict[tuple[str, str, str], list[speedup.Series]] = {}
        for s in mine:  # one line object per style, the series apart (NaN), however many there are
            styled.setdefault((str(s.settings["framework"]), str(s.settings["hardware"]),
                               "--" if s.settings.get("scaling") == "weak" else "-"), []).append(s)
        for (framework, hardware, linestyle), group in styled.items():
            style = dict(color=colours[framework], marker=markers[hardware], linestyle=linestyle, linewidth=1,
                         markersize=4)
            top.plot(*_joined(group, axes_of.top), **style)
            eff.plot(*_joined(group, "efficiency"), **style)
        missing: dict[int, set[str]] = {}
        for s in mine:
            for m in s.missing:
                missing.setdefault(m.x, set()).add(str(s.settings["framework"]))
        for x, frameworks in missing.items():  # on the axis, never a point at 0
            eff.plot([x], [0], linestyle="", marker="x", color="#b00", markersize=6,
                     transform=eff.get_xaxis_transform(), clip_on=False)
            eff.annotate("n/a: " + ", ".join(sorted(frameworks)), (x, 0), xycoords=("data", "axes fraction"),
                         xytext=(0, 6), textcoords="offset points", ha="center", fontsize=7, color="#b00")
        if axes_of.top == "speedup":
            top.plot([1, xs[-1]], [1, xs[-1]], ":", color="black")
        eff.axhline(1.0, linestyle=":", color="black")
        emulated = any(s.shared_host for s in mine)
        top.set_title(f"{case[1]} on {case[0]}" + (f"\n{EMULATED}" if emulated else ""), fontsize=9, loc="left",
                      color="#b00" if emulated else "black")
        top.set_ylabel(axes_of.top_label)
        eff.set_ylabel(f"efficiency (speedup / {axes_of.per})")
        eff.set_ylim(0, max([1.1] + [p.efficiency * 1.05 for s in mine for p in s.points]))
        for ax in (top, eff):
            ax.set_xticks(xs)
            ax.grid(alpha=0.3)
        eff.set_xlabel(axes_of.xlabel)
    for k in range(len(cases), nrows * ncols):
        axes[2 * (k // ncols)][k % ncols].set_visible(False)
        axes[2 * (k // ncols) + 1][k % ncols].set_visible(False)
    _key_legend(fig, colours, "framework", markers, "hardware", [
        (Line2D([], [], color="#444", linestyle="-"), "strong (global batch split)"),
        (Line2D([], [], color="#444", linestyle="--"), f"weak (batch per {'node' if over == 'nodes' else 'GPU'})"),
        (Line2D([], [], color="black", linestyle=":"), "ideal")], columns=2 * ncols)
    emulated = "; " + EMULATED.replace(":\n", ": ") if any(s.shared_host for s in series) else ""
    return _save(fig, out, axes_of.name, axes_of.caption + emulated)


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
    fig, (ax,) = _figure(7.0, 4.2)
    few = len(series) <= 10
    colours = _styles([s.label if few else s.settings["framework"] for s in series], "colour")
    markers = _styles([s.settings["hardware"] for s in series], "marker")
    for s in series:
        ax.plot([p.x for p in s.points], [p.speedup for p in s.points], marker="o" if few else markers[str(
            s.settings["hardware"])], color=colours[s.label if few else str(s.settings["framework"])],
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

        _key_legend(fig, colours, "framework", markers, "hardware", [(Line2D([], [], color="black", linestyle=":"),
                                                                      "ideal")])
    return _save(fig, out, "scaling_threads", "speedup over the fewest threads, cells that differ only in threads; "
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
            framework = " ".join(v for k, v in zip(speed.row_fields, speed.row_values(e.row)) if k not in ("dataset", "model"))
            points.setdefault(_case(e.settings), []).append((j, e.median, framework, speed.column_label(e.column)))
    if not points:
        return NOT_DRAWN["efficiency"]

    cases = sorted(points, key=_case_order)
    ncols = min(3, len(cases))
    nrows = -(-len(cases) // ncols)
    fig = _new_figure(4.2 * ncols + 0.5, 3.4 * nrows + 0.8)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    colours = _styles([p[3] for ps in points.values() for p in ps], "colour")
    frameworks = sorted({p[2].split(" ")[0] for ps in points.values() for p in ps})
    markers = _styles(frameworks, "marker")
    for ax, case in zip(axes, cases):
        ps = points[case]
        front = _pareto(ps)
        groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for j, ips, framework, config in ps:
            groups.setdefault((config, framework.split(" ")[0]), []).append((j, ips))
        for (config, framework), xy in groups.items():
            ax.scatter([p[0] for p in xy], [p[1] for p in xy], color=colours[config], marker=markers[framework], s=18,
                       zorder=3)
        line = sorted((j, ips) for j, ips, *_ in ps if (j, ips) in front)
        ax.scatter([p[0] for p in line], [p[1] for p in line], s=70, facecolors="none", edgecolors="black", zorder=4)
        ax.plot([p[0] for p in line], [p[1] for p in line], "-", color="#555", linewidth=0.8, zorder=2)
        for j, ips, framework, config in ps if len(front) <= 12 else ():
            if (j, ips) in front:
                ax.annotate(f"{framework}, {config}", (j, ips), xytext=(4, 3), textcoords="offset points", fontsize=7)
        if _spans([p[0] for p in ps]):
            _log(ax, "x")
        ax.set_title(f"{case[1]} on {case[0]}", fontsize=9, loc="left")
        ax.set_xlabel("energy per image (J, gross)")
        ax.set_ylabel("images/s")
        ax.grid(alpha=0.3)
    for ax in axes[len(cases):]:
        ax.set_visible(False)
    from matplotlib.lines import Line2D  # lazy: matplotlib (~0.3 s) only in the processes that draw

    _key_legend(fig, colours, "hardware", markers, "framework", [
        (Line2D([], [], marker="o", markerfacecolor="none", markeredgecolor="black", linestyle="-", color="#555"),
         "efficient: no other point both faster and cheaper")], columns=2 * ncols)
    return _save(fig, out, "throughput_vs_energy", "images/s against energy per image, a point per framework × "
                                                   "hardware configuration; outlined and joined: the efficient "
                                                   "choices (no other point is both faster and cheaper)")


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
