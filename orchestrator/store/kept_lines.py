"""kept_lines: what `results --csv` writes of a run that never changes, kept in the CSV's order (issue 36).

A million-run CSV spent most of SQLite's time in two places: the sort (cells walked in
ix_cells_fmd's order, every (framework, model, dataset) sorted) and the random reads of the 394 MB
`cells` table, its settings reformatted for every run. Yet most of a line never changes once the
run is written: its name (uid, sweep, cell, repeat, attempt) and its cell's settings (a cell's row
is never updated). Those fields are kept here, one row per run:

- as the values the `results` view shows (KEPT: defaults filled in), indexed in the CSV's order
  (ORDER, ix_kept_lines_order, which on SQLite holds the texts and the run's id too): SQLite walks the
  index, no sort, and a filter on a setting reads them here; PostgreSQL orders by the same
  columns, NULLs and text collated as it ordered the view (its cursor walks the index);
- as csv.writer writes them (`text_0`, `text_1`: the runs of consecutive kept fields, SEGMENTS),
  written by csv itself, so a float setting (`target_accuracy`, `min_seconds`) is repr's text as before.

Its `mode` and metric fields change only where its metrics land: they are kept as csv's text too
(`text_2`: `mode`, then kept_metrics.csv_text), written again then (keep_landed). The CSV's line
is these texts and the few fields that can change otherwise (state, params, node, error class and
message, ...), which SQL quotes as it reads them (csv_lines): no kept text can go stale.

Written where runs land, by `keep_landed` (result_rows.keep_metrics: the collector's, the
unrecorded runs it inserts among them, and a copy's, db_copy); built for the runs there by
an upgrade's remake (`rebuild`, result_rows.FILLS). A launch's and a rerun's runs get none (launch_records.insert_runs: it
cost a 10,000-cell launch ~0.4 s of CPU): they are due (KeptLinesDue, `launched`) until they land,
and `results --csv` reads them from runs and cells meanwhile. A run's row goes with it (ON DELETE
CASCADE).
"""
from __future__ import annotations

import csv
import io
import operator
from typing import Any, Iterable, Sequence

from sqlalchemy import Column, ForeignKey, Index, String, Table, bindparam, case, delete, exists, func, literal, select

from orchestrator import setting_registry
from orchestrator.store import bulk, csv_lines
from orchestrator.store.schema import RESULTS_COLUMNS, RESULTS_HEAD, Base, Cell, KeptMetrics, Run, setting_value

#: The `results` columns whose value never changes once a run is written: its name, and its cell's
#: settings (`mode` excepted: where the cell has none, what the run measured decides it).
KEPT = ("run", "sweep", "cell", "repeat", "attempt", *(n for n in setting_registry.NAMES if n != "mode"))
#: The `results` columns that change only where the run's metrics land (result_rows.keep_metrics,
#: which keeps them again): `mode` (the cell's, else whether the run measured top-1) and the metrics.
LANDED = ("mode", *csv_lines.METRIC_COLUMNS)
#: The order `results` lists runs in (and the CSV's): every one of its columns is KEPT.
ORDER = setting_registry.RESULTS_ORDER
#: PostgreSQL's most columns in one index (INDEX_MAX_KEYS, a compile-time constant: 32 in every
#: build we know); ORDER must fit (a test checks: a setting beyond it needs the order as one key).
PG_INDEX_COLUMNS = 32


def _segments() -> tuple[tuple[str, ...], ...]:
    """KEPT's and LANDED's columns in runs of neighbours in the `results` view, each kept as one
    text (the metrics last in theirs: their text is kept_metrics.csv_text, appended)."""
    runs: list[list[str]] = []
    for i, name in enumerate(RESULTS_COLUMNS):
        if name in (*KEPT, *LANDED):
            if not runs or RESULTS_COLUMNS[i - 1] not in (*KEPT, *LANDED):
                runs.append([])
            runs[-1].append(name)
    return tuple(tuple(r) for r in runs)


#: The runs of neighbouring kept columns, in the view's order: segment i is kept as `text_<i>`.
SEGMENTS = _segments()
TEXTS = tuple(f"text_{i}" for i in range(len(SEGMENTS)))

KeptLines = Table(
    "kept_lines", Base.metadata,
    Column("run_id", ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True, autoincrement=False),
    *(Column(name, RESULTS_HEAD[name].type) for name in KEPT),
    Column("cell_mode", String),  # the cell's own `mode` (None: what the run measured decides)
    *(Column(name, String, nullable=False) for name in TEXTS),
    # covering, on SQLite: the CSV's walk reads its texts (and the run's id, which only SQLite's
    # indexes carry by themselves) from the index, not from the table's rows at random, which the
    # run's id orders otherwise (1.2 s of a million runs' 7 s of SQLite). PostgreSQL takes at most
    # PG_INDEX_COLUMNS columns in an index, included ones too: there it holds the order alone, and
    # its walk reads each row from the table
    Index("ix_kept_lines_order", *ORDER, "cell_mode", *TEXTS, "run_id").ddl_if(dialect="sqlite"),
    Index("ix_kept_lines_order_pg", *ORDER).ddl_if(dialect="postgresql"),
)


#: The runs without their kept_lines row: a launch's and a rerun's (launch_records.insert_runs), until
#: they land (keep_landed takes them out). `results --csv` reads these from runs and cells
#: (cell_stats.results_lines) and every other from kept_lines: a million landed runs are not a
#: million look-ups for the few without a row. Every run without a row is here; a run here with one
#: (a remake of kept_lines keeps every run) is read from kept_lines alone.
KeptLinesDue = Table(
    "kept_lines_due", Base.metadata,
    Column("run_id", ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True, autoincrement=False),
)


def shown_mode(top1: Any, cell_mode: Any) -> Any:
    """The view's `mode`: throughput or accuracy, the cell's setting where it records one, else
    what the run measured (top-1). Literals, not bound values (csv_lines._text says why)."""
    named = {mode: literal(mode, String, literal_execute=True) for mode in ("accuracy", "throughput")}
    return func.coalesce(cell_mode, case((top1.isnot(None), named["accuracy"]), else_=named["throughput"]))


def _shown(name: str) -> Any:
    """A KEPT column's value as the `results` view shows it, from runs and cells."""
    attr = RESULTS_HEAD[name]
    return setting_value(attr) if attr.class_ is Cell else attr


def kept(run_id: Any) -> Any:
    """Whether the run of `run_id` has its kept_lines row (`results --csv` reads the others from
    runs and cells: cell_stats.results_lines)."""
    return exists().where(KeptLines.c.run_id == run_id)


def due_runs() -> Any:
    """The ids of the runs that may lack their kept_lines row (KeptLinesDue): every one that does."""
    return select(KeptLinesDue.c.run_id)


def launched(conn: Any) -> Any:
    """Before a launch's or a rerun's runs are inserted (launch_records.insert_runs), which get no
    kept_lines row. On SQLite the kept rows above the runs' largest id go first (kept_lines' and
    kept_metrics': those a delete without its cascade left, foreign keys off, whose ids SQLite
    gives the next runs), so that no new run reads as kept with another run's texts or metrics;
    PostgreSQL always cascades, and never gives an id twice. Returns what marks the new runs due
    (call it after their insert): the runs above that id without a kept row (PostgreSQL: another
    launch's runs between are among them, due too) into KeptLinesDue."""
    top = conn.execute(select(func.coalesce(func.max(Run.id), 0))).scalar_one()
    if conn.dialect.name == "sqlite":
        for table in (KeptLines, KeptMetrics.__table__):
            conn.execute(delete(table).where(table.c.run_id > top))
    return lambda: conn.execute(bulk.dialect_insert(conn, KeptLinesDue).from_select(
        ["run_id"], select(Run.id).where(Run.id > top, ~kept(Run.id))).on_conflict_do_nothing())


def keep_landed(conn: Any, run_ids: Iterable[int]) -> None:
    """The kept_lines rows of the runs of `run_ids`, whose metrics the caller's transaction wrote
    (result_rows.keep_metrics), written (again): their `mode` and metric fields follow the kept
    metrics, and none is due after (KeptLinesDue). Three statements per 500 runs. A row there
    already is replaced: a run's own (its metrics landed again), or one a run deleted without its
    cascade left (SQLite with foreign keys off), whose id SQLite gives a new run again once the
    run that had it is gone."""
    run_ids = sorted(set(run_ids))
    picked = _selected(Run.id.in_(bindparam("keys", expanding=True)))  # built once, compiled once (Core's cache)
    for start in range(0, len(run_ids), 500):  # SQLite before 3.32 binds 999 variables at most
        part = run_ids[start:start + 500]
        _write(conn, conn.execute(picked, {"keys": part}).all())
        conn.execute(delete(KeptLinesDue).where(KeptLinesDue.c.run_id.in_(part)))


def rebuild(conn: Any, step: int = 20_000) -> None:
    """Every run's kept_lines row (an upgrade's remake), `step` run ids at a time (never all in memory):
    none is due after it (result_rows.MADE_FROM remakes KeptLinesDue after it)."""
    conn.execute(delete(KeptLines))
    low, high = conn.execute(select(func.min(Run.id), func.max(Run.id))).one()
    for start in range(low or 0, (high or -1) + 1, step):
        _insert(conn, Run.id >= start, Run.id < start + step)


def rebuild_due(conn: Any) -> None:
    """KeptLinesDue made (migration 0025): the runs without their kept_lines row (none, after 0023)."""
    conn.execute(delete(KeptLinesDue))
    conn.execute(KeptLinesDue.insert().from_select(["run_id"], select(Run.id).where(~kept(Run.id))))


def _upsert(conn: Any) -> Any:
    """kept_lines' INSERT that replaces the row of a run there already (ON CONFLICT ... DO UPDATE,
    as result_rows._insert_new's DO NOTHING)."""
    statement = bulk.dialect_insert(conn, KeptLines)
    return statement.on_conflict_do_update(index_elements=[KeptLines.c.run_id],
                                           set_={c.name: statement.excluded[c.name] for c in KeptLines.c if c.name != "run_id"})


#: A kept_lines row's columns, in the order _insert writes them.
COLUMNS = ("run_id", *KEPT, "cell_mode", *TEXTS)


def _insert(conn: Any, *where: Any) -> None:
    """The runs `where` picks into kept_lines (_write)."""
    _write(conn, conn.execute(_selected(*where)).all())


def _selected(*where: Any) -> Any:
    """The runs `where` picks: their ids, KEPT values (as the view shows them), their cells' own
    `mode`, the view's `mode` and their kept metrics' text (_SELECTED)."""
    metrics = KeptMetrics.__table__.c
    return (select(Run.id, *(_shown(n) for n in KEPT), Cell.mode, shown_mode(metrics.top1, Cell.mode), metrics.csv_text)
            .join_from(Run, Cell, Cell.id == Run.cell_id).outerjoin(KeptMetrics, metrics.run_id == Run.id).where(*where))


def _write(conn: Any, rows: Sequence[Any]) -> None:
    """Runs' selected values (_SELECTED's) and their texts (texts_of()) into kept_lines: each row
    a tuple (no dict a run: a launch keeps 10,000), 500 a statement on SQLite (bulk.write_many)."""
    if rows:
        width = len(KEPT) + 2  # run_id, KEPT, cell_mode: the row's first values
        kept = [(*row[:width], *texts) for row, texts in zip(rows, texts_of(rows, _SELECTED))]
        bulk.write_many(conn, _upsert(conn), kept, COLUMNS)


#: Per kept text: its name, the fields csv writes in it, and whether the kept metrics' text follows.
_WRITTEN = tuple((name, tuple(n for n in segment if n not in csv_lines.METRIC_COLUMNS), csv_lines.METRIC_COLUMNS[0] in segment)
                 for name, segment in zip(TEXTS, SEGMENTS))
#: The values _insert selects of each run, in order.
_SELECTED = ("run_id", *KEPT, "cell_mode", "mode", "metric_text")


def texts_of(runs: Sequence[Any], keys: Sequence[str] = ()) -> list[tuple[str, ...]]:
    """Each run's kept texts (TEXTS' order) from its values (KEPT's and `mode`, and `metric_text`,
    its kept metrics' text or None): by name, or (`keys`) tuples of these keys' values. Each
    segment as csv.writer writes it in a line of the CSV (csv_lines.DIALECT), without the line's
    end. One writer for them all (a launch keeps 10,000)."""
    at = keys.index if keys else (lambda name: name)
    fields = [operator.itemgetter(*map(at, written), at("mode")) for _, written, _ in _WRITTEN]
    metric_at = at("metric_text")
    # each segment's fields and a last empty one (a lone empty field would be written `""`); the
    # getter's last value (`mode`) is only there to make it a tuple even of one field
    lines = _written([[*get(values)[:-1], ""] for values in runs for get in fields])
    out, n = [], len(_WRITTEN)
    for i, values in enumerate(runs):
        texts = lines[i * n:i * n + n]
        for j, (_, _, metric) in enumerate(_WRITTEN):
            if metric:
                texts[j] += "," + (values[metric_at] or csv_lines.NO_METRICS)
        out.append(tuple(texts))
    return out


def _written(rows: list[list[Any]]) -> list[str]:
    """Each row as csv.writer writes it, without the line's end and the last (empty) field's
    comma: one writerows and one split, or, where a field holds a line's end (a line more than
    rows), one writerow a row, cut where the buffer stood after it."""
    buffer, end = io.StringIO(), csv_lines.DIALECT["lineterminator"]
    writer = csv.writer(buffer, **csv_lines.DIALECT)
    writer.writerows(rows)
    lines = buffer.getvalue().split(end)
    if len(lines) == len(rows) + 1:
        return [line[:-1] for line in lines[:-1]]
    buffer.seek(0)
    buffer.truncate()
    stops = []
    for row in rows:
        writer.writerow(row)
        stops.append(buffer.tell())
    whole = buffer.getvalue()
    return [whole[start:stop - len(end) - 1] for start, stop in zip([0, *stops], stops)]


def texts(values: dict[str, Any]) -> dict[str, str]:
    """One run's kept texts (texts_of), by name."""
    return dict(zip(TEXTS, texts_of([values])[0]))
