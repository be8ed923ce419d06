"""Bulk writes of many rows in a few statements on SQLite (store): a launch's cells, runs and kept
CSV fields, and the UPDATE of its runs' job ids (launch_records), without Core's per-row
parameter building.

Core's compiled statement is handed to the driver with its VALUES group repeated,
ROWS_PER_STATEMENT rows a statement, each value through its column's bind processor (a JSON
column's json.dumps), as Core's execution does: the same rows (tests/test_submit_identity.py).
And the INSERT with ON CONFLICT of either database (dialect_insert), for the writers that need it
(result_rows' DO NOTHING, kept_lines' upsert).
"""
from __future__ import annotations

import itertools
import operator
import sqlite3
from typing import Any, Callable, Sequence

#: Rows a statement of a launch's bulk writes on SQLite (fewer where its build allows fewer
#: parameters). One statement per row, as an executemany runs, cost SQLite far more on `runs`:
#: a statement that fires a trigger (kept_counts) keeps a statement journal, a copy of each page
#: it changes, to undo itself alone — with one run a statement, the pages of every one of the
#: runs' nine b-trees were copied for each run. 10,000 runs' INSERT 0.31 s, 0.14 s at 500 a
#: statement; the UPDATE of their job ids 0.29 s, 0.12 s (docs/scale.md).
ROWS_PER_STATEMENT = 500


def write_many(connection: Any, statement: Any, rows: Sequence[Any], columns: Sequence[str] = ()) -> None:
    """`statement` (an INSERT, or an upsert: INSERT ... ON CONFLICT) run for each of `rows`:
    mappings with the same keys, or (`columns`) tuples of these columns' values. On SQLite (the
    driver's `?` parameters) its compiled text's VALUES group is repeated (in_statements); every
    other driver, or a statement that adds a value the rows lack (a column's Python default),
    goes through Core's executemany."""
    if not rows:
        return
    dialect, keys = connection.dialect, list(columns or rows[0])
    compiled = statement.compile(dialect=dialect, column_keys=keys)
    names = compiled.positiontup if dialect.paramstyle == "qmark" else None
    group = "(" + ", ".join("?" * len(names or ())) + ")"
    head, values, tail = compiled.string.partition(" VALUES " + group)
    if names is None or sorted(names) != sorted(keys) or not values or "?" in tail:
        connection.execute(statement, [dict(zip(columns, row)) for row in rows] if columns else list(rows))
        return
    types = [compiled.binds[name].type for name in names]
    at = [keys.index(name) for name in names] if columns else names
    in_statements(connection, lambda n: head + values + (", " + group) * (n - 1) + tail,
                   bound(dialect, rows, at, types), len(names))


def bound(dialect: Any, rows: Sequence[Any], names: Sequence[Any], types: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Each row's values in the order of `names` (its keys, or a tuple's indexes: one C call a
    row), those of a type with a bind processor (JSON, Boolean) put through it; a type None: as is."""
    processors = [(i, t.dialect_impl(dialect).bind_processor(dialect)) for i, t in enumerate(types) if t is not None]
    processors = [(i, process) for i, process in processors if process]
    get = operator.itemgetter(*names)
    values = [get(row) for row in rows] if len(names) > 1 else [(get(row),) for row in rows]
    if not processors:
        return values
    out = []
    for row in values:
        row = list(row)
        for i, process in processors:
            row[i] = process(row[i])
        out.append(tuple(row))
    return out


def in_statements(connection: Any, sql: Callable[[int], str], values: list[tuple[Any, ...]], width: int) -> None:
    """`values` (tuples of `width`) written by the statements `sql(n)` of n rows each: up to
    ROWS_PER_STATEMENT rows, and as many parameters as the library takes (SQLite's build limit,
    999 before 3.32: asked where Python can)."""
    driver = connection.connection.dbapi_connection
    limit = driver.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) if hasattr(driver, "getlimit") else 999
    step = max(1, min(ROWS_PER_STATEMENT, limit // width))
    for i in range(0, len(values), step):
        chunk = values[i:i + step]
        connection.exec_driver_sql(sql(len(chunk)), tuple(itertools.chain.from_iterable(chunk)))





def dialect_insert(connection: Any, table: Any) -> Any:
    """An INSERT into `table` in the open database's dialect, which has ON CONFLICT (DO NOTHING, DO
    UPDATE): the results database is SQLite (from 3.24) or PostgreSQL (db.open_db)."""
    if connection.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert  # lazy: the open database's dialect
    else:
        from sqlalchemy.dialects.sqlite import insert  # lazy: the open database's dialect
    return insert(table)
