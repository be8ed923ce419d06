"""The collector's reads and writes of the results database, and the per-cell summary kept with them.

collector.py decides what each result file becomes (landed, already there, waiting, broken);
the statements that look up and write the rows are here, on the store's side, so that the
collector holds no SQL. Every function takes the caller's connection or session and runs in its
transaction: a batch of files lands, or none of it does.

The summary (`kept_summary`, schema.KeptSummary) is `cell_summary`'s row of each cell kept as a
table, so that `results --summary` over a million runs reads a page of it (under a second)
instead of ranking every run (15 s). It stays exact because every writer of what it depends on
(a run's state, its `latest` flag, its metrics) refreshes the cells it touched in the same
transaction (refresh_summary): the collector here, a launch's new attempts (launch_records.insert_runs)
and a copy (db_copy). A refresh recomputes the cell from its runs with the view's own select
(cell_stats.summary_select), so the kept figures are the view's, computed once per landing.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional, Sequence

from sqlalchemy import bindparam, delete, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.schema import CreateTable

from orchestrator.store import bulk, cell_stats, csv_lines, kept_lines, schema
from orchestrator.store.schema import Cell, KeptMetrics, KeptSummary, Metric, Run, Sweep, SweepCell

#: The tables whose rows any collector may add (`add`), by name.
TABLES = {"sweeps": Sweep, "cells": Cell, "sweep_cells": SweepCell}
#: What a claim reads of a run before it writes: the state it moves from, whether it is claimed,
#: and the fields a result file without them leaves as they were.
LOOKED_UP = (Run.uid, Run.id, Run.state, Run.collected_at, Run.node, Run.job_id, Run.executor, Run.log_path)
#: The claim: the run's fields go in only if no one collected it and its state is the one looked
#: up (the SET clause is the statement's parameters other than these two).
_CLAIM = update(Run.__table__).where(Run.__table__.c.uid == bindparam("claim_uid"),
                                     Run.__table__.c.collected_at.is_(None),
                                     Run.__table__.c.state == bindparam("claim_state"))


#: Settings whose `results` column a run can decide: `mode` is the cell's, else what the run
#: measured (a cell from before accuracy mode, None, whose runs measured top-1 is `accuracy` there),
#: while the kept row holds the cell's setting; a filter on it picks runs.
RUNS_DECIDE = ("mode",)


class Contended(Exception):
    """A claim changed fewer runs than it should: another process collected or moved one of them
    since this batch looked them up (impossible on SQLite, whose batches hold the write lock)."""


def parts(names: Sequence[Any], most: int = 500) -> list[Sequence[Any]]:
    """`names` in lists of `most`: SQLite before 3.32 binds 999 variables per statement at most."""
    return [names[i:i + most] for i in range(0, len(names), most)]


def landed_paths(session: Any, paths: Sequence[str]) -> set[str]:
    """Which of the result files at `paths` are landed: one look at the index of landed paths
    (ix_runs_landed), no row read."""
    return set(session.scalars(select(Run.result_path).where(Run.collected_at.is_not(None),
                                                             Run.result_path.in_(list(paths)))))


def collected_sweeps(session: Any, folders: list[str]) -> dict[str, tuple[int, int]]:
    """Of the sweeps named by `folders`, those the launcher recorded (the collector records none
    with cells) with every run collected, and how many runs and cells each has: from the sweep_id
    indexes alone (ix_runs_uncollected holds only the runs still to collect)."""
    sweeps, runs = Sweep.__table__.c, Run.__table__.c
    pending = select(runs.sweep_id).where(runs.sweep_id == sweeps.id, runs.collected_at.is_(None))
    found: dict[str, tuple[int, int]] = {}
    for part in parts(folders):  # one bound name per folder
        done = dict(session.execute(select(sweeps.id, sweeps.n_cells).where(
            sweeps.id.in_(part), sweeps.n_cells > 0, ~pending.exists())).all())
        if done:
            counts = session.execute(select(runs.sweep_id, func.count()).where(runs.sweep_id.in_(done))
                                     .group_by(runs.sweep_id))
            found.update((sweep, (n, done[sweep])) for sweep, n in counts if n)
    return found


def present(conn: Connection, table: str, ids: set[str], sweep: Optional[str] = None) -> set[str]:
    """Which of `ids` the table holds (sweeps, cells by id; sweep_cells by cell id, of `sweep`):
    one query on ids alone, no row loaded."""
    column = SweepCell.cell_id if table == "sweep_cells" else TABLES[table].id
    where = [SweepCell.sweep_id == sweep] if table == "sweep_cells" else []
    return set(conn.scalars(select(column).where(column.in_(ids), *where))) if ids else set()


def _insert_new(conn: Connection, table: Any) -> Any:
    """An INSERT into `table` that skips a row whose key is taken: by a committed row, or by
    another transaction's uncommitted one, which a server waits for first (and inserts ours if that
    one rolls back). Two collectors landing the same sweep, cell or run at once then both go on;
    a plain INSERT would fail the whole batch on the second, and its files, landed one by one,
    could meet a third collector's insert twice and be called broken (found by the four-collector
    test on PostgreSQL). The results database is SQLite or PostgreSQL (db.open_db), both of which
    have ON CONFLICT DO NOTHING."""
    return bulk.dialect_insert(conn, table).on_conflict_do_nothing()


def add(conn: Connection, table: str, rows: list[dict[str, Any]]) -> None:
    """`rows` into the table, in one statement; a row whose key another process has inserted
    (or is inserting) is left to that one (_insert_new): the sweep, cell or sweep-cell rows the
    collector adds are the same whoever adds them."""
    if rows:
        conn.execute(_insert_new(conn, TABLES[table]), rows)


def looked_up(conn: Connection, uids: Iterable[str]) -> dict[str, Any]:
    """The recorded runs of `uids` (LOOKED_UP's columns), by uid."""
    return {r.uid: r for r in conn.execute(select(*LOOKED_UP).where(Run.uid.in_(sorted(set(uids)))))}


def claim(conn: Connection, claims: list[dict[str, Any]]) -> list[int]:
    """Runs the claims (all of them, or none: raises Contended); where the database cannot count
    the rows one statement of many changed, one by one, and returns the indexes of those that
    changed no row."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for c in claims:  # one statement per set of columns (a run that keeps its verdict sets fewer)
        groups.setdefault(tuple(c), []).append(c)
    if conn.dialect.supports_sane_multi_rowcount:
        for group in groups.values():
            if conn.execute(_CLAIM, group).rowcount != len(group):
                raise Contended()
        return []
    return [i for i, c in enumerate(claims) if conn.execute(_CLAIM, c).rowcount != 1]


def insert_runs(conn: Connection, rows: list[dict[str, Any]]) -> dict[str, int]:
    """Runs the launcher never recorded, inserted collected, each made the latest attempt of its
    repeat (schema.mark_latest); the ids of those this transaction inserted, by uid. A run whose
    uid another collector has inserted meanwhile is skipped and absent from the answer
    (_insert_new): that collector landed it, so its file is not this one's to land. (Their kept CSV
    texts are written as they land: keep_metrics, which the collector runs for every run it
    lands.) SQLite before
    3.35 (Debian 11, Ubuntu 20.04, RHEL 8) has no RETURNING: there the ids are looked up after, which
    is as exact, since a SQLite collector holds the file's write lock from its look-up of these uids
    (BEGIN IMMEDIATE), so that no other process can have inserted one of them."""
    if not rows:
        return {}
    statement = _insert_new(conn, Run.__table__)
    if conn.dialect.insert_executemany_returning:
        ids = dict(conn.execute(statement.returning(Run.uid, Run.id), rows).all())
    else:
        conn.execute(statement, rows)
        ids = {uid: id_ for part in parts([r["uid"] for r in rows])
               for uid, id_ in conn.execute(select(Run.uid, Run.id).where(Run.uid.in_(part)))}
    schema.mark_latest(conn, [(r["cell_id"], r["repeat"]) for r in rows if r["uid"] in ids])
    return ids


def replace_metrics(conn: Connection, run_ids: list[int], metrics: list[dict[str, Any]]) -> None:
    """The metrics of the runs of `run_ids`: any an earlier landing left (its collected_at reset,
    to collect again) replaced by `metrics`."""
    if run_ids:
        conn.execute(delete(Metric).where(Metric.run_id.in_(run_ids)))
    if metrics:  # a plain INSERT: a run's metrics are written by the one collector that claimed it
        conn.execute(insert(Metric), metrics)
    keep_metrics(conn, run_ids)


def keep_metrics(conn: Connection, run_ids: Iterable[int]) -> None:
    """The kept_metrics rows of the runs of `run_ids` pivoted again from their metrics rows (the
    view's pivot, cell_stats.metric_pivot), in the caller's transaction, which wrote those rows.
    Every writer of metrics rows calls it (a run's rows are written whole, by the one process that
    claimed its result, so two writers never pivot one run at once). Their kept CSV texts follow
    (kept_lines.keep_landed: `mode` and the metric fields)."""
    run_ids = sorted(set(run_ids))
    for part in parts(run_ids):
        conn.execute(delete(KeptMetrics).where(KeptMetrics.run_id.in_(part)))
        _insert_metrics(conn, Metric.run_id.in_(part))
    kept_lines.keep_landed(conn, run_ids)


def rebuild_metrics(conn: Connection, step: int = 20_000) -> None:
    """Every run's kept_metrics row from the metrics rows (an upgrade's remake), `step` run ids at a
    time: each part's rows are formatted in Python (csv_text), never all of them at once.
    kept_lines' texts hold these, so FILLS remakes kept_lines after it."""
    conn.execute(delete(KeptMetrics))
    low, high = conn.execute(select(func.min(Metric.run_id), func.max(Metric.run_id))).one()
    for start in range(low or 0, (high or -1) + 1, step):
        _insert_metrics(conn, Metric.run_id >= start, Metric.run_id < start + step)


def _insert_metrics(conn: Connection, *where: Any) -> None:
    """The pivot of the metrics rows `where` picks, with its CSV text (csv_lines.metric_texts),
    into kept_metrics: the numbers the database computed, and their text from those same floats."""
    rows = conn.execute(cell_stats.metric_pivot().where(*where)).all()
    if rows:
        names = [c.name for c in KeptMetrics.__table__.c if c.name != "csv_text"]
        texts = csv_lines.metric_texts([row[1:] for row in rows])
        conn.execute(insert(KeptMetrics), [{**dict(zip(names, row)), "csv_text": text} for row, text in zip(rows, texts)])


# --- a run's columns from its result file ---------------------------------------------------

def node_addrs(result: dict[str, Any]) -> Optional[str]:
    """A run across nodes: its nodes' addresses (result.json `nodes[].addr`) in rank order,
    comma-separated; None on one node, or where a node's record has no address."""
    nodes = result.get("nodes")
    if not isinstance(nodes, list) or len(nodes) < 2:
        return None
    addrs = [n.get("addr") if isinstance(n, dict) else None for n in nodes]
    return ",".join(addrs) if all(isinstance(a, str) and a for a in addrs) else None


def provenance_columns(result: dict[str, Any]) -> dict[str, Any]:
    """The provenance columns (docs/protocol.md §3 `provenance`); a part of the wrong type is skipped."""
    prov = result.get("provenance") or {}
    cpu, gpu = prov.get("cpu") or {}, prov.get("gpu") or {}
    git, slurm = prov.get("git") or {}, prov.get("slurm") or {}
    devices = [d for d in gpu.get("devices") or [] if isinstance(d, dict)]

    def typed(value: Any, *types: type) -> Any:
        return value if isinstance(value, types) and not (isinstance(value, bool) and bool not in types) else None

    names = sorted({d.get("name") for d in devices if isinstance(d.get("name"), str)})
    return {
        "provenance": prov or None,
        "environment": typed(prov.get("environment"), str) or typed(result.get("environment"), str),
        "cpu_model": typed(cpu.get("model"), str),
        "cpu_cores": typed(cpu.get("cores"), int),
        "cpu_threads": typed(cpu.get("usable"), int),
        "gpu_name": ", ".join(names) or None,
        "gpu_uuids": ",".join(d["uuid"] for d in devices if isinstance(d.get("uuid"), str)) or None,
        "gpu_driver": typed(gpu.get("driver"), str),
        "cuda_driver": typed(gpu.get("cuda_driver"), str),
        "git_revision": typed(git.get("revision"), str),
        "git_dirty": typed(git.get("dirty"), bool),
        "slurm_job_id": typed(slurm.get("job_id"), str),
        "exclusive": typed(prov.get("exclusive"), bool),
        "energy_method": typed((result.get("energy") or {}).get("method"), str),
    }


# --- the kept summary ---------------------------------------------------------------------------

def refresh_summary(conn: Connection, cell_ids: Iterable[str], kept_only: bool = False) -> None:
    """The kept summary rows of `cell_ids` computed again from their runs, in the caller's
    transaction (which changed those runs). On a server, each cell's row is locked first (FOR NO
    KEY UPDATE: launches inserting runs of it are not held up), so that two collectors landing
    runs of one cell at once take turns and the second computes over the first's runs; a SQLite
    writer holds the file's write lock already. `kept_only`: only cells that have a row (new
    attempts, not yet done, can take a repeat from a cell's summary, never give one)."""
    ids = sorted(set(cell_ids))
    if kept_only:
        ids = sorted(c for part in parts(ids) for c in conn.scalars(select(KeptSummary.cell).where(KeptSummary.cell.in_(part))))
    for part in parts(ids):
        conn.execute(select(Cell.id).where(Cell.id.in_(part)).order_by(Cell.id).with_for_update(key_share=True))
        conn.execute(delete(KeptSummary).where(KeptSummary.cell.in_(part)))
        _insert_summary(conn, {"cell": list(part)})


def rebuild_summary(conn: Connection) -> None:
    """Every cell's kept summary row from the runs, in one pass (an upgrade's remake)."""
    conn.execute(delete(KeptSummary))
    _insert_summary(conn, {})


def _insert_summary(conn: Connection, filters: Mapping[str, Sequence[Any]]) -> None:
    rows = cell_stats.summary_select(filters).subquery("computed")
    conn.execute(insert(KeptSummary).from_select(schema.KEPT_COLUMNS, select(*(rows.c[c] for c in schema.KEPT_COLUMNS))))


def kept_summary(filters: Mapping[str, Sequence[Any]], noisy_cv: float) -> Optional[Any]:
    """cell_stats.summary_select(filters, noisy_cv) read from the kept summary: the same columns and
    rows (`noisy` from the kept CV and the reader's threshold). None where a filter is no cell
    setting (a run's column, a metric) or RUNS_DECIDE: those pick runs, and only the runs can answer."""
    table = KeptSummary.__table__.c
    if any(name not in schema.SUMMARY_CELL and name != "cell" or name in RUNS_DECIDE for name in filters):
        return None
    shown = {**{c: table[c] for c in schema.KEPT_COLUMNS}, "noisy": cell_stats.noisy_flag(table.images_per_sec_cv, noisy_cv)}
    return (select(*(shown[c].label(c) for c in schema.SUMMARY_COLUMNS))
            .where(*(table[key].in_(values) for key, values in filters.items())))


def summary_page(filters: Mapping[str, Sequence[Any]], noisy_cv: float, limit: Optional[int]) -> Optional[tuple[Any, Any]]:
    """The kept summary's first `limit` rows (None: every one) in the summary's order (its
    index's), and (cells, noisy cells) in all as a second select, each count from an index, not a
    scan of a million cells' rows; None as kept_summary."""
    rows = kept_summary(filters, noisy_cv)
    if rows is None:
        return None
    rows = rows.subquery("kept")
    page = select(rows).order_by(*(rows.c[c] for c in (*schema.SUMMARY_CELL, "cell"))).limit(limit)
    table = KeptSummary.__table__.c
    where = [table[key].in_(values) for key, values in filters.items()]
    noisy = select(func.count()).where(table.images_per_sec_cv > noisy_cv, *where).scalar_subquery()
    return page, select(select(func.count()).where(*where).select_from(KeptSummary).scalar_subquery(), noisy)


# --- the kept tables an upgrade remakes ---------------------------------------------------------

#: The kept tables whose rows this code computes from others, and how it fills each: a schema
#: revision that changes what one holds (a setting on `cells`, a metric, a formula) names it in its
#: `rebuilds`, and the upgrade remakes it once its last revision has run (migrations.upgrade says why).
FILLS = {"kept_summary": rebuild_summary, "kept_metrics": rebuild_metrics, "kept_lines": kept_lines.rebuild,
         "kept_lines_due": kept_lines.rebuild_due}
#: The kept tables made from another kept table's rows: remaking the key remakes each of its
#: values after it (kept_lines' last text is kept_metrics.csv_text; kept_lines_due, the runs without a
#: kept_lines row; FILLS' order puts each later).
MADE_FROM = {"kept_metrics": ("kept_lines", "kept_lines_due"), "kept_lines": ("kept_lines_due",)}


def remake(conn: Connection, names: Iterable[str]) -> None:
    """Each kept table of `names` dropped, made again as schema.py declares it now (its columns and
    indexes) and filled by FILLS, in the caller's transaction: what this code reads exists by then."""
    names = set(names)
    if names - set(FILLS):
        raise ValueError(f"no kept table {sorted(names - set(FILLS))}: the kept tables are {sorted(FILLS)}")
    names.update(*(MADE_FROM.get(name, ()) for name in list(names)))
    for name in [n for n in FILLS if n in names]:  # in FILLS' order, whatever order they were named in
        table = schema.Base.metadata.tables[name]
        table.drop(conn, checkfirst=True)
        conn.execute(CreateTable(table))
        FILLS[name](conn)
        for index in table.indexes:  # after the rows: one sort each, not a million inserts into them
            index.create(conn)
