"""`orchestrator compare`: a base against a new measurement, cell by cell, with a verdict that
uses the repeats' spread.

Each side is a set of table entries for one metric: a sweep's (from the database, as the report
makes them) or a CSV in the report's table format (`tables/<metric>.csv`; published numbers typed
in need only `dataset, model, framework, hardware, gpus, median`, and `n`, `cv` where known).
Cells match on their settings; a setting a CSV leaves empty matches any, except one with a default
(nodes, input, mode), which then says its default, as the database's empty one does.

The verdict, per matched cell, on the ratio r = new ÷ base of the medians (base ÷ new for a
metric where smaller is better, so r > 1 is always an improvement):

    noise = 1.2533 × sqrt(cv_base² / n_base + cv_new² / n_new)

is the relative standard error of that ratio (1.2533 × σ/√n is a median's standard error;
a side with one repeat, or no CV, is taken to vary by the noisy threshold, schema.NOISY_CV). A
change is beyond noise when |r − 1| > Z × noise (Z = 2, about 95 %): then the cell is faster or
slower (better or worse), otherwise within noise. A cell slower beyond noise *and* by more than
`--threshold` percent is a regression; any regression makes the exit status 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from orchestrator.store import schema
from orchestrator import setting_registry
from orchestrator.metric_registry import BY_NAME, MetricDef
from orchestrator.report.labels import hardware_label
from orchestrator.report.tables import OK, PARAMS, Entry
from orchestrator.report.table_files import CsvError, read_csv

#: A median's standard error is this × σ / √n (normal data).
MEDIAN_SE = 1.2533
#: Standard errors a change must exceed to be beyond noise.
Z = 2.0

WITHIN = "within noise"
#: the settings an empty value gives their default to
DEFAULTS = {s.name: s.default for s in setting_registry.SETTINGS if s.default is not None}


@dataclass(frozen=True)
class Match:
    base: Entry
    new: Entry
    gain: float        # > 1: better (faster), < 1: worse (slower)
    noise: float       # the relative standard error of the ratio
    verdict: str       # faster | slower | better | worse | within noise
    regression: bool   # worse beyond noise and by more than the threshold

    @property
    def change(self) -> float:
        """The change in percent, + better."""
        return (self.gain - 1.0) * 100.0


@dataclass
class Comparison:
    metric: MetricDef
    threshold: float                                 # percent
    matched: list[Match] = field(default_factory=list)
    only_base: list[Entry] = field(default_factory=list)
    only_new: list[Entry] = field(default_factory=list)
    no_number: list[tuple[Entry, Optional[Entry]]] = field(default_factory=list)  # a side without a number
    ambiguous: list[tuple[Entry, int]] = field(default_factory=list)            # base entry, candidates

    @property
    def regressions(self) -> list[Match]:
        return [m for m in self.matched if m.regression]


def label(entry: Entry) -> str:
    """A cell as one line: framework/model/dataset on hardware ×gpus, and the other set settings."""
    s = entry.settings
    text = f"{s.get('framework') or '?'}/{s.get('model') or '?'}/{s.get('dataset') or '?'} on " \
           f"{hardware_label(s.get('hardware'), s.get('gpus'))}"
    extra = [f"{k}={s[k]}" for k in ("threads", "batch_size", "precision") if s.get(k) is not None]
    return text + (f" ({', '.join(extra)})" if extra else "")


def _spread(entry: Entry) -> tuple[float, int]:
    """(relative spread, repeats) of a side: its CV, or the noisy threshold where unknown."""
    s = entry.stats
    cv = s.cv if s is not None and s.n > 1 else None
    return (schema.NOISY_CV if cv is None else cv), (s.n if s is not None else 1)


def verdict(base: Entry, new: Entry, metric: MetricDef, threshold: float) -> Match:
    """One matched cell's ratio, noise and verdict (the module's docstring has the rule)."""
    ratio = new.median / base.median
    gain = ratio if metric.larger_is_better else 1.0 / ratio
    (cv_b, n_b), (cv_n, n_n) = _spread(base), _spread(new)
    noise = MEDIAN_SE * math.sqrt(cv_b ** 2 / n_b + cv_n ** 2 / n_n)
    beyond = abs(gain - 1.0) > Z * noise
    throughput = metric.unit.endswith("/s")
    word = ("faster" if throughput else "better") if gain > 1 else ("slower" if throughput else "worse")
    regression = beyond and gain < 1 and (1.0 - gain) * 100.0 > threshold
    return Match(base, new, gain, noise, word if beyond else WITHIN, regression)


def _fits(a: dict, b: dict) -> bool:
    """Settings that agree wherever both say something. A setting with a default (nodes,
    input, mode) says its default when empty, in the database and in a CSV alike: a 1-node
    cell never matches a 2-node one."""
    a, b = _said(a), _said(b)
    return all(a[k] is None or b.get(k) is None or a[k] == b[k] for k in a)


def _said(settings: dict) -> dict:
    return {k: DEFAULTS.get(k) if v is None else v for k, v in settings.items()}


def compare(base: Sequence[Entry], new: Sequence[Entry], metric: MetricDef, threshold: float) -> Comparison:
    """Matches the sides' cells (a setting left empty matches any; where that leaves several, the
    one equal in every setting) and judges each pair."""
    out = Comparison(metric, threshold)
    used: set[int] = set()
    for b in base:
        candidates = [i for i, n in enumerate(new) if _fits(b.settings, n.settings)]
        if len(candidates) > 1:
            candidates = [i for i in candidates if new[i].settings == b.settings] or candidates
        if len(candidates) > 1:
            out.ambiguous.append((b, len(candidates)))
            used.update(candidates)
            continue
        if not candidates:
            out.only_base.append(b)
            continue
        n = new[candidates[0]]
        used.add(candidates[0])
        if b.status != OK or n.status != OK or not (b.median or 0) > 0 or not (n.median or 0) > 0:
            out.no_number.append((b, n))
        else:
            out.matched.append(verdict(b, n, metric, threshold))
    out.only_new = [n for i, n in enumerate(new) if i not in used]
    return out


# --- the command --------------------------------------------------------------------------------

class UsageError(ValueError):
    """What `compare` was given cannot be compared; the message says what to give instead."""


@dataclass
class Side:
    """One side of a comparison: what it is, its metric and its entries."""

    name: str
    metric: str
    entries: list[Entry]


def metric_def(name: str) -> MetricDef:
    """The metric a comparison is about: metric_registry's (or the parameter count), with a direction."""
    metric = PARAMS if name == "params" else BY_NAME.get(name)
    if metric is None:
        raise UsageError(f"--metric {name}: no such metric; use one of {', '.join(BY_NAME)}")
    if metric.larger_is_better is None:
        better = [m.name for m in BY_NAME.values() if m.larger_is_better is not None]
        raise UsageError(f"--metric {name}: {metric.description} has no better direction (metric_registry), so "
                         f"nothing is faster or slower; compare one of {', '.join(better)}")
    return metric


def load_side(spec: str, metric: Optional[str], from_sweep: Callable[[str, str], tuple[str, list[Entry]]]) -> Side:
    """A side named on the command line: a CSV in the report's table format, a report's directory
    (its tables/<metric>.csv), or a sweep (id, prefix or 'latest'; `from_sweep(spec, metric)` reads it)."""
    path = Path(spec)
    if path.is_dir():
        path = path / "tables" / f"{metric or 'images_per_sec'}.csv"
        if not path.is_file():
            raise UsageError(f"{spec} is a directory without {path.relative_to(spec)}; give a report's directory, "
                             f"a table CSV or a sweep")
    if path.is_file() or spec.endswith(".csv"):
        if not path.is_file():
            raise UsageError(f"{spec}: no such file; give a table CSV (a report's tables/<metric>.csv) or a sweep")
        try:
            name, entries = read_csv(path, metric)
        except CsvError as exc:
            raise UsageError(str(exc)) from None
        return Side(str(path), name, entries)
    name = metric or "images_per_sec"
    described, entries = from_sweep(spec, name)
    return Side(described, name, entries)


def print_comparison(c: Comparison, base: Side, new: Side, out: Any) -> None:
    """The matched cells with both medians, the ratio and the verdict; then what did not match."""
    # lazy: rich's tables only when a comparison is printed (cli imports this module)
    from rich import box
    from rich.table import Table
    from rich.text import Text

    unit = c.metric.column_unit
    table = Table(title=f"{c.metric.name} ({unit}): new {new.name} against base {base.name}", title_justify="left",
                  box=box.SIMPLE_HEAD)
    for name in ("cell", "base", "new", "new/base", "change", "noise ±", "verdict"):
        table.add_column(name, justify="left" if name in ("cell", "verdict") else "right", no_wrap=name != "cell")
    styles = {"faster": "green", "better": "green", "slower": "red", "worse": "red"}
    for m in sorted(c.matched, key=lambda m: m.gain):
        verdict_text = m.verdict + (f" (beyond {c.threshold:g}%)" if m.regression else "")
        table.add_row(Text(label(m.base)), Text(_median(m.base)), Text(_median(m.new)),
                      f"{m.new.median / m.base.median:.3f}", f"{m.change:+.1f}%", f"{Z * m.noise * 100:.1f}%",
                      Text(verdict_text, style=styles.get(m.verdict, "")))
    out.print(table)
    for title, entries in (("only in base", c.only_base), ("only in new", c.only_new)):
        if entries:
            out.print(f"{len(entries)} cell(s) {title} (not compared):", markup=False)
            for e in entries:
                out.print(f"  {label(e)}", markup=False, soft_wrap=True)
    for b, n in c.no_number:
        why = "; ".join(f"{side}: n/a ({e.reason or e.status})" for side, e in (("base", b), ("new", n))
                        if e is not None and e.status != OK)
        out.print(f"not compared, no number: {label(b)}: {why}", markup=False, soft_wrap=True)
    for b, k in c.ambiguous:
        out.print(f"not compared, matches {k} cells of new (give the CSV more settings): {label(b)}", markup=False,
                  soft_wrap=True)
    counts = {v: sum(1 for m in c.matched if m.verdict == v) for v in dict.fromkeys(m.verdict for m in c.matched)}
    out.print(f"{len(c.matched)} cell(s) compared: " + (", ".join(f"{n} {v}" for v, n in counts.items()) or "none"),
              markup=False)
    if c.regressions:
        out.print(f"REGRESSION: {len(c.regressions)} cell(s) slower than {c.threshold:g}% beyond noise:", markup=False)
        for m in c.regressions:
            out.print(f"  {label(m.base)}: {m.change:+.1f}% (noise ±{Z * m.noise * 100:.1f}%)", markup=False,
                      soft_wrap=True)


def _median(entry: Entry) -> str:
    s = entry.stats
    text = f"{entry.median:,.1f}" if entry.median is not None else "-"
    if s is not None and s.n > 1 and s.cv is not None:
        text += f" (n={s.n}, CV {s.cv * 100:.1f}%)"
    elif s is not None:
        text += f" (n={s.n})"
    return text
