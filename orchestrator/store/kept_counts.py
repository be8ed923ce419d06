"""kept_counts: how many latest attempts each sweep has per state and error class, kept by the
database itself as runs change (issue 36: `status` over a million runs).

`status` counted the latest runs' index on every call: ~0.2 s of CPU at a million runs, the
largest part of its time. Triggers on `runs` now keep the counts in the same transaction as every
write of a run's sweep, state, error class or `latest` flag — the collector's, a launch's, a
rerun's, `status`'s own reconciliation, a copy, an ORM write, any future one — so that no writer
can forget them, and `status` reads a few dozen rows (queries.latest_counts).

On SQLite, row triggers add to and take from one counter row per (sweep, state, class) in
`kept_counts`: one writer holds the file at a time, so a counter row is never contended. On a
server, row triggers updating shared counter rows in the order runs are written would let two
collectors deadlock (each holding a count the other needs, from an earlier statement of its
transaction, which no per-statement key order prevents) and would make every collector wait for
the one before it to commit. So on PostgreSQL (migration 0021) writers only INSERT: a
statement-level trigger per INSERT, UPDATE and DELETE of `runs` adds one row per key the
statement moved, with its delta, to `kept_count_deltas` (from the statement's transition tables:
an UPDATE that moves nothing counted adds nothing), and readers sum them. No writer ever waits
for another's count. To keep the sum short, a trigger that finds more than COMPACT_AFTER rows
replaces them by their sums — only if it gets the advisory lock COMPACT_LOCK at once
(pg_try_advisory_xact_lock, held to its commit), so that one compacts at a time and nobody
waits: the others add their rows and go on; its DELETE takes only committed rows and its own,
and readers see the rows before or after, never between (MVCC). A run without an error class is
counted under '' (a key column is never NULL); queries.latest_counts gives it back as NULL.
A later migration that remakes `runs` on SQLite (Alembic's batch mode copies the table) drops its
triggers with it: such a revision calls create() again (test_db compares the triggers too).
"""
from __future__ import annotations

from typing import Any

from orchestrator.store.queries import KEPT_COUNTS, KEPT_DELTAS, is_latest

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


#: How many delta rows a PostgreSQL trigger lets stand before it sums them (a few statements'
#: worth: `status` sums them in well under a millisecond), and the advisory lock of whoever does.
COMPACT_AFTER = 256
COMPACT_LOCK = 0x6B636E74  # "kcnt" in ASCII

#: One row per key of the latest runs in the transition table `t`, with `sign` a row.
_DELTA_OF = "SELECT sweep_id, state, coalesce(error_class, '') AS error_class, {sign} AS n FROM {t} WHERE latest"
_PUT = ("INSERT INTO kept_count_deltas (sweep_id, state, error_class, n) SELECT sweep_id, state, error_class, "
        "sum(n) FROM ({}) AS d GROUP BY sweep_id, state, error_class HAVING sum(n) <> 0;")
#: The deltas summed, in one statement (a reader sees the rows before it or after it).
COMPACT = ("WITH gone AS (DELETE FROM kept_count_deltas RETURNING sweep_id, state, error_class, n) "
           + _PUT.format("SELECT * FROM gone").rstrip(";"))
FUNCTION = f"""CREATE FUNCTION kept_counts_deltas() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    {_PUT.format(_DELTA_OF.format(sign=1, t='new_rows'))}
  ELSIF TG_OP = 'DELETE' THEN
    {_PUT.format(_DELTA_OF.format(sign=-1, t='old_rows'))}
  ELSE
    {_PUT.format(_DELTA_OF.format(sign=1, t='new_rows') + ' UNION ALL ' + _DELTA_OF.format(sign=-1, t='old_rows'))}
  END IF;
  IF (SELECT count(*) FROM kept_count_deltas) > {COMPACT_AFTER} AND pg_try_advisory_xact_lock({COMPACT_LOCK}) THEN
    {COMPACT};
  END IF;
  RETURN NULL;
END $$"""
#: The statement-level triggers, in the order they are made (a transition table takes one event).
SERVER_TRIGGERS = tuple(
    f"CREATE TRIGGER kept_counts_{op.lower()} AFTER {op} ON runs REFERENCING {tables} "
    "FOR EACH STATEMENT EXECUTE FUNCTION kept_counts_deltas()"
    for op, tables in (("INSERT", "NEW TABLE AS new_rows"), ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
                       ("DELETE", "OLD TABLE AS old_rows")))
#: The deltas of the runs already there: one row per key (the migration's).
COUNT_DELTAS = ("INSERT INTO kept_count_deltas (sweep_id, state, error_class, n) SELECT sweep_id, state, "
                "coalesce(error_class, ''), count(*) FROM runs WHERE latest GROUP BY sweep_id, state, coalesce(error_class, '')")


def create_deltas(execute: Any, dialect_name: str, count: bool = False) -> None:
    """The function and triggers that keep `kept_count_deltas` (schema.KeptCountDelta) where the
    dialect keeps counts so (PostgreSQL); `count`: the runs there counted into it first."""
    if dialect_name not in KEPT_DELTAS:
        return
    for sql in ((COUNT_DELTAS,) if count else ()) + (FUNCTION,) + SERVER_TRIGGERS:
        execute(sql)


def drop_deltas(execute: Any, dialect_name: str) -> None:
    """The function and its triggers (a downgrade)."""
    if dialect_name not in KEPT_DELTAS:
        return
    for name in ("kept_counts_insert", "kept_counts_update", "kept_counts_delete"):
        execute(f"DROP TRIGGER IF EXISTS {name} ON runs")
    execute("DROP FUNCTION IF EXISTS kept_counts_deltas()")
