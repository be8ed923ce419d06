"""The read layer's SQL text: what `status` asks of the database, each question written once.

`status` answers in half a second over 100,000 runs only without SQLAlchemy's import (sql_adapters.py
says why; measured on the 2-core VM: `import sqlalchemy` 0.22-0.37 s, schema.py's ORM 0.45-0.8 s),
so what it asks is SQL text with `:name` parameters, run through orchestrator.store.sql_adapters:
Python's sqlite3 on an up-to-date SQLite file, a SQLAlchemy session (`Rows.of(session)`)
anywhere else. This is the one place the read layer is not SQLAlchemy Core (cell_stats.py and
run_history.py are): Core cannot be built without the import. What the report asks too — the
sweeps, their recorded configs, what counts as one job — it asks through these same functions
(`Rows.of(session)`), so each is answered once; and schema.latest_runs() builds its select over
the latest attempts from `LATEST` below, so the rule for which attempt counts is written here and
nowhere else (test_queries checks both).

This module imports only the standard library, orchestrator.runstate and orchestrator.store.sql_adapters.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Iterator, Optional, Sequence

from orchestrator import runstate
from orchestrator.store.sql_adapters import Rows, in_list

#: The latest attempt of each repeat of each cell: the runs whose `latest` flag schema.mark_latest
#: set (migration 0009), read from one index (ix_runs_current). An attempt is numbered per (cell,
#: repeat) across sweeps, so the highest is the current word on that measurement. Its parameters
#: are LATEST_PARAMS; schema.latest_runs() is the same condition for the ORM.
LATEST = "runs.latest = :latest"
LATEST_PARAMS = {"latest": True}
#: How each database keeps the counts `status` reads (orchestrator.store.kept_counts says why two
#: ways): the dialects whose `kept_counts` rows are the counts (row triggers), and those whose
#: `kept_count_deltas` rows sum to them (statement triggers, migration 0021). Elsewhere the runs are counted.
KEPT_COUNTS = ("sqlite",)
KEPT_DELTAS = ("postgresql",)
#: The runs `status` brings up to date: in an open state, not yet claimed by a collector. The states
#: are literals (runstate's names, never input), so that the planner can prove a query with this
#: condition is within the partial index ix_runs_open (schema.py, migration 0018), which holds only
#: these runs: a million runs' table was scanned for its 10,000 open ones (0.17 s).
OPEN_RUNS = "collected_at IS NULL AND state IN (" + ", ".join(f"'{s}'" for s in runstate.OPEN) + ")"

#: A failed run as `status` shows it: the run and its cell's names.
_FAILURE = ("SELECT runs.id, runs.sweep_id, runs.uid, runs.state, runs.error_class, runs.error_message, "
            "runs.log_path, cells.framework, cells.model, cells.dataset FROM runs JOIN cells ON cells.id = runs.cell_id")
_FAILURE_ORDER = "ORDER BY runs.sweep_id, runs.error_class, cells.framework, cells.model, cells.dataset, runs.uid"


def is_latest(row: str) -> str:
    """LATEST as literal SQL on the row named `row` (a trigger's NEW or OLD; SQLite's 1 for true)."""
    return f"{row}.latest = 1"


def latest_where(sweep_ids: Optional[Sequence[str]], *where: str) -> tuple[str, dict[str, Any]]:
    """The WHERE clause over `runs` that picks the latest attempts of the sweeps (None: all) and
    `where`, and its parameters."""
    clauses, params = [LATEST, *where], dict(LATEST_PARAMS)
    if sweep_ids is not None:
        ids, more = in_list("sweep", list(sweep_ids))
        clauses.append(f"runs.sweep_id IN {ids}")
        params.update(more)
    return " AND ".join(clauses), params


def sweeps(rows: Rows, sweep_ids: Optional[Sequence[str]] = None) -> list[Any]:
    """The sweeps (`sweep_ids`; None: every one), newest first: id, created_at, n_cells, the
    command typed (`argv`: json_value it) and who typed it where (submit_user, submit_host), never
    their override lists, which may be large."""
    where, params = "", {}
    if sweep_ids is not None:
        if not sweep_ids:
            return []
        ids, params = in_list("sweep", list(sweep_ids))
        where = f"WHERE id IN {ids} "
    return rows.all("SELECT id, created_at, n_cells, argv, submit_user, submit_host FROM sweeps "
                    f"{where}ORDER BY created_at DESC, id", params)


def has_runs(rows: Rows) -> bool:
    return bool(rows.all("SELECT id FROM runs LIMIT 1"))


def latest_counts(rows: Rows, sweep_ids: Optional[Sequence[str]]) -> list[Any]:
    """How many latest attempts the sweeps (None: all) have, per sweep, state and error class
    (`n`): the few rows of kept_counts, or the sum of kept_count_deltas, where the database keeps
    them (kept_counts.py), else one pass over the index of migration 0009 (ix_runs_current)."""
    named, params = in_list("sweep", list(sweep_ids)) if sweep_ids is not None else ("", {})
    of_sweeps = f" AND sweep_id IN {named}" if named else ""
    if rows.dialect in KEPT_COUNTS:
        return rows.all("SELECT sweep_id, state, nullif(error_class, '') AS error_class, n FROM kept_counts "
                        f"WHERE n > 0{of_sweeps}", params)
    if rows.dialect in KEPT_DELTAS:
        return rows.all("SELECT sweep_id, state, nullif(error_class, '') AS error_class, sum(n) AS n "
                        f"FROM kept_count_deltas WHERE true{of_sweeps} GROUP BY sweep_id, state, error_class "
                        "HAVING sum(n) > 0", params)
    where, params = latest_where(sweep_ids)
    return rows.all(f"SELECT sweep_id, state, error_class, count(*) AS n FROM runs WHERE {where} "
                    "GROUP BY sweep_id, state, error_class", params)


def latest_groups(rows: Rows, sweep_ids: Optional[Sequence[str]], states: Sequence[str]) -> list[Any]:
    """The latest attempts in `states` counted (`n`) per sweep, state, error class and state detail:
    one pass over ix_runs_current in its own order (no sort)."""
    names, params = in_list("state", list(states))
    where, more = latest_where(sweep_ids, f"state IN {names}")
    group = "sweep_id, state, error_class, state_detail"
    return rows.all(f"SELECT {group}, count(*) AS n FROM runs WHERE {where} GROUP BY {group}", {**params, **more})


def first_runs(rows: Rows, groups: Iterable[tuple[str, str, Optional[str]]], first: int) -> list[Any]:
    """The ids of the `first` latest attempts (lowest ids) of each (sweep, state, error class) of
    `groups`: each group's few entries of ix_runs_current, not a ranking of every run in those
    states (0.15 s over a million runs' 60,000 failed and open ones); a statement per 300 groups."""
    groups, out = sorted(set(groups), key=str), []
    for start in range(0, len(groups), 300):
        parts, params = [], {**LATEST_PARAMS, "first": first}
        for i, (sweep, state, klass) in enumerate(groups[start:start + 300]):
            params.update({f"s{i}": sweep, f"t{i}": state, f"c{i}": klass})
            kind = f"error_class = :c{i}" if klass is not None else "error_class IS NULL"
            parts.append(f"SELECT * FROM (SELECT id, sweep_id, state, error_class FROM runs WHERE {LATEST} AND "
                         f"sweep_id = :s{i} AND state = :t{i} AND {kind} ORDER BY id LIMIT :first) AS g{i}")
        out += rows.all(" UNION ALL ".join(parts), params)
    return out


def sweep_sizes(rows: Rows, sweep_ids: Sequence[str],
                linked_of: Optional[Sequence[str]] = None) -> tuple[dict[str, int], dict[str, int]]:
    """Per sweep: the cells it names (sweep_cells; only of the sweeps `linked_of`, if given: a
    million runs' sweeps name a million cells, which the launcher counted already, `n_cells`) and
    its earlier attempts (runs no longer the latest of their repeat: retried), those from the few
    index entries of ix_runs_current whose flag is off, not by counting every run (0.3 s)."""
    ids, params = in_list("sweep", list(sweep_ids))
    # ("" names no sweep: in_list takes no empty list)
    named, more = in_list("named", list(sweep_ids if linked_of is None else linked_of) or [""])
    linked = {r.sweep_id: r.n for r in rows.rows(
        f"SELECT sweep_id, count(*) AS n FROM sweep_cells WHERE sweep_id IN {named} GROUP BY sweep_id", more)}
    earlier = {r.sweep_id: r.n for r in rows.rows(
        f"SELECT sweep_id, count(*) AS n FROM runs WHERE runs.latest = :earlier AND sweep_id IN {ids} "
        "GROUP BY sweep_id", {**params, "earlier": False})}
    return linked, earlier


def latest_failures(rows: Rows, sweep_ids: Optional[Sequence[str]], states: Sequence[str],
                    classes: Optional[Sequence[str]] = None, user: Optional[str] = None,
                    unknown_user: bool = False) -> Iterator[Any]:
    """The latest attempts in `states` (of `classes` of error, if given; submitted by `user`, if
    given; `unknown_user`: of no recorded submitter, rows from before submitters were recorded)
    with their cells' names, streamed in the order `status --failed` lists them."""
    names, params = in_list("state", list(states))
    where = [f"runs.state IN {names}"]
    if classes:
        kinds, more = in_list("class", list(classes))
        where.append(f"runs.error_class IN {kinds}")
        params.update(more)
    if user is not None:
        where.append("runs.submit_user = :submit_user")
        params["submit_user"] = user
    if unknown_user:
        where.append("runs.submit_user IS NULL")
    latest, more = latest_where(sweep_ids, *where)
    return rows.rows(f"{_FAILURE} WHERE {latest} {_FAILURE_ORDER}", {**params, **more})


def failures_by_id(rows: Rows, run_ids: Sequence[int]) -> dict[int, Any]:
    """The runs of `run_ids` as latest_failures gives them, by id."""
    if not run_ids:
        return {}
    ids, params = in_list("run", list(run_ids))
    return {r.id: r for r in rows.rows(f"{_FAILURE} WHERE runs.id IN {ids} {_FAILURE_ORDER}", params)}


def open_runs(rows: Rows, columns: Sequence[str], sweep_id: Optional[str] = None) -> Iterator[Any]:
    """The open runs (OPEN_RUNS) of one sweep or all: their `columns`, streamed
    (tracking.reconcile brings them up to date), found in the partial index ix_runs_open."""
    params: dict[str, Any] = {}
    query = f"SELECT {', '.join(columns)} FROM runs WHERE {OPEN_RUNS}"
    if sweep_id:
        query += " AND sweep_id = :sweep_id"
        params["sweep_id"] = sweep_id
    return rows.rows(query, params)


def update_runs(rows: Rows, columns: Sequence[str], values: Sequence[dict[str, Any]]) -> int:
    """Sets `columns` of runs, one run per set of values (its id as `b_id`), in one executemany;
    only runs still uncollected and in the state read (`b_state`): the values were decided
    outside the transaction, and a collector may have landed the run meanwhile. How many it changed."""
    return rows.many(f"UPDATE runs SET {', '.join(f'{c} = :{c}' for c in columns)} WHERE id = :b_id "
              "AND state = :b_state AND collected_at IS NULL", values)


def recorded_configs(rows: Rows, pairs: str, params: dict[str, Any]) -> dict[tuple[str, str], Any]:
    """(sweep id, cell id) -> the config the sweep recorded for the cell (sweep_cells.config, read
    with json_value: SQLite's sqlite3 gives its JSON text), for each pair that the SQL `pairs`
    (with `params`) selects as sweep_id, cell_id and that recorded one. The one reading of the
    recorded configs: tracking's of one run, status's of the running jobs, the report's."""
    return {(r.sweep_id, r.cell_id): json_value(r.config) for r in rows.rows(
        "SELECT sweep_cells.sweep_id, sweep_cells.cell_id, sweep_cells.config FROM "
        f"({pairs}) AS j JOIN sweep_cells ON sweep_cells.sweep_id = j.sweep_id AND sweep_cells.cell_id = j.cell_id "
        "WHERE sweep_cells.config IS NOT NULL", params)}


def recorded_config(rows: Rows, sweep_id: str, cell_id: str) -> Any:
    """The config a sweep recorded for a cell, or None."""
    return recorded_configs(rows, "SELECT sweep_id, cell_id FROM sweep_cells WHERE sweep_id = :sweep_id "
                            "AND cell_id = :cell_id", {"sweep_id": sweep_id, "cell_id": cell_id}).get((sweep_id, cell_id))


def named_configs(rows: Rows, sweep_ids: Sequence[str]) -> dict[tuple[str, str], Any]:
    """(sweep id, cell id) -> the config that sweep recorded for the cell (the time limit it asked
    for, in its hardware), for every sweep that recorded one of the cells these sweeps named (a
    cell's latest attempts may have run in an earlier or a later sweep)."""
    if not sweep_ids:
        return {}
    ids, params = in_list("sweep", list(sweep_ids))
    return recorded_configs(rows, "SELECT sweep_id, cell_id FROM sweep_cells WHERE cell_id IN "
                            f"(SELECT cell_id FROM sweep_cells WHERE sweep_id IN {ids})", params)


#: What counts as one job among latest attempts, as the columns of `runs` that group its runs: a job
#: runs its cell's repeats one after another under one time limit (job.run_cell), so they share its
#: sweep, cell and job id; a foreground run has no job id: its sweep and attempt tell its job.
JOB = "runs.sweep_id, runs.cell_id, runs.job_id, CASE WHEN runs.job_id IS NULL THEN runs.attempt END"


def latest_jobs(rows: Rows, where: str, params: dict[str, Any], having: str = "count(*) > 0") -> list[Any]:
    """One row per job (JOB) that ran latest attempts matching `where` (SQL over `runs`, with
    `params`), of the jobs `having` keeps, by cell and attempt: its sweep_id, cell_id, job_id,
    highest `attempt`, its `runs`, how many `ended`, its first run's start (`started_at`; None:
    not recorded yet), its last run's end (`ended_at`) and its cell's names. The one reading of
    a job: `status`'s running jobs and the report's job times."""
    return rows.all(
        "SELECT runs.sweep_id, runs.cell_id, runs.job_id, max(runs.attempt) AS attempt, count(*) AS runs, "
        "count(runs.ended_at) AS ended, min(runs.started_at) AS started_at, max(runs.ended_at) AS ended_at, "
        "cells.framework, cells.model, cells.dataset FROM runs JOIN cells ON cells.id = runs.cell_id "
        f"WHERE {LATEST} AND {where} GROUP BY {JOB}, cells.framework, cells.model, cells.dataset "
        f"HAVING {having} ORDER BY runs.cell_id, max(runs.attempt)", {**LATEST_PARAMS, **params})


def running_jobs(rows: Rows, sweep_ids: Optional[Sequence[str]], running: str) -> list[Any]:
    """The jobs (latest_jobs) running a latest attempt (state `running`) now."""
    where, params = latest_where(sweep_ids, "runs.state = :running")
    return latest_jobs(rows, f"(runs.sweep_id, runs.cell_id) IN (SELECT runs.sweep_id, runs.cell_id FROM runs "
                       f"WHERE {where})", {**params, "running": running},
                       having="max(CASE WHEN runs.state = :running THEN 1 ELSE 0 END) = 1")


def named_jobs(rows: Rows, sweep_ids: Sequence[str]) -> list[Any]:
    """The jobs (latest_jobs) that ran latest attempts, that started, of the cells the sweeps named."""
    if not sweep_ids:
        return []
    ids, params = in_list("sweep", list(sweep_ids))
    return latest_jobs(rows, f"runs.cell_id IN (SELECT cell_id FROM sweep_cells WHERE sweep_id IN {ids}) "
                       "AND runs.started_at IS NOT NULL", params)


def running_configs(rows: Rows, sweep_ids: Optional[Sequence[str]], running: str) -> dict[tuple[str, str], Any]:
    """(sweep id, cell id) -> the config the sweep recorded for each cell a latest attempt of which
    runs now: the time limit its job asked for."""
    where, params = latest_where(sweep_ids, "runs.state = :running")
    return recorded_configs(rows, f"SELECT DISTINCT runs.sweep_id, runs.cell_id FROM runs WHERE {where}",
                            {**params, "running": running})


def json_value(value: Any) -> Any:
    """A JSON column's value read as SQL text: SQLite's sqlite3 gives its text, PostgreSQL's
    driver the value; None where it is no JSON."""
    if isinstance(value, (str, bytes)):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value
