"""`orchestrator db copy SRC DST`: every sweep, cell, run, metric and refusal of one results
database into another — a personal SQLite file into a group's PostgreSQL server, or back.

Rows are matched by what names them in every store, never by a store's own numbering: a sweep
and a cell by their ids (hashes and sweep names), a sweep's cell by the pair, a run by its uid
(`<sweep>:<cell>:<repeat>:<attempt>`), a refusal by its sweep, override line and reason; a run's
metrics follow their run (whose integer id each store gives its own). So a copy is idempotent:
a second adds nothing. A run both stores hold is left as the destination has it, unless only the
source has collected it (its result landed there, not here): then the source's row and metrics
replace it, the newer word on that measurement. The `latest` flag of every (cell, repeat) that
gained a run is set again by the one rule (schema.mark_latest), its cell's kept summary
(kept_summary) computed again from its runs there, and each moved run's kept metrics
(kept_metrics) pivoted again from its metrics there, its kept CSV texts (kept_lines) with them.

Both ends must be at this orchestrator's schema revision: the source is opened as every command
opens it (an older one is upgraded in place, a newer one refused), the destination is made when
missing and refused at another revision, with the way out, because a copy into a store that
others share should never change its schema as a side effect.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from sqlalchemy import Table, create_engine, inspect, select, tuple_
from sqlalchemy.engine import Connection
from sqlalchemy.exc import ArgumentError, DBAPIError

from orchestrator.store import db, result_rows, schema
from orchestrator.store.sql_adapters import SCHEMA_VERSION

#: Rows read and written per statement.
CHUNK = 2000
#: The tables in the order their references need, each with the columns that name a row.
KEYED = (
    (schema.Sweep.__table__, ("id",)),
    (schema.Cell.__table__, ("id",)),
    (schema.SweepCell.__table__, ("sweep_id", "cell_id")),
    (schema.Refusal.__table__, ("sweep_id", "overrides", "reason")),
)


class CopyRefused(RuntimeError):
    """The destination cannot take the copy as it is; the message says why and what to do."""


@dataclass
class Copied:
    """What a copy added (and what the destination held already), per table."""

    added: dict[str, int] = field(default_factory=dict)
    present: dict[str, int] = field(default_factory=dict)
    replaced_runs: int = 0

    def __str__(self) -> str:
        names = ("sweeps", "cells", "sweep_cells", "runs", "metrics", "refusals")
        added = ", ".join(f"{self.added.get(n, 0)} {n}" for n in names)
        present = ", ".join(f"{self.present.get(n, 0)} {n}" for n in names if n != "metrics")
        return (f"copied {added}; already there: {present}"
                + (f"; {self.replaced_runs} runs replaced by the source's collected ones" if self.replaced_runs else ""))


def check_destination(url: str) -> None:
    """Refuses a destination at another schema revision (a missing or empty one is made)."""
    try:
        path = db.sqlite_path(url)
        if path is not None and not path.exists():
            return
        engine = create_engine(url)
        try:
            with engine.connect() as conn:
                if not inspect(conn).get_table_names():
                    return
                version = db.schema_version(conn)
        finally:
            engine.dispose()
    except (ArgumentError, ImportError, DBAPIError) as exc:  # said as open_db says it
        raise db.Unusable.of(url, exc) from exc
    if version != SCHEMA_VERSION:
        newer = version is not None and version > SCHEMA_VERSION
        raise CopyRefused(
            f"the destination is at schema revision {version or '(none recorded)'}, this orchestrator's is "
            f"{SCHEMA_VERSION}; nothing was copied: "
            + ("copy with the newer orchestrator that wrote it" if newer else
               "bring it up to date first (any command of this orchestrator on it does: "
               "orchestrator status --db DST), or copy into a new database"))


def copy(src_url: str, dst_url: str) -> Copied:
    """Copies every row of `src_url` that `dst_url` lacks (module docstring); returns the counts."""
    check_destination(dst_url)
    src_engine = db.open_db(src_url, create=False).kw["bind"]
    dst_engine = db.open_db(dst_url).kw["bind"]
    report = Copied()
    try:
        with src_engine.connect() as src, dst_engine.begin() as dst:
            for table, key in KEYED[:3]:
                _copy_keyed(src, dst, table, key, report)
            _copy_runs(src, dst, report)
            _copy_keyed(src, dst, *KEYED[3], report)
    finally:
        src_engine.dispose()
        dst_engine.dispose()
    return report


def _chunks(conn: Connection, table: Table, columns: Sequence[Any]) -> Iterator[list[Any]]:
    rows = conn.execute(select(*columns).select_from(table)).yield_per(CHUNK).partitions(CHUNK)
    yield from (list(part) for part in rows)


def _present(dst: Connection, table: Table, key: Sequence[str], values: list[tuple[Any, ...]]) -> set[tuple[Any, ...]]:
    columns = [table.c[k] for k in key]
    where = columns[0].in_([v[0] for v in values]) if len(key) == 1 else tuple_(*columns).in_(values)
    return {tuple(r) for r in dst.execute(select(*columns).where(where))}


def _copy_keyed(src: Connection, dst: Connection, table: Table, key: Sequence[str], report: Copied) -> None:
    """The rows of `table` whose key the destination lacks (the destination numbers its own ids)."""
    columns = [c for c in table.c if c.name in key or c.name != "id"]  # a refusal's id is the store's own
    for part in _chunks(src, table, columns):
        keys = [tuple(getattr(r, k) for k in key) for r in part]
        there = _present(dst, table, key, keys)
        new = [dict(r._mapping) for r, k in zip(part, keys) if k not in there]
        if new:
            dst.execute(table.insert(), new)
        report.added[table.name] = report.added.get(table.name, 0) + len(new)
        report.present[table.name] = report.present.get(table.name, 0) + len(part) - len(new)


def _copy_runs(src: Connection, dst: Connection, report: Copied) -> None:
    """Runs by uid, with their metrics under the destination's run ids."""
    runs, metrics = schema.Run.__table__, schema.Metric.__table__
    columns = [c for c in runs.c if c.name != "id"]
    touched: set[tuple[str, int]] = set()
    for part in _chunks(src, runs, [runs.c.id, *columns]):
        there = {r.uid: r for r in dst.execute(select(runs.c.uid, runs.c.id, runs.c.collected_at)
                                               .where(runs.c.uid.in_([r.uid for r in part])))}
        new = [r for r in part if r.uid not in there]
        newer = [r for r in part if r.uid in there and there[r.uid].collected_at is None and r.collected_at is not None]
        if new:
            dst.execute(runs.insert(), [{c.name: getattr(r, c.name) for c in columns} for r in new])
        for r in newer:
            dst.execute(runs.update().where(runs.c.uid == r.uid)
                        .values({c.name: getattr(r, c.name) for c in columns if c.name != "uid"}))
            dst.execute(metrics.delete().where(metrics.c.run_id == there[r.uid].id))
        moved = new + newer
        if moved:
            ids = dict(dst.execute(select(runs.c.uid, runs.c.id).where(runs.c.uid.in_([r.uid for r in moved]))).all())
            by_src = {r.id: ids[r.uid] for r in moved}
            rows = [{**dict(m._mapping), "run_id": by_src[m.run_id]}
                    for m in src.execute(select(metrics).where(metrics.c.run_id.in_(list(by_src))))]
            if rows:
                dst.execute(metrics.insert(), rows)
            result_rows.keep_metrics(dst, by_src.values())  # each moved run's pivot (and CSV texts) follows its rows
            report.added["metrics"] = report.added.get("metrics", 0) + len(rows)
            touched.update((r.cell_id, r.repeat) for r in moved)
        report.added["runs"] = report.added.get("runs", 0) + len(new)
        report.present["runs"] = report.present.get("runs", 0) + len(part) - len(new)
        report.replaced_runs += len(newer)
    schema.mark_latest(dst, touched)
    result_rows.refresh_summary(dst, {cell for cell, _ in touched})  # the kept summary follows its runs
