"""kept_counts: how many latest attempts each sweep has per state and error class, kept by the
database itself as runs change (issue 36: `status` over a million runs).

`status` counted the latest runs' index on every call: ~0.2 s of CPU at a million runs, the
largest part of its time. Triggers on `runs` now keep the counts in the same transaction as every
write of a run's sweep, state, error class or `latest` flag — the collector's, a launch's, a
rerun's, `status`'s own reconciliation, a copy, an ORM write, any future one — so that no writer
can forget them, and `status` reads a few dozen rows (queries.latest_counts).

SQLite only: one writer holds the file at a time, so a counter row is never contended. On a
server, row triggers that update shared counter rows in the order runs are written would let two
collectors deadlock (each holding a count the other needs), so on PostgreSQL the table stays empty
and `status` counts the index, which the server does beside the client. A run without an error
class is counted under '' (a key column is never NULL); queries.latest_counts gives it back as NULL.
A later migration that remakes `runs` on SQLite (Alembic's batch mode copies the table) drops its
triggers with it: such a revision calls create() again (test_db compares the triggers too).
"""
from __future__ import annotations

from typing import Any

from orchestrator.store.queries import KEPT_COUNTS, is_latest

_KEY = "sweep_id = {0}.sweep_id AND state = {0}.state AND error_class = coalesce({0}.error_class, '')"
_ADD = ("INSERT INTO kept_counts (sweep_id, state, error_class, n) "
        f"SELECT NEW.sweep_id, NEW.state, coalesce(NEW.error_class, ''), 1 WHERE {is_latest('NEW')} "
        "ON CONFLICT (sweep_id, state, error_class) DO UPDATE SET n = n + 1;")
_TAKE = f"UPDATE kept_counts SET n = n - 1 WHERE {is_latest('OLD')} AND {_KEY.format('OLD')};"
#: What a trigger fires on: the columns a count is of, and the flag (read from queries.is_latest too)
_COUNTED = ("sweep_id", "state", "error_class", "latest")
_CHANGED = " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in _COUNTED)

#: The triggers, in the order they are made.
TRIGGERS = (
    f"CREATE TRIGGER kept_counts_insert AFTER INSERT ON runs WHEN {is_latest('NEW')} BEGIN {_ADD} END",
    f"CREATE TRIGGER kept_counts_delete AFTER DELETE ON runs WHEN {is_latest('OLD')} BEGIN {_TAKE} END",
    f"CREATE TRIGGER kept_counts_update AFTER UPDATE OF {', '.join(_COUNTED)} ON runs "
    f"WHEN ({is_latest('OLD')} OR {is_latest('NEW')}) AND ({_CHANGED}) BEGIN {_TAKE} {_ADD} END",
)

#: The counts of the runs already there (the migration's, and a rebuild's).
COUNT = ("INSERT INTO kept_counts (sweep_id, state, error_class, n) SELECT sweep_id, state, "
         f"coalesce(error_class, ''), count(*) FROM runs WHERE {is_latest('runs')} GROUP BY sweep_id, state, coalesce(error_class, '')")


def create(execute: Any, dialect_name: str, count: bool = False) -> None:
    """The triggers that keep the table (schema.KeptCount) through `execute(sql)` (a connection's
    exec_driver_sql, or Alembic's op.execute), where the dialect keeps it; `count`: the table
    filled from the runs there first."""
    if dialect_name not in KEPT_COUNTS:
        return
    for sql in ((COUNT,) if count else ()) + TRIGGERS:
        execute(sql)


def drop(execute: Any, dialect_name: str) -> None:
    """The triggers (a downgrade)."""
    if dialect_name not in KEPT_COUNTS:
        return
    for name in ("kept_counts_insert", "kept_counts_delete", "kept_counts_update"):
        execute(f"DROP TRIGGER IF EXISTS {name}")
