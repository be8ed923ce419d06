"""The report's builds section (issue 39 item 5): cells that differ only in `build`, side by side.

A case is a set of cells equal in every setting but `build` (setting_registry). Where the sweeps hold
one, the page gets a section "Builds" (nothing where they hold none: no empty heading):
    - figure `builds`: a panel per case, a bar per build at its median images/s, each repeat a dot,
      a whisker from the smallest repeat to the largest, and above each bar its verdict;
    - table `builds` (HTML on the page, tables/builds.csv): a row per build of each case with its
      median, n, CV and range; against the case's base build — `default` where it has a number, else
      the first build by name that has one — the verdict, and the provenance difference that explains it.
The verdict is `orchestrator compare`'s own (compare.judge: a moderated t-test on the logs of the
repeats, Benjamini–Hochberg, the minimum effect metric_registry.MIN_EFFECT_PCT), over every comparison
on the page at once: a reader takes in all of them together, so the correction counts all of them.
The difference names each part of ASPECTS in which the runs' recorded provenance differs from the
base's ("BLAS: OpenBLAS 0.3.21 → BLIS 0.9.0"): what the runs themselves loaded, not what a build's
name promises.
"""
from __future__ import annotations

import csv
import html
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from orchestrator.metric_registry import BY_NAME
from orchestrator.report import compare, verdict
from orchestrator.report.drawing import Written, log_axis, mark_na, panels, save, spans, styles
from orchestrator.report.tables import OK, Entry
from orchestrator.setting_registry import DEFAULT_BUILD

SPEED = BY_NAME["images_per_sec"]
#: The parts of a run's provenance record (orchestrator/job/provenance.py) a difference names:
#: (label, the keys that lead to it, how its values join: + for libraries a process loaded together,
#: / for values that differ between a cell's runs). The version's label is the framework's name.
ASPECTS = (
    (None, ("framework", "version"), " / "),
    ("BLAS", ("framework", "blas"), " + "),
    ("compiler", ("framework", "compiler"), " / "),
    ("CUDA", ("framework", "build", "cuda"), " / "),
    ("cuDNN", ("framework", "build", "cudnn"), " / "),
    ("Python's compiler", ("framework", "python_compiler"), " / "),
)
#: The CSV's columns (tables/builds.csv).
COLUMNS = ("case", "build", "median", "n", "cv", "min", "max", "status", "reason", "base", "gain", "ci_low",
           "ci_high", "p", "p_adjusted", "verdict", "difference", "recorded", "cell")
#: Characters of a 9-point title per inch of its panel (drawing.fit_titles wraps only at the figure's
#: edge, and a case's name is long: a title wrapped to its panel runs into no neighbour's).
TITLE_CHARS = 11
NOT_DRAWN = "images/s per build: no cell that ran in several builds has a number"


@dataclass(frozen=True)
class Row:
    """One build of a case: its entry and repeats; against the base (None for the base itself, and
    where a side has no number) compare's Match; the provenance it recorded and its difference."""

    case: str
    build: str
    entry: Entry
    values: tuple[float, ...]
    base: str
    match: Optional[compare.Match]
    recorded: str
    difference: str


def cases(entries: Sequence[Entry], values: Mapping[str, Sequence[float]],
          records: Mapping[str, Sequence[Mapping[str, Any]]], threshold: float) -> list[list[Row]]:
    """The cases among the images/s table's `entries`, each its rows, the base build's first;
    `values`: cell id -> its repeats; `records`: cell id -> its runs' provenance records."""
    found = _groups(entries)
    pairs = [(g[0], e) for g in found for e in g[1:] if _number(g[0]) and _number(e)]
    judged = dict(zip([id(n) for _, n in pairs],
                      compare.judge(pairs, SPEED, threshold, (values, values)) if pairs else []))
    out, named = [], _case_labels([g[0] for g in found])
    for group in sorted(found, key=lambda g: named[id(g[0])]):
        base, shown = group[0], {id(e): described(records.get(e.cell or "", ())) for e in group}
        out.append([Row(named[id(base)], _build(e), e, tuple(values.get(e.cell or "", ())),
                        "" if e is base else _build(base), judged.get(id(e)), _line(shown[id(e)], _name(e)),
                        "" if e is base else difference(shown[id(base)], shown[id(e)], _name(e)))
                    for e in group])
    return out


def _groups(entries: Sequence[Entry]) -> list[list[Entry]]:
    """The entries equal in every setting but the build, where they hold more than one build, each base first."""
    groups: dict[tuple, list[Entry]] = {}
    for e in entries:
        groups.setdefault(tuple(sorted((k, repr(v)) for k, v in e.settings.items() if k != "build")), []).append(e)
    return [_ordered(g) for g in groups.values() if len({_build(e) for e in g}) > 1]


def case_cells(entries: Sequence[Entry]) -> list[str]:
    """The cell ids of the entries in a case: the cells whose repeats and provenance the section reads."""
    return [e.cell for group in _groups(entries) for e in group if e.cell]


def _case_labels(bases: Sequence[Entry]) -> dict[int, str]:
    """id(base entry) -> its case's name: compare.label, and where cases share one, the settings
    that tell those cases apart."""
    named = {id(e): compare.label(e) for e in bases}
    for text in {t for t in named.values() if list(named.values()).count(t) > 1}:
        same = [e for e in bases if named[id(e)] == text]
        differ = sorted({k for e in same for k in e.settings if k != "build"
                         and len({repr(b.settings.get(k)) for b in same}) > 1})
        named.update({id(e): text + "".join(f", {k}={e.settings.get(k)}" for k in differ) for e in same})
    return named


def _build(e: Entry) -> str:
    return str(e.settings.get("build") or DEFAULT_BUILD)


def _name(e: Entry) -> str:
    return str(e.settings.get("framework") or "framework")


def _number(e: Entry) -> bool:
    return e.status == OK and (e.median or 0) > 0


def _ordered(group: Sequence[Entry]) -> list[Entry]:
    """The base build first (default where it has a number, else the first by name with one), then by name."""
    by_name = sorted(group, key=lambda e: (_build(e) != DEFAULT_BUILD, _build(e)))
    base = next((e for e in by_name if _number(e)), by_name[0])
    return [base] + [e for e in by_name if e is not base]


# --- provenance ----------------------------------------------------------------------------------

def described(records: Sequence[Mapping[str, Any]]) -> dict[int, tuple[str, ...]]:
    """ASPECTS index -> the distinct values the runs recorded of it, as text (a BLAS list gives one
    per library); an aspect none of them recorded is absent."""
    out = {}
    for i, (_, keys, _) in enumerate(ASPECTS):
        values = [_at(r, keys) for r in records]
        texts = [_blas(b) for v in values if isinstance(v, list) for b in v if isinstance(b, Mapping)]
        texts += [str(v) for v in values if v is not None and not isinstance(v, (bool, list, dict))]
        if texts:
            out[i] = tuple(dict.fromkeys(texts))
    return out


def _at(record: Any, keys: Sequence[str]) -> Any:
    for key in keys:
        record = record.get(key) if isinstance(record, Mapping) else None
    return record


#: a release in a BLAS's version text: OpenBLAS's is its whole config line ("OpenBLAS 0.3.21 NO_LAPACKE
#: ..."), MKL's a sentence ("Intel(R) oneAPI Math Kernel Library Version 2026.2-Product Build ...")
_RELEASE = re.compile(r"\d+(?:\.\d+)+")
#: the characters of a version text read for its name: a run's provenance comes from its result file, and
#: _RELEASE scans a long run of digits in quadratic time (40,000 digits: 23 s); MKL's whole text is 120
VERSION_CHARS = 256


def blas_release(entry: Mapping[str, Any]) -> str:
    """`OpenBLAS 0.3.21`, `MKL 2026.2`: the library of a run's `blas` entry and the first dotted release
    in its version text (or the text's first word after the library's name). The builds page and
    benchmarks/blas_builds.py name a loaded BLAS by it."""
    library, version = str(entry.get("library") or "?"), str(entry.get("version") or "")[:VERSION_CHARS].split()
    if version and version[0] == library:
        version = version[1:]
    release = _RELEASE.search(" ".join(version))
    version = [release.group(0)] if release else version
    return " ".join([library, *version[:1]])


def _blas(entry: Mapping[str, Any]) -> str:
    """`OpenBLAS 0.3.21 (2 threads)`, `MKL 2026.2 (1 thread)`: blas_release and its pool's size."""
    threads = entry.get("threads")
    return " ".join([blas_release(entry)] + ([f"({threads} thread{'s' if threads != 1 else ''})"]
                                             if isinstance(threads, int) else []))


def _label(i: int, framework: str) -> str:
    return ASPECTS[i][0] or framework


def _joined(i: int, texts: Sequence[str]) -> str:
    """An aspect's values as one text: libraries loaded together joined by +, values that differ between runs by /."""
    return ASPECTS[i][2].join(texts)


def _line(shown: Mapping[int, Sequence[str]], framework: str) -> str:
    return "; ".join(f"{_label(i, framework)}: {_joined(i, texts)}" for i, texts in shown.items()) or \
        "no provenance recorded"


def difference(base: Mapping[int, Sequence[str]], new: Mapping[int, Sequence[str]], framework: str) -> str:
    """Each aspect whose recorded values differ, as `label: base → new` ('not recorded' on a side
    without it), the values both sides share left out where each keeps one of its own (a library
    every build's process loads, as numpy's own OpenBLAS beside Caffe's BLAS); joined by '; '."""
    parts = []
    for i in range(len(ASPECTS)):
        b, n = base.get(i, ()), new.get(i, ())
        if set(b) == set(n):
            continue
        own_b, own_n = [t for t in b if t not in n], [t for t in n if t not in b]
        b, n = (own_b, own_n) if own_b and own_n else (b, n)
        parts.append(f"{_label(i, framework)}: {_joined(i, b) or 'not recorded'} → {_joined(i, n) or 'not recorded'}")
    return "; ".join(parts) or "no difference in the recorded provenance"


# --- what the page and the files show -------------------------------------------------------------

def verdict_text(row: Row) -> str:
    """`+12.3% faster (95% CI +8.1% to +16.0%, adj. p 0.0012)`, or why there is none."""
    m = row.match
    if not row.base:
        return "base"
    if m is None:
        return f"no verdict: {row.base} has no number" if _number(row.entry) else "no verdict: no number"
    if m.p is None:
        return f"{m.change:+.1f}%, {m.verdict}"
    return (f"{m.change:+.1f}% {m.verdict} (95% CI {(m.interval[0] - 1) * 100:+.1f}% to "
            f"{(m.interval[1] - 1) * 100:+.1f}%, adj. p {m.p_adjusted:.2g})")


def method(found: Sequence[Sequence[Row]], threshold: float) -> str:
    """The verdict's test and correction, as the page names them."""
    tested = sum(1 for rows in found for r in rows if r.match is not None and r.match.p is not None)
    return (f"the verdict of orchestrator compare: a moderated t-test on the logarithms of the repeats, "
            f"Benjamini–Hochberg over the {tested} comparison{'s' if tested != 1 else ''} tested on this page at a "
            f"false discovery rate of {verdict.ALPHA:g}, minimum effect {threshold:g}%; fewer than "
            f"{verdict.MIN_REPEATS} repeats on a side: too few repeats, not tested")


def write_csv(found: Sequence[Sequence[Row]], path: Path) -> Path:
    """tables/builds.csv: a row per build of each case (COLUMNS), images/s in its stored unit."""
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(COLUMNS)
        for r in (r for rows in found for r in rows):
            s, m = r.entry.stats, r.match
            out.writerow([r.case, r.build, *(("", "", "", "", "") if s is None else
                                             (s.median, s.n, "" if s.cv is None else s.cv, s.lo, s.hi)),
                          r.entry.status, r.entry.reason, r.base,
                          *(("",) * 5 if m is None else (m.gain, m.interval[0], m.interval[1],
                                                         "" if m.p is None else m.p,
                                                         "" if m.p_adjusted is None else m.p_adjusted)),
                          "base" if not r.base else m.verdict if m else "no verdict", r.difference, r.recorded,
                          r.entry.cell or ""])
    return path


def section_html(found: Sequence[Sequence[Row]], threshold: float, figure: str) -> str:
    """The page's Builds section (`figure`: the figure's HTML, '' where not drawn); '' without a case."""
    if not found:
        return ""
    e = html.escape
    head = "".join(f"<th>{h}</th>" for h in ("build", "images/s", "n", "CV", "min–max", "against",
                                              "change and verdict", "provenance"))
    body = []
    for rows in found:
        body.append(f'<tr><th colspan="8" class="case">{e(rows[0].case)}</th></tr>')
        for r in rows:
            s = r.entry.stats
            numbers = (f'<td class="num"><span class="v">{s.median:,.1f}</span></td><td class="num">{s.n}</td>'
                       f'<td class="num">{"" if s.cv is None else f"{s.cv * 100:.1f}%"}</td>'
                       f'<td class="num">{s.lo:,.1f}–{s.hi:,.1f}</td>') if s is not None else (
                f'<td class="na" colspan="4">n/a<span class="why">{e(r.entry.reason or r.entry.status)}</span></td>')
            word = r.match.verdict if r.match else "base" if not r.base else "none"
            body.append(f'<tr data-build="{e(r.build)}"><th>{e(r.build)}</th>{numbers}<td>{e(r.base or "—")}</td>'
                        f'<td class="verdict {e(word.replace(" ", "-"))}">{e(verdict_text(r))}</td>'
                        f'<td>{e(r.difference or r.recorded)}</td></tr>')
    return (f'<h2 id="builds">Builds</h2><p class="sub">Cells that ran in several builds (build=) with every other '
            f'setting equal: images/s per build, the median over the repeats (n, CV, range); each build against its '
            f"case's base build ({e(DEFAULT_BUILD)} where it has a number, else the first by name) by "
            f'{e(method(found, threshold))}. Provenance: the base\'s as its runs recorded it, the others\' '
            f'difference from it. Files: tables/builds.csv</p>{figure}'
            f'<table class="builds"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>')


# --- the figure ----------------------------------------------------------------------------------

def figure(found: Sequence[Sequence[Row]], out: Path) -> Written | str:
    """Figure `builds` (the module's docstring), or why it is not drawn."""
    drawn = [rows for rows in found if any(r.entry.stats for r in rows)]
    if not drawn:
        return NOT_DRAWN
    width = max(3.2, 0.8 * max(len(rows) for rows in drawn) + 1.4)
    fig, cells, _ = panels(len(drawn), (width, 3.4))
    colour_of = styles([r.build for rows in drawn for r in rows], "colour")
    for rows, (ax,) in zip(drawn, cells):
        _panel(ax, rows, colour_of, int(width * TITLE_CHARS))
    return save(fig, out, "builds", "images/s per build of each cell that ran in several builds: the bar the median "
                                    "over the repeats, each dot a repeat, the whisker smallest to largest; above a "
                                    "bar its change against the case's base build and compare's verdict")


def _panel(ax: Any, rows: Sequence[Row], colour_of: Mapping[str, Any], chars: int) -> None:
    """One case: a bar per build, its repeats as dots, its verdict above it; n/a marked on the axis."""
    tops = []
    for x, r in enumerate(rows):
        s = r.entry.stats
        if s is None:
            continue
        ax.bar(x, s.median, color=colour_of[r.build], width=0.6, alpha=0.85)
        ax.errorbar(x, s.median, yerr=[[s.median - s.lo], [s.hi - s.median]], color="#333", capsize=3, linewidth=1)
        ax.plot([x + 0.12 * ((i % 3) - 1) for i in range(len(r.values))], list(r.values), linestyle="", marker="o",
                markersize=3, color="#222")
        note = "base" if not r.base else f"{r.match.change:+.0f}%\n{r.match.verdict}" if r.match else ""
        ax.annotate(note, (x, s.hi), xytext=(0, 6), textcoords="offset points", ha="center", fontsize=7)
        tops.append(s.hi)
    mark_na(ax, [x for x, r in enumerate(rows) if r.entry.stats is None], 8)
    if spans([r.entry.stats.lo for r in rows if r.entry.stats]):
        log_axis(ax)
    ax.set_ylim(top=max(tops) * 1.25)
    ax.set_xticks(range(len(rows)), [r.build for r in rows], fontsize=8)
    ax.set_title(textwrap.fill(rows[0].case, chars), fontsize=9, loc="left")  # within its panel, not its neighbour's
    ax.set_ylabel("images/s")
    ax.grid(axis="y", alpha=0.3)
