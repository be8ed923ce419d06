"""`orchestrator compare`: a base against a new measurement, cell by cell, with a verdict that
uses the repeats' spread.

Each side is a set of table entries for one metric: a sweep's (from the database, as the report
makes them) or a CSV in the report's table format (`tables/<metric>.csv`; published numbers typed
in need only `dataset, model, framework, hardware, gpus, median`, and `n`, `cv` where known).
Cells match on their settings; a setting a CSV leaves empty matches any, except one with a default
(nodes, input, mode), which then says its default, as the database's empty one does.

The verdict, per matched cell (verdict.py says why this test and this correction): the ratio
r = new ÷ base of the geometric means of the repeats (base ÷ new for a metric where smaller is
better, so r > 1 is always an improvement), with its 95 % confidence interval and p from a
moderated t-test on the logarithms of the repeats (a CSV side, which has only median, n and CV: a
log-normal sample with those); the p-values of all the cells tested at once are adjusted by Benjamini–Hochberg.
A cell is faster or slower (better or worse) when its adjusted p is below 0.05 and r differs from 1
by more than `--threshold` percent (the minimum effect); otherwise no change; with fewer than 3
repeats on a side, too few repeats (not tested, not counted in the correction). Any slower (worse)
cell is a regression, and makes the exit status 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from orchestrator import setting_registry
from orchestrator.metric_registry import BY_NAME, MetricDef
from orchestrator.report import verdict
from orchestrator.report.labels import hardware_label
from orchestrator.report.tables import OK, PARAMS, Entry
from orchestrator.report.table_files import CsvError, read_csv

NO_CHANGE, TOO_FEW = "no change", "too few repeats"
#: the settings an empty value gives their default to
DEFAULTS = {s.name: s.default for s in setting_registry.SETTINGS if s.default is not None}


@dataclass(frozen=True)
class Match:
    base: Entry
    new: Entry
    gain: float                     # > 1: better (faster), < 1: worse (slower)
    interval: tuple[float, float]   # the gain's 95 % confidence interval ((gain, gain) untested)
    p: Optional[float]              # the two-sided p; None: too few repeats
    p_adjusted: Optional[float]     # Benjamini-Hochberg's over the cells tested
    verdict: str                    # faster | slower | better | worse | no change | too few repeats

    @property
    def change(self) -> float:
        """The change in percent, + better."""
        return (self.gain - 1.0) * 100.0

    @property
    def regression(self) -> bool:
        return self.verdict in ("slower", "worse")


@dataclass
class Comparison:
    metric: MetricDef
    threshold: float                                 # percent: the minimum effect
    matched: list[Match] = field(default_factory=list)
    only_base: list[Entry] = field(default_factory=list)
    only_new: list[Entry] = field(default_factory=list)
    no_number: list[tuple[Entry, Optional[Entry]]] = field(default_factory=list)  # a side without a number
    ambiguous: list[tuple[Entry, int]] = field(default_factory=list)            # base entry, candidates

    @property
    def regressions(self) -> list[Match]:
        return [m for m in self.matched if m.regression]

    @property
    def tested(self) -> int:
        return sum(1 for m in self.matched if m.p is not None)


def label(entry: Entry) -> str:
    """A cell as one line: framework/model/dataset on hardware ×gpus, and the other set settings."""
    s = entry.settings
    text = f"{s.get('framework') or '?'}/{s.get('model') or '?'}/{s.get('dataset') or '?'} on " \
           f"{hardware_label(s.get('hardware'), s.get('gpus'))}"
    extra = [f"{k}={s[k]}" for k in ("threads", "batch_size", "precision") if s.get(k) is not None]
    return text + (f" ({', '.join(extra)})" if extra else "")


def sample(entry: Entry, values: Optional[Mapping[str, Sequence[float]]] = None) -> verdict.LogSample:
    """A side of a cell: its repeats where `values` (cell id -> values) has them, else its table
    numbers (median, n, CV)."""
    if values and entry.cell in values:
        return verdict.LogSample.of_values(values[entry.cell])
    s = entry.stats
    return verdict.LogSample.of_summary(s.n if s else 1, entry.median, s.cv if s and s.n > 1 else None)


def judge(pairs: Sequence[tuple[Entry, Entry]], metric: MetricDef, threshold: float,
          values: tuple[Optional[Mapping], Optional[Mapping]] = (None, None)) -> list[Match]:
    """Each matched pair's test, the correction over all of them, and the verdicts (the module's
    docstring has the rule)."""
    samples = [(sample(b, values[0]), sample(n, values[1])) for b, n in pairs]
    enough = [i for i, (sb, sn) in enumerate(samples) if min(sb.n, sn.n) >= verdict.MIN_REPEATS]
    tests: list[Optional[verdict.Test]] = [None] * len(pairs)
    for i, t in zip(enough, verdict.tests([samples[i] for i in enough])):
        tests[i] = t
    adjusted = iter(verdict.adjusted([t.p for t in tests if t is not None]))
    throughput = metric.unit.endswith("/s")
    out = []
    for (b, n), (sb, sn), t in zip(pairs, samples, tests):
        ratio = t.ratio if t else math.exp(sn.mean - sb.mean)
        lo, hi = (t.lo, t.hi) if t else (ratio, ratio)
        gain, interval = (ratio, (lo, hi)) if metric.larger_is_better else (1 / ratio, (1 / hi, 1 / lo))
        p_adj = next(adjusted) if t else None
        word = TOO_FEW if t is None else NO_CHANGE
        if p_adj is not None and p_adj < verdict.ALPHA and abs(gain - 1.0) * 100.0 > threshold:
            word = ("faster" if throughput else "better") if gain > 1 else ("slower" if throughput else "worse")
        out.append(Match(b, n, gain, interval, t.p if t else None, p_adj, word))
    return out


def _fits(a: dict, b: dict) -> bool:
    """Settings that agree wherever both say something. A setting with a default (nodes,
    input, mode) says its default when empty, in the database and in a CSV alike: a 1-node
    cell never matches a 2-node one."""
    a, b = _said(a), _said(b)
    return all(a[k] is None or b.get(k) is None or a[k] == b[k] for k in a)


def _said(settings: dict) -> dict:
    return {k: DEFAULTS.get(k) if v is None else v for k, v in settings.items()}


def compare(base: Sequence[Entry], new: Sequence[Entry], metric: MetricDef, threshold: float,
            values: tuple[Optional[Mapping], Optional[Mapping]] = (None, None)) -> Comparison:
    """Matches the sides' cells (a setting left empty matches any; where that leaves several, the
    one equal in every setting) and judges the pairs at once (`values`: each side's repeats by
    cell id, where known)."""
    out = Comparison(metric, threshold)
    used: set[int] = set()
    pairs = []
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
            pairs.append((b, n))
    out.matched = judge(pairs, metric, threshold, values)
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
    values: Optional[dict[str, list[float]]] = None  # cell id -> its repeats (a sweep's; a CSV has none)


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


def load_side(spec: str, metric: Optional[str], from_sweep: Callable[[str, str], tuple[str, list[Entry], dict]],
              sweep: str = "latest") -> Side:
    """A side named on the command line: a CSV in the report's table format, a report's directory
    (its tables/<metric>.csv), a sweep (id, prefix or 'latest'; `from_sweep(spec, metric)` reads
    it), or settings `key=value[,key=value]`: the cells of `sweep` with them (with_settings())."""
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
    where = settings_filter(spec) if "=" in spec else None
    described, entries, values = from_sweep(sweep if where else spec, name)
    if where:
        return Side(f"{described} where {spec}", name, with_settings(entries, where), values)
    return Side(described, name, entries, values)


def settings_filter(spec: str) -> dict[str, str]:
    """`key=value[,key=value]` as a mapping; a key must be a setting (setting_registry)."""
    where = {}
    for part in spec.split(","):
        key, _, value = part.partition("=")
        key = key.strip()
        if key not in setting_registry.NAMES or not value.strip():
            raise UsageError(f"{spec}: {part!r} is not setting=value; settings: {', '.join(setting_registry.NAMES)}")
        where[key] = value.strip()
    return where


def with_settings(entries: Sequence[Entry], where: Mapping[str, str]) -> list[Entry]:
    """The entries whose settings say `where` (a setting's default where empty), those settings
    left out of each (new dicts: an entry's own is shared), so that the other side's cells, which
    differ in them, match: `--base framework=torch --new framework=tensorflow`, and later
    `--base build=A --new build=B` (issue 39)."""
    out = []
    for e in entries:
        said = _said(e.settings)
        if all(said.get(k) is not None and str(said[k]) == v for k, v in where.items()):
            out.append(replace(e, settings={k: v for k, v in e.settings.items() if k not in where}))
    return out


def print_comparison(c: Comparison, base: Side, new: Side, out: Any) -> None:
    """The matched cells with both medians, the ratio with its interval, p, adjusted p and the
    verdict; then what did not match, the counts and the regressions."""
    # lazy: rich's tables only when a comparison is printed (cli imports this module)
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"{c.metric.name} ({c.metric.column_unit}): new {new.name} against base {base.name}",
                  title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("cell", "base", "new", "gain", "95% CI", "change", "p", "adj. p", "verdict"):
        table.add_column(name, justify="left" if name in ("cell", "verdict") else "right", no_wrap=name != "cell")
    styles = {"faster": "green", "better": "green", "slower": "red", "worse": "red"}
    for m in sorted(c.matched, key=lambda m: m.gain):
        ci = "-" if m.p is None else f"{m.interval[0]:.3f}-{m.interval[1]:.3f}"
        table.add_row(Text(label(m.base)), Text(_median(m.base)), Text(_median(m.new)), f"{m.gain:.3f}", ci,
                      f"{m.change:+.1f}%", _p(m.p), _p(m.p_adjusted), Text(m.verdict, style=styles.get(m.verdict, "")))
    out.print(table)
    _print_unmatched(c, out)
    counts = {v: sum(1 for m in c.matched if m.verdict == v) for v in dict.fromkeys(m.verdict for m in c.matched)}
    out.print(f"{len(c.matched)} cell(s) compared: " + (", ".join(f"{n} {v}" for v, n in counts.items()) or "none")
              + f" (moderated t-test on log values, Benjamini-Hochberg over the {c.tested} tested at a false discovery "
              f"rate of {verdict.ALPHA:g}, minimum effect {c.threshold:g}%; gain = new/base, base/new where smaller "
              f"is better)", markup=False, soft_wrap=True)
    if c.regressions:
        out.print(f"REGRESSION: {len(c.regressions)} cell(s) slower by more than {c.threshold:g}% at adjusted "
                  f"p < {verdict.ALPHA:g}:", markup=False)
        for m in c.regressions:
            out.print(f"  {label(m.base)}: {m.change:+.1f}% (95% CI {(m.interval[0] - 1) * 100:+.1f}% to "
                      f"{(m.interval[1] - 1) * 100:+.1f}%, adj. p {_p(m.p_adjusted)})", markup=False, soft_wrap=True)


def _print_unmatched(c: Comparison, out: Any) -> None:
    """The cells one side has alone, those without a number, and those matching several."""
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


def _p(p: Optional[float]) -> str:
    return "-" if p is None else f"{p:.2g}"


def _median(entry: Entry) -> str:
    s = entry.stats
    text = f"{entry.median:,.1f}" if entry.median is not None else "-"
    if s is not None and s.n > 1 and s.cv is not None:
        text += f" (n={s.n}, CV {s.cv * 100:.1f}%)"
    elif s is not None:
        text += f" (n={s.n})"
    return text
