"""What the launch reads and writes in the database: every statement of submit, adopt, rerun and
retry, as named functions over plain rows (store).

The launch modules decide (which runs a sweep adds, which submission is adopted, which repeat
is rerun); this module only says how each question and each write is put to the database, so
that the statements live in one place of the store and the launch modules hold no SQL. Bulk
writes are a few statements of many rows each on SQLite (bulk.ROWS_PER_STATEMENT), one executemany
elsewhere, in the caller's transaction: the caller commits.
"""
from __future__ import annotations

import contextlib
import sqlite3
from typing import Any, Iterable, Iterator, Sequence

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.orm import Session, aliased

from orchestrator import runstate
from orchestrator.store import bulk, kept_lines, result_rows, schema
from orchestrator.store.sql_adapters import Rows

#: Ids per `IN (...)` of the queries that look up a sweep's cells (SQLite allows 32,766 variables).
CHUNK = 900
#: What a retype decides by, of each run the database has of a sweep's cells (submit_plan.plan_runs).
KNOWN_RUN_COLUMNS = ("uid", "cell_id", "repeat", "attempt", "state", "state_detail", "job_id")
#: The columns of a new run (submit_plan.NewRun): what insert_runs writes of each.
NEW_RUN_COLUMNS = ("uid", "sweep_id", "cell_id", "repeat", "attempt", "state", "state_detail", "executor",
                   "run_dir", "submitted_at", "latest", "submit_user", "submit_host", "error_class",
                   "error_message")


def known(session: Session, cell_ids: Iterable[str]) -> tuple[set[str], dict[str, list[Any]]]:
    """What the database already has of these cells: their ids, and every run of each (the
    columns KNOWN_RUN_COLUMNS, as rows: not ORM objects, which a retype of 1,000 cells paid for)
    — a few queries for the whole sweep, not two per cell."""
    ids = sorted(set(cell_ids))
    cells: set[str] = set()
    runs: dict[str, list[Any]] = {}
    table = schema.Run.__table__
    for i in range(0, len(ids), CHUNK):
        chunk = ids[i:i + CHUNK]
        cells.update(session.scalars(select(schema.Cell.id).where(schema.Cell.id.in_(chunk))))
        query = select(*(table.c[k] for k in KNOWN_RUN_COLUMNS)).where(table.c.cell_id.in_(chunk))
        for run in session.execute(query):
            runs.setdefault(run.cell_id, []).append(run)
    return cells, runs


#: The key of the PostgreSQL advisory lock a launch holds while it records its sweep, cells and
#: runs (any constant: "lnch" in ASCII; db.py's upgrade holds another).
LAUNCH_LOCK = 0x6C6E6368


def one_launch_at_a_time(session: Session) -> None:
    """On PostgreSQL, waits for any other launch recording its cells and runs, and holds them off
    until this transaction ends, as SQLite's write lock does a launch's first flush: else two
    launches of the same new cells both find them unknown and the second's insert of them fails
    (cells_pkey). Elsewhere nothing: the write lock the caller's flush takes does it."""
    if session.connection().dialect.name == "postgresql":
        session.connection().exec_driver_sql(f"SELECT pg_advisory_xact_lock({LAUNCH_LOCK})")


def insert_many(session: Session, table: Table, rows: Sequence[Any], columns: Sequence[str] = ()) -> None:
    """Rows into `table`: mappings with the same keys, or (`columns`) tuples of these columns' values
    (no dict a row: a launch writes 10,000 runs), ROWS_PER_STATEMENT a statement on SQLite
    (bulk.write_many), one executemany elsewhere."""
    bulk.write_many(session.connection(), insert(table), rows, columns)


def update_runs(session: Session, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
    """Sets `columns` of recorded runs: each row a run's uid, then those columns' values. On
    SQLite one UPDATE ... FROM (VALUES ...) per bulk.ROWS_PER_STATEMENT runs (bulk.in_statements), else
    Core's executemany by uid."""
    if not rows:
        return
    table, connection = schema.Run.__table__, session.connection()
    dialect = connection.dialect
    if dialect.name != "sqlite" or dialect.paramstyle != "qmark" or sqlite3.sqlite_version_info < UPDATE_FROM:
        session.execute(update(table).where(table.c.uid == bindparam("b_uid")),
                        [{"b_uid": row[0], **dict(zip(columns, row[1:]))} for row in rows])
        return
    quote, width = dialect.identifier_preparer.quote, len(columns) + 1
    sets = ", ".join(f"{quote(column)} = v.column{i}" for i, column in enumerate(columns, 2))
    group = "(" + ", ".join("?" * width) + ")"
    runs = quote(table.name)
    sql = lambda n: (f"UPDATE {runs} SET {sets} FROM (VALUES {', '.join([group] * n)}) AS v "
                     f"WHERE {runs}.uid = v.column1")
    bulk.in_statements(connection, sql, bulk.bound(dialect, rows, range(width), [None, *(table.c[c].type for c in columns)]),
                   width)


#: UPDATE ... FROM: SQLite 3.33 (2020); an older library gets one UPDATE per run.
UPDATE_FROM = (3, 33, 0)


#: The page cache of a launch's writes on SQLite, in KiB (negative: PRAGMA cache_size's KiB form).
#: SQLite's default (2 MiB) is far less than a 10,000-cell launch changes (its cells, runs and their
#: kept lines, with their indexes): dirty pages went to the WAL before the commit, and were changed
#: there again (10,000 cells: ~0.1 s of the launch); 64 MiB holds them, and bounds the memory.
LAUNCH_CACHE_KIB = 65536


@contextlib.contextmanager
def cached(session: Session) -> Iterator[None]:
    """The launch's writes (insert_cells, insert_runs) with a page cache of LAUNCH_CACHE_KIB on
    SQLite, the connection's own cache size set back after (before the commit: the pages are
    written then either way); other databases as they are."""
    connection = session.connection()
    if connection.dialect.name != "sqlite":
        yield
        return
    driver = connection.connection.dbapi_connection
    before = driver.execute("PRAGMA cache_size").fetchone()[0]
    driver.execute(f"PRAGMA cache_size = {-max(LAUNCH_CACHE_KIB, abs(before) if before < 0 else 0)}")
    try:
        yield
    finally:
        driver.execute(f"PRAGMA cache_size = {int(before)}")


def insert_cells(session: Session, new: list[dict[str, Any]], members: list[dict[str, Any]]) -> None:
    """A sweep's new cells (rows of `cells`) and its membership rows (`sweep_cells`): two bulk INSERTs."""
    insert_many(session, schema.Cell.__table__, new)
    insert_many(session, schema.SweepCell.__table__, members)


def insert_runs(session: Session, rows: Sequence[tuple[Any, ...]], relatest: Iterable[tuple[str, int]]) -> None:
    """New runs (each a tuple of its NEW_RUN_COLUMNS: submit_plan.NewRun.row), and `latest` set again on the
    (cell id, repeat) in `relatest` (schema.mark_latest): those whose earlier attempts stop
    being the current word. A repeat's only attempt is inserted latest already. An earlier
    attempt no longer the latest leaves its cell's kept summary in the same transaction
    (result_rows.refresh_summary): a launch with force=true and a rerun change what it counts.
    No kept CSV fields: a run gets its kept_lines row where it lands (kept_lines.keep_landed); till
    then it is due (kept_lines.launched), and `results --csv` reads it from runs and cells."""
    relatest = sorted(set(relatest))
    mark_due = kept_lines.launched(session.connection())
    insert_many(session, schema.Run.__table__, rows, NEW_RUN_COLUMNS)
    mark_due()
    schema.mark_latest(session.connection(), relatest)
    result_rows.refresh_summary(session.connection(), {cell for cell, _ in relatest}, kept_only=True)


def unsubmitted(session: Session) -> list[schema.Run]:
    """Runs left pending without a job id: recorded, and never (or not known to be) handed over."""
    return list(session.scalars(select(schema.Run).where(schema.Run.state == runstate.PENDING,
                                                         schema.Run.job_id.is_(None))))


def cancelled_with_detail(session: Session, prefix: str, suffix: str = "") -> list[schema.Run]:
    """Cancelled runs whose state_detail is `prefix` ... `suffix` (suffix "" with prefix: exactly prefix)."""
    detail = schema.Run.state_detail
    where = detail.like(prefix + "%" + suffix) if suffix else detail == prefix
    return list(session.scalars(select(schema.Run).where(schema.Run.state == runstate.CANCELLED, where)))


def first_attempts(rows: Rows, sweep_id: str) -> dict[tuple[str, int], int]:
    """(cell id, repeat) -> the first attempt `sweep_id` made of it: what its retries count from."""
    found = rows.all("SELECT cell_id, repeat, min(attempt) AS first FROM runs WHERE sweep_id = :sweep_id "
                     "GROUP BY cell_id, repeat", {"sweep_id": sweep_id})
    return {(r.cell_id, int(r.repeat)): int(r.first) for r in found}


def rerunnable_latest(session: Session) -> Iterator[schema.Run]:
    """Every (cell, repeat)'s latest attempt (schema.latest_runs) that is rerunnable, by cell and repeat."""
    latest = aliased(schema.Run, schema.latest_runs())
    query = (select(latest).where(latest.state.in_(runstate.RERUNNABLE))
             .order_by(latest.cell_id, latest.repeat))
    return iter(session.scalars(query).all())


def taken_uids(session: Session, uids: Sequence[str]) -> set[str]:
    """Those of these run uids the database has already."""
    taken: set[str] = set()
    for i in range(0, len(uids), CHUNK):
        taken.update(session.scalars(select(schema.Run.uid).where(schema.Run.uid.in_(uids[i:i + CHUNK]))))
    return taken

