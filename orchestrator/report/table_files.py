"""A metric's table as files, and back: `<metric>.csv` (one row per cell in CSV_COLUMNS, the same
shape for every sweep) and `<metric>.md` (the grid with numbered notes for the reasons), written
for the report; a CSV read back into entries for `compare` — the report's own or published
numbers typed in with the key columns and `median` only.

Apart from tables.py so that the table (what an entry is, how the grid is laid out) reads apart
from its formats.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Optional

from orchestrator import setting_registry
from orchestrator.setting_registry import NAMES as SETTINGS
from orchestrator.report import query
from orchestrator.report.tables import CSV_COLUMNS, NOT_MEASURED, OK, Entry, Table, grid


# --- files --------------------------------------------------------------------------------------

def csv_rows(table: Table) -> list[dict[str, Any]]:
    """The table as CSV rows (CSV_COLUMNS), one per entry, in the table's order."""
    out = []
    for row in table.rows:
        for column in table.columns:
            e = table.at(row, column)
            if e is None:
                continue
            s = e.stats
            out.append({**{k: e.settings.get(k) for k in SETTINGS}, "config": table.column_label(column),
                        "metric": table.spec.metric.name, "unit": table.spec.unit,
                        "median": s.median if s else None, "n": s.n if s else None,
                        "cv": s.cv if s else None, "min": s.lo if s else None, "max": s.hi if s else None,
                        "noisy": None if e.noisy is None else int(e.noisy), "status": e.status,
                        "reason": e.reason, "detail": e.detail, "cell": e.cell})
    return out


def write_csv(table: Table, path: Path) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in csv_rows(table):
            writer.writerow({k: "" if v is None else _csv_value(v) for k, v in row.items()})
    return path


def _csv_value(value: Any) -> Any:
    return repr(value) if isinstance(value, float) else value


def markdown(table: Table) -> str:
    """The table as Markdown: the grid, then its notes (why each n/a, what else happened)."""
    spec = table.spec
    out = [f"## {spec.title} ({spec.unit})", "", f"{spec.metric.description}; the median over each cell's "
           f"repeats (n), CV = standard deviation / mean, noisy above {table.noisy_cv * 100:g}%.", ""]
    header = table.row_headers() + [table.column_label(c) for c in table.columns]
    out += ["| " + " | ".join(header) + " |",
            "|" + "|".join(["---"] * len(table.row_fields) + ["--:"] * len(table.columns)) + "|"]
    rows, notes = grid(table)
    for values, shown in rows:
        cells = [(f"{c.value}" + (f" ({c.spread})" if c.spread else "") if c.value is not None else f"n/a ({c.reason})")
                 + (f" [{c.note}]" if c.note else "") for c in shown]
        out.append("| " + " | ".join(v.replace("|", "\\|") for v in values + cells) + " |")
    if notes:
        out += [""] + [f"{i}. {text}".replace("|", "\\|") for i, text in enumerate(notes, 1)]
    return "\n".join(out) + "\n"


def write_markdown(table: Table, path: Path) -> Path:
    path.write_text(markdown(table))
    return path


# --- reading a CSV back (compare) ---------------------------------------------------------------

#: The columns a CSV given to `compare` must have; the other CSV_COLUMNS are optional (a setting
#: with a default, as `nodes`, too: published numbers typed in before it existed lack it).
REQUIRED = (*(s.name for s in setting_registry.SETTINGS if s.names_a_number and s.default is None), "median")


class CsvError(ValueError):
    """A CSV that is not in the report's table format; the message says what is wrong."""


def read_csv(path: Path, metric: Optional[str] = None) -> tuple[str, list[Entry]]:
    """(metric name, entries) of a table CSV: the report's own, or published numbers typed in with
    at least REQUIRED's columns. Settings a CSV leaves out (or empty) are None: they match any.
    A row without a median is an n/a; `metric` picks the rows of that metric where the CSV
    holds several (a `metric` column), and names the metric where it holds none."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise CsvError(f"{path}: cannot be read ({exc})") from None
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise CsvError(f"{path}: no {', '.join(missing)} column(s); a table CSV has at least "
                       f"{', '.join(REQUIRED)} (the report's tables/<metric>.csv has them all)")
    entries, names = [], set()
    for line, row in enumerate(reader, 2):
        name = (row.get("metric") or "").strip() or metric or "images_per_sec"
        if metric and name != metric:
            continue
        names.add(name)
        try:
            entries.append(_entry(row))
        except ValueError as exc:
            raise CsvError(f"{path}, line {line}: {exc}") from None
    if len(names) > 1:
        raise CsvError(f"{path} holds metrics {', '.join(sorted(names))}; pick one with --metric")
    return (names.pop() if names else metric or "images_per_sec"), entries


def _entry(row: dict[str, Any]) -> Entry:
    def value(key: str, kind: type = str) -> Any:
        text = (row.get(key) or "").strip()
        if not text:
            return None
        try:
            return kind(float(text)) if kind is int else kind(text)
        except ValueError:
            raise ValueError(f"{key}={text!r} is not a number") from None

    # a table written before a setting existed (nodes) has no column for it: its default
    settings = setting_registry.filled({s.name: value(s.name, s.kind) for s in setting_registry.SETTINGS})
    median = value("median", float)
    if median is None:
        return Entry(settings, (row.get("status") or "").strip() or NOT_MEASURED,
                     (row.get("reason") or "").strip() or "no number", (row.get("detail") or "").strip())
    n = value("n", int) or 1
    cv = value("cv", float)
    stats = query.Stats(n, median, median, None if cv is None else cv * abs(median),
                        value("min", float) or median, value("max", float) or median)
    noisy = value("noisy", int)
    return Entry(settings, OK, cell=value("cell"), stats=stats, noisy=None if noisy is None else bool(noisy))

