"""`results --csv` as lines of text the database writes, in the bytes csv.writer writes (issue 36).

A million runs' CSV built from Python values took 28 s of CPU: 61 Python values a row, and csv's
formatting of each. Here the database hands back each row's line as text, and Python only writes
it. The bytes stay csv.writer's, field by field:

- a run's metric columns are floats, whose text only Python's `repr` gives (SQLite prints 15
  digits): they are formatted by csv.writer itself when they are kept (kept_metrics.csv_text,
  written with the numbers by result_rows.keep_metrics: only a landing of metrics rows changes them);
- the fields that never change once a run is written (its name, its cell's settings, the float
  settings `target_accuracy` and `min_seconds` among them) are written by csv.writer when the run is (store/kept_lines.py);
- the rest, integers and text, are formatted by SQL, where its text equals csv's exactly: an
  integer's digits, and text quoted by csv's rule (QUOTED: the characters that make csv quote a
  field, read from csv itself, since Python versions differ on `\\r`), quotes doubled; NULL is
  empty, a boolean `True`/`False` (str() of what the driver returns). A float there is refused
  (sql_field): it would have to be kept.

A line is joined by one printf (SQLite) / format (PostgreSQL) call; SQLite's printf ends a `%s`
at a NUL, which SQLite's text can hold (a trainer's stderr in a run's message), so a line whose
text columns hold one is joined by `||` instead (_joined; PostgreSQL's text never holds one).

Nothing that can change is kept: a run's state, class, message or node are read as they are.
"""
from __future__ import annotations

import csv
import io
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

from sqlalchemy import (Boolean, Float, Integer, Select, String, Text, case, cast, func, literal, null, select, type_coerce,
                        union_all)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from orchestrator import metric_registry, setting_registry

#: How the commands write CSV (render.write_csv) and how the kept metric text is written: csv's
#: excel dialect (`,`, `"`, minimal quoting, quotes doubled), lines ending in `\n`.
DIALECT: Mapping[str, Any] = {"lineterminator": "\n"}


def _quoted_by_csv(c: str) -> bool:
    out = io.StringIO()
    csv.writer(out, **DIALECT).writerow([f"a{c}b", "x"])
    return out.getvalue().startswith('"')


#: The characters whose presence makes csv quote a field (Python 3.11: the delimiter, the quote
#: character and those of the line terminator; later versions add `\r`), asked of csv itself.
QUOTED = tuple(c for c in (",", '"', "\n", "\r", " ", "\t", ";", "'", "\\") if _quoted_by_csv(c))
#: The metric columns of the `results` view, in its order: what kept_metrics.csv_text holds.
METRIC_COLUMNS = tuple(m.column for m in metric_registry.VIEW_METRICS)
#: A run without a kept row (no metrics rows): its metric fields, every one empty.
NO_METRICS = "," * (len(METRIC_COLUMNS) - 1)


def metric_texts(rows: Sequence[Sequence[Any]]) -> list[str]:
    """Each row's metric values (in METRIC_COLUMNS' order) as csv.writer writes them in a line of
    the CSV, without the line's end. The values are floats or None: no field holds a line's end."""
    out = io.StringIO()
    csv.writer(out, **DIALECT).writerows(rows)
    return out.getvalue().split(DIALECT["lineterminator"])[:-1]


#: Functions SQLite and PostgreSQL name differently: SQLite's name, PostgreSQL's.
POSTGRESQL_NAMES = {"printf": "format"}


class _renamed(FunctionElement):
    """A function of POSTGRESQL_NAMES, written with its name in the connection's dialect."""
    inherit_cache = True


class _format(_renamed):
    """Text of a format (only `%s` marks) and its values. One call builds a line: 30
    concatenations made as many copies of it (~4 s of SQLite's CPU at a million runs)."""
    type = String()
    name = "printf"
    inherit_cache = True


class _quoted(FunctionElement):
    """Whether csv quotes a text (it holds a character of QUOTED)."""
    type = Boolean()
    name = "quoted"
    inherit_cache = True


class _nul(FunctionElement):
    """Whether any of some texts holds a NUL: SQLite's printf stops a `%s` there (its C string's
    end), so a line with one is joined by `||` instead (_joined). PostgreSQL's text never holds one."""
    type = Boolean()
    name = "nul"
    inherit_cache = True


def _any_instr(texts: Sequence[str], chars: Sequence[str], postgresql: bool) -> str:
    """One condition: any of `texts` holds any of `chars` (SQL text of each). On SQLite a position
    is true where it is not 0, so no comparison per character (a dozen fields a row, a second of
    CPU at a million rows); PostgreSQL's strpos is compared."""
    found = [f"strpos({t}, {c}) > 0" if postgresql else f"instr({t}, {c})" for t in texts for c in chars]
    return "(" + " OR ".join(found) + ")"


@compiles(_quoted)
def _sqlite_quoted(element: Any, compiler: Any, **kw: Any) -> str:
    chars = [compiler.process(_text(c), **kw) for c in QUOTED]
    return _any_instr([compiler.process(element.clauses, **kw)], chars, postgresql=False)


@compiles(_quoted, "postgresql")
def _postgresql_quoted(element: Any, compiler: Any, **kw: Any) -> str:
    chars = [compiler.process(_text(c), **kw) for c in QUOTED]
    return _any_instr([compiler.process(element.clauses, **kw)], chars, postgresql=True)


@compiles(_nul)
def _sqlite_nul(element: Any, compiler: Any, **kw: Any) -> str:
    return _any_instr([compiler.process(c, **kw) for c in element.clauses], ["char(0)"], postgresql=False)


@compiles(_nul, "postgresql")
def _postgresql_nul(element: Any, compiler: Any, **kw: Any) -> str:
    return "false"


@compiles(_renamed)
def _sqlite_name(element: Any, compiler: Any, **kw: Any) -> str:
    return f"{element.name}({compiler.process(element.clauses, **kw)})"


@compiles(_renamed, "postgresql")
def _postgresql_name(element: Any, compiler: Any, **kw: Any) -> str:
    return f"{POSTGRESQL_NAMES[element.name]}({compiler.process(element.clauses, **kw)})"


def _text(value: str) -> Any:
    """A text of the line's own (a separator, a quote, the metric fields of a run without any),
    written into the statement as a literal: SQLite evaluates a bound `?` of each expression
    anew per row (at a million rows, 2 s of CPU more than the same text as a literal)."""
    return literal(value, String, literal_execute=True)


def sql_field(expr: Any) -> Any:
    """`expr` as csv writes its value, in SQL: an integer's digits, a boolean's True/False, text
    quoted by csv's rule, NULL empty. Any other type (a float, whose text only Python's repr
    gives) is refused: such a field is written by csv and kept (kept_lines, kept_metrics)."""
    kind = expr.type
    if isinstance(kind, Boolean):
        return case((expr.is_(None), _text("")), (expr, _text("True")), else_=_text("False"))
    if isinstance(kind, Integer):
        return func.coalesce(cast(expr, String), _text(""))
    if isinstance(kind, String):
        return case((expr.is_(None), _text("")),
                    (_quoted(expr), _text('"') + func.replace(expr, _text('"'), _text('""')) + _text('"')), else_=expr)
    raise TypeError(f"`results` column {expr.key!r} ({kind}): SQL cannot write it as csv does; keep its text "
                    "as it is written (store/kept_lines.py)")


def line_column(columns: Iterable[Any], kept: Mapping[str, Any]) -> Any:
    """The CSV's line of a row (its end included), as one text the database joins. `columns`: the
    `results` view's columns in order (labelled); `kept`: columns written as a kept text (already
    csv's), by key: the text, or None where an earlier column's kept text holds this one's field."""
    return _line(columns, kept).label("line")


def _line(columns: Iterable[Any], kept: Mapping[str, Any], start: str = "", end: str = DIALECT["lineterminator"]) -> Any:
    """line_column's text, unlabelled, between `start` and `end`."""
    fields: list[Any] = []
    texts: list[Any] = []  # the text columns and kept texts (whose value may hold a NUL)
    for column in columns:
        if column.key in kept and kept[column.key] is None:
            continue
        field = kept[column.key] if column.key in kept else sql_field(column)
        fields.append(field)
        source = field if column.key in kept else column
        if isinstance(source.type, String) and column.key != METRIC_COLUMNS[0]:  # (floats' text: no NUL)
            texts.append(source)
    return _joined(fields, texts, start, end)


#: The float settings, whose text only Python's repr gives: a run without its kept_lines row reads
#: them from its cell (line_pieces), every other has them in its kept text.
FLOAT_SETTINGS = tuple(s.name for s in setting_registry.SETTINGS if s.kind is float)
#: The labels of line_pieces' columns: a line (or its first piece), then each float and the text after it.
PIECES = ("line", *(f"{piece}_{k}" for k in range(1, len(FLOAT_SETTINGS) + 1) for piece in ("float", "after")))


def line_pieces(columns: Sequence[Any], kept: Mapping[str, Any]) -> list[Any]:
    """The CSV's line of a row as pieces (PIECES' labels): the texts the database joins around
    the float columns no kept text holds (a run without its kept_lines row: the cell's
    FLOAT_SETTINGS), and those floats, whose text only Python's repr gives (lines_of joins them).
    A row without such a float: its line, then NULLs."""
    floats = [i for i, c in enumerate(columns) if c.key not in kept and isinstance(c.type, Float)]
    if len(floats) > len(FLOAT_SETTINGS):
        raise TypeError(f"{len(floats)} float columns without a kept text: csv_lines.PIECES holds "
                        f"{len(FLOAT_SETTINGS)} (FLOAT_SETTINGS)")
    if not floats:
        return [type_coerce(_line(columns, kept), Text).label("line"),
                *(cast(null(), Float if name.startswith("float") else Text).label(name) for name in PIECES[1:])]
    bounds = [-1, *floats, len(columns)]
    texts = [type_coerce(_between(columns[a + 1:b], kept, "," if a >= 0 else "",
                                  "," if b < len(columns) else DIALECT["lineterminator"]), Text)
             for a, b in zip(bounds, bounds[1:])]
    pieces = [texts[0].label("line")]
    for k, at in enumerate(floats, 1):
        pieces += [columns[at].label(f"float_{k}"), texts[k].label(f"after_{k}")]
    return pieces + [cast(null(), Float if name.startswith("float") else Text).label(name)
                     for name in PIECES[len(pieces):]]


def _between(columns: Sequence[Any], kept: Mapping[str, Any], start: str, end: str) -> Any:
    """The text of `columns` between `start` and `end` (_line); no columns: the one separator
    between two floats, nothing before a first float, the line's end after a last."""
    return _line(columns, kept, start, end) if columns else _text(end if start else "")


def lines_of(rows: Iterable[Sequence[Any]]) -> str:
    """The text of rows of line_pieces' columns: each row's line, or its pieces joined, each float
    as csv.writer writes it (repr; NULL empty)."""
    return "".join(row[0] if row[2] is None else row[0] + "".join(
        _field_text(row[i]) + row[i + 1] for i in range(1, len(row), 2) if row[i + 1] is not None) for row in rows)


def _field_text(value: Any) -> str:
    """One value as csv.writer writes it as a field of a line: a float by repr, NULL empty, any
    other value (a text in SQLite's REAL column) by csv itself."""
    if value is None:
        return ""
    if type(value) is float:
        return repr(value)
    out = io.StringIO()
    csv.writer(out, **DIALECT).writerow([value, ""])
    return out.getvalue()[:-1 - len(DIALECT["lineterminator"])]


def _joined(fields: list[Any], texts: Sequence[Any], start: str = "", end: str = DIALECT["lineterminator"]) -> Any:
    """`fields` joined by commas between `start` and `end` (the line's end): by one printf, or by
    `||` where one of the text columns `texts` holds a NUL (printf would end the line there: SQLite
    only, and rare, so CASE evaluates the concatenation for those rows alone)."""
    line = _format(_text(start + ",".join(["%s"] * len(fields)) + end), *fields)
    if texts:
        joined = _text(start)
        for i, field in enumerate(fields):
            joined = joined + (_text(",") if i else _text("")) + field
        line = case((_nul(*texts), joined + _text(end)), else_=line)
    return line


def csv_select(halves: Sequence[tuple[Select, Mapping[str, Any]]], filters: Mapping[str, Sequence[Any]],
               order: Sequence[str], limit: Optional[int]) -> Select:
    """The lines (line_pieces' columns) of the rows of `halves` that match `filters`, the first
    `limit` in `order`. Each half: a select of the `results` view's columns (labelled, in order)
    whose own expressions the conditions and sort keys are, and its `kept` (as line_column). Each
    half ordered (and limited) in a subquery of its own, the halves merged by one compound select
    in `order` (UNION ALL ... ORDER BY its columns): SQLite merges the halves (MERGE (UNION ALL)),
    walking an index in that order where one serves; PostgreSQL's Merge Append takes each half's
    order (with the ORDER BY outside the compound instead, PostgreSQL sorts the whole, and with it
    inside alone, so does SQLite). The select around it keeps the pieces alone."""
    parts = []
    for n, (rows, kept) in enumerate(halves):
        within = {c.key: getattr(c, "element", c) for c in rows.selected_columns}
        half = (rows.with_only_columns(*line_pieces(list(rows.selected_columns), kept),
                                       *(within[name].label(f"order_{i}") for i, name in enumerate(order)),
                                       maintain_column_froms=True)
                .where(*(within[key].in_(values) for key, values in filters.items()))
                .order_by(*(within[name] for name in order)).limit(limit).subquery(f"half_{n}"))
        parts.append(select(half))
    merged = union_all(*parts)
    merged = merged.order_by(*(merged.selected_columns[f"order_{i}"] for i in range(len(order)))).limit(limit)
    lines = merged.subquery("lines")
    return select(*(lines.c[name] for name in PIECES))


def streamed(conn: Any, lines: Select, batch: int) -> Iterator[Sequence[Sequence[str]]]:
    """The rows of `lines` (csv_select's: line_pieces' columns; lines_of writes them), `batch` at a time, never all in
    memory. On SQLite from the driver's own cursor: SQLAlchemy's rows cost ~0.9 s of CPU more at a
    million lines. Its constants are in the statement already (_text), its filters' values (text,
    integers, a boolean, a limit) are what the driver binds as they are. Elsewhere SQLAlchemy's
    streamed result (PostgreSQL: a server-side cursor)."""
    if conn.dialect.name != "sqlite":
        yield from conn.execute(lines, execution_options={"yield_per": batch}).partitions()
        return
    compiled = lines.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    cursor = conn.connection.dbapi_connection.cursor()
    try:
        cursor.execute(compiled.string, [compiled.params[name] for name in compiled.positiontup or ()])
        while True:
            rows = cursor.fetchmany(batch)
            if not rows:
                return
            yield rows
    finally:
        cursor.close()
