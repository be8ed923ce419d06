"""What every report figure shares (figures.py draws them): a figure of panels, one per dataset ×
network, laid out by matplotlib with room kept at its edges; colours and markers for what the
lines and points tell apart and one legend that explains them; log axes in plain numbers; `n/a`
marked on an axis, never drawn as zero; titles wrapped to the figure's width; the SVG and PNG.

One place for these, so that the figures look alike and a change of layout is made once.
matplotlib is imported lazily, in the processes that draw (~0.3 s).
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

#: Values spanning more than this factor get a log axis.
LOG_SPAN = 30.0
#: matplotlib's defaults for every figure: text stays text in the SVG (small, searchable), and a `$`
#: in a name from the database is a dollar, not TeX (an unbalanced one made the whole report fail).
STYLE = {"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
         "figure.dpi": 100, "text.parse_math": False}
#: Markers for the second property a scatter or line tells apart (hardware, or framework).
MARKERS = "osD^vPX*h<>p"
#: A title ends at least this far (inches) from the figure's right edge (fonts differ a little
#: between matplotlib, which measures, and the browser, which draws the SVG's text).
FIT_PAD = 0.15
#: Inches kept clear at each edge of a figure by its layout (matplotlib's default: 3/72).
EDGE_PAD = 0.1
#: A figure of several panels has at most this many side by side.
MAX_COLUMNS = 3
#: The colour of what has no number (`n/a` marks and their labels).
NA_COLOUR = "#b00"


@dataclass(frozen=True)
class Written:
    """One figure's files and what it shows."""

    name: str
    svg: Path
    png: Path
    caption: str


def panels(count: int, panel: tuple[float, float], margin: tuple[float, float] = (0.0, 0.0),
           rows_each: int = 1) -> tuple[Any, list[list[Any]], int]:
    """A figure of `count` panels (one per dataset × network), at most MAX_COLUMNS side by side,
    each `panel` inches (width, height) and `rows_each` axes tall (a quantity above its
    efficiency), `margin` inches added for the legend; the panels left over in the last row are
    hidden. (figure, each panel's axes from the top, the number of columns)."""
    ncols = min(MAX_COLUMNS, count)
    nrows = -(-count // ncols)
    fig = new_figure(panel[0] * ncols + margin[0], panel[1] * nrows + margin[1])
    axes = fig.subplots(rows_each * nrows, ncols, squeeze=False)
    cells = [[axes[rows_each * (k // ncols) + i][k % ncols] for i in range(rows_each)] for k in range(nrows * ncols)]
    for unused in cells[count:]:
        for ax in unused:
            ax.set_visible(False)
    return fig, cells[:count], ncols


def new_figure(width: float, height: float) -> Any:
    """A figure laid out by matplotlib (constrained), with EDGE_PAD inches kept clear on every
    side: an axis that reaches the edge of the image looks cut, as a title does."""
    from matplotlib.figure import Figure  # lazy: matplotlib (~0.3 s) only in the processes that draw

    fig = Figure(figsize=(width, height), layout="constrained")
    fig.get_layout_engine().set(w_pad=EDGE_PAD, h_pad=EDGE_PAD)
    return fig


def case_title(ax: Any, case: tuple[str, str], note: str = "") -> None:
    """A panel's title: its network on its dataset, and a warning below it in red where given."""
    ax.set_title(f"{case[1]} on {case[0]}" + (f"\n{note}" if note else ""), fontsize=9, loc="left",
                 color=NA_COLOUR if note else "black")


def mark_na(ax: Any, xs: Sequence[float], size: float) -> None:
    """A cross on the x axis at each of `xs` that has no number: on the axis, never a point or
    bar at 0 (its label, where there is room, is the caller's)."""
    if xs:
        ax.plot(list(xs), [0] * len(xs), linestyle="", marker="x", color=NA_COLOUR, markersize=size,
                transform=ax.get_xaxis_transform(), clip_on=False)


def fit_titles(fig: Any) -> None:
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


def save(fig: Any, out: Path, name: str, caption: str) -> Written:
    """The figure as `<name>.svg` and `.png` in `out`, its titles fitted first; what it shows."""
    svg, png = out / f"{name}.svg", out / f"{name}.png"
    fit_titles(fig)
    fig.savefig(svg, format="svg", metadata={"Date": None})
    fig.set_layout_engine("none")  # laid out once, by the first save: the second keeps those positions
    fig.savefig(png, format="png", dpi=100)
    return Written(name, svg, png, caption)


def colours(n: int) -> list[Any]:
    """`n` distinct colours (matplotlib's tab10, tab20 beyond ten)."""
    from matplotlib import colormaps  # lazy: matplotlib (~0.3 s) only in the processes that draw

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def styles(values: Sequence[Any], kind: str) -> dict[Any, Any]:
    """A colour (kind="colour") or marker (kind="marker") for each distinct value, in sorted order."""
    ordered = sorted({str(v) for v in values})
    picks = colours(len(ordered)) if kind == "colour" else [MARKERS[i % len(MARKERS)] for i in range(len(ordered))]
    return dict(zip(ordered, picks))


def key_legend(fig: Any, colour_of: dict[str, Any], colour_title: str, markers: dict[str, str], marker_title: str,
               extra: Sequence[tuple[Any, str]] = (), columns: int = 6) -> None:
    """One legend below the figure that explains colours, markers and line styles, however many
    lines or points the figure has."""
    from matplotlib.lines import Line2D  # lazy: matplotlib (~0.3 s) only in the processes that draw

    handles = [Line2D([], [], color=c, marker="s", linestyle="") for c in colour_of.values()]
    labels = [f"{colour_title}: {name}" for name in colour_of]
    handles += [Line2D([], [], color="#444", marker=m, linestyle="") for m in markers.values()]
    labels += [f"{marker_title}: {name}" for name in markers]
    for handle, text in extra:
        handles.append(handle)
        labels.append(text)
    fig.legend(handles, labels, loc="outside lower center", ncols=min(columns, max(1, len(labels))), fontsize=7,
               frameon=False)


def log_axis(ax: Any, which: str = "y") -> None:
    """A log axis labelled 1, 10, 100, 1,000 ... or 0.01, 0.1 (plain numbers: no mathtext to typeset)."""
    # lazy: matplotlib (~0.3 s) only in the processes that draw
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis = ax.yaxis if which == "y" else ax.xaxis
    (ax.set_yscale if which == "y" else ax.set_xscale)("log")
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 1 else f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def spans(values: Sequence[float]) -> bool:
    """Whether positive values span more than LOG_SPAN (a log axis shows them better)."""
    return bool(values) and min(values) > 0 and max(values) / min(values) > LOG_SPAN


def draw_one(draw: Any, *args: Any) -> Written | str:
    """A figure drawn by a function of another module (report/inference.py), in the figures' style."""
    from matplotlib import rc_context  # lazy: matplotlib (~0.3 s) only in the processes that draw

    with rc_context(STYLE):
        return draw(*args)
