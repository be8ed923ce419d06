"""The SQL text the commands ask of the database, each question written once.

`status` answers in half a second over 100,000 runs only without SQLAlchemy's import (sql_adapters.py
says why), so what it asks is SQL text with `:name` parameters, run through orchestrator.sql_adapters:
Python's sqlite3 on an up-to-date SQLite file, a SQLAlchemy session (`Rows.of(session)`)
anywhere else. The commands that import SQLAlchemy anyway ask the same questions through the
same functions, and db.py builds its ORM selects over the latest attempts from `LATEST` below,
so the rule for which attempt counts is written here and nowhere else (test_cli checks).

This module imports only the standard library and orchestrator.sql_adapters.
"""
from __future__ import annotations

import json
from typing import Any, Iterator, Optional, Sequence

from .sql_adapters import Rows, in_list

#: The latest attempt of each repeat of each cell: the runs whose `latest` flag schema.mark_latest
#: set (migration 0009), read from one index (ix_runs_current). An attempt is numbered per (cell,
#: repeat) across sweeps, so the highest is the current word on that measurement. Its parameters
#: are LATEST_PARAMS; schema.latest_runs() is the same condition for the ORM.
LATEST = "runs.latest = :latest"
LATEST_PARAMS = {"latest": True}

#: A failed run as `status` shows it: the run and its cell's names.
_FAILURE = ("SELECT runs.id, runs.sweep_id, runs.uid, runs.state, runs.error_class, runs.error_message, "
            "runs.log_path, cells.framework, cells.model, cells.dataset FROM runs JOIN cells ON cells.id = runs.cell_id")
_FAILURE_ORDER = "ORDER BY runs.sweep_id, runs.error_class, cells.framework, cells.model, cells.dataset, runs.uid"


def latest_where(sweep_ids: Optional[Sequence[str]], *where: str) -> tuple[str, dict[str, Any]]:
    """The WHERE clause over `runs` that picks the latest attempts of the sweeps (None: all) and
    `where`, and its parameters."""
    clauses, params = [LATEST, *where], dict(LATEST_PARAMS)
    if sweep_ids is not None:
        ids, more = in_list("sweep", list(sweep_ids))
        clauses.append(f"runs.sweep_id IN {ids}")
        params.update(more)
    return " AND ".join(clauses), params


def sweeps(rows: Rows) -> list[Any]:
    """Every sweep, newest first: id, created_at and n_cells (never its override lists, which may
    be large)."""
    return rows.all("SELECT id, created_at, n_cells FROM sweeps ORDER BY created_at DESC, id")


def has_runs(rows: Rows) -> bool:
    return bool(rows.all("SELECT id FROM runs LIMIT 1"))


def latest_counts(rows: Rows, sweep_ids: Optional[Sequence[str]]) -> list[Any]:
    """How many latest attempts the sweeps (None: all) have, per sweep, state and error class
    (`n`): one pass over the index of migration 0009 (ix_runs_current)."""
    where, params = latest_where(sweep_ids)
    return rows.all(f"SELECT sweep_id, state, error_class, count(*) AS n FROM runs WHERE {where} "
                    "GROUP BY sweep_id, state, error_class", params)


def latest_examples(rows: Rows, sweep_ids: Optional[Sequence[str]], states: Sequence[str],
                    first: int) -> list[Any]:
    """The latest attempts in `states`, in one pass that sorts only those: per sweep, state,
    error class and state detail, their count `n` and the ids of the `first` few (a row each,
    `rn` 1 to `first`)."""
    names, params = in_list("state", list(states))
    where, more = latest_where(sweep_ids, f"state IN {names}")
    group = "sweep_id, state, error_class, state_detail"
    return rows.all(f"SELECT * FROM (SELECT id, {group}, count(*) OVER (PARTITION BY {group}) AS n, "
                    f"row_number() OVER (PARTITION BY {group} ORDER BY id) AS rn FROM runs WHERE {where}) "
                    "AS ranked WHERE rn <= :first", {**params, **more, "first": first})


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


def open_runs(rows: Rows, states: Sequence[str], columns: Sequence[str],
              sweep_id: Optional[str] = None) -> Iterator[Any]:
    """The runs in `states` (the open ones) that no collector has claimed yet, of one sweep or
    all: their `columns`, streamed (tracking.reconcile brings them up to date)."""
    names, params = in_list("state", list(states))
    query = f"SELECT {', '.join(columns)} FROM runs WHERE collected_at IS NULL AND state IN {names}"
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


def recorded_config(rows: Rows, sweep_id: str, cell_id: str) -> Any:
    """The config a sweep recorded for a cell (sweep_cells.config; SQLite's sqlite3 gives its
    JSON text), or None."""
    found = rows.all("SELECT config FROM sweep_cells WHERE sweep_id = :sweep_id AND cell_id = :cell_id",
                     {"sweep_id": sweep_id, "cell_id": cell_id})
    return found[0].config if found else None



#: A run's wall time is valid: both ends recorded, the end not before the start.
VALID_WALL = "runs.started_at IS NOT NULL AND runs.ended_at IS NOT NULL AND runs.ended_at >= runs.started_at"
_NAMED = ("cells.framework = :framework AND cells.model = :model AND cells.dataset = :dataset "
          "AND cells.hardware = :hardware")


def limit_history(rows: Rows, framework: str, model: str, dataset: str, hardware: str, settings: Sequence[str],
                  done: str, most: int = 200) -> list[Any]:
    """The `most` latest successful runs (state `done`) with a valid wall time (VALID_WALL: a
    missing or reversed one counts toward nothing, not even `most`) of the cells with these
    names, newest first, with their wall time (`wall_s`), their mean measured step time
    (`step_s`, the metric step_time_mean; NULL where none) and the cells' `settings` columns:
    what a learned time limit comes from (time_limits.learn)."""
    columns = ", ".join('cells."%s"' % name for name in settings)  # quoted: a setting may be a keyword (like)
    return rows.all(
        f"SELECT runs.cell_id, runs.ended_at - runs.started_at AS wall_s, metrics.value AS step_s, {columns} "
        "FROM runs JOIN cells ON cells.id = runs.cell_id "
        "LEFT JOIN metrics ON metrics.run_id = runs.id AND metrics.name = :step "
        f"WHERE runs.state = :done AND {_NAMED} AND {VALID_WALL} "
        "ORDER BY runs.ended_at DESC LIMIT :most",
        {"done": done, "framework": framework, "model": model, "dataset": dataset, "hardware": hardware,
         "most": most, "step": "step_time_mean"})


def limit_left_out(rows: Rows, framework: str, model: str, dataset: str, hardware: str, done: str) -> dict[str, int]:
    """Cell id -> how many of its successful runs have no valid wall time (limit_history leaves
    them out): what each cell's learned limit says of its own."""
    found = rows.all(
        "SELECT runs.cell_id, count(*) AS n FROM runs JOIN cells ON cells.id = runs.cell_id "
        f"WHERE runs.state = :done AND {_NAMED} AND NOT ({VALID_WALL}) GROUP BY runs.cell_id",
        {"done": done, "framework": framework, "model": model, "dataset": dataset, "hardware": hardware})
    return {r.cell_id: int(r.n) for r in found}


def limit_timeouts(rows: Rows, framework: str, model: str, dataset: str, hardware: str, failed: str,
                   timeout: str, done: str) -> list[Any]:
    """The timed-out runs (state `failed`, class `timeout`) of the cells with these names that
    no success of their cell followed, newest first: each one's wall time (`wall_s`, NULL where
    unknown) and its sweep's recorded config of the cell (`config`, sweep_cells; NULL where none),
    which holds the limit it timed out at (time_limits.learn asks at least twice that)."""
    return rows.all(
        "SELECT runs.cell_id, runs.ended_at - runs.started_at AS wall_s, sweep_cells.config "
        "FROM runs JOIN cells ON cells.id = runs.cell_id LEFT JOIN sweep_cells ON "
        "sweep_cells.sweep_id = runs.sweep_id AND sweep_cells.cell_id = runs.cell_id "
        f"WHERE runs.state = :failed AND runs.error_class = :timeout AND {_NAMED} AND NOT EXISTS "
        "(SELECT 1 FROM runs AS d WHERE d.cell_id = runs.cell_id AND d.state = :done AND d.ended_at > runs.ended_at) "
        "ORDER BY runs.ended_at IS NULL, runs.ended_at DESC",
        {"failed": failed, "timeout": timeout, "done": done, "framework": framework, "model": model,
         "dataset": dataset, "hardware": hardware})


def running_jobs(rows: Rows, sweep_ids: Optional[Sequence[str]], running: str) -> list[Any]:
    """The jobs running a latest attempt (state `running`) now, one row each: its sweep, cell and
    job id, its cell's names, and its first run's start (`started_at`; None: not recorded yet) over
    the latest attempts the same job ran (a job runs its cell's repeats one after another under
    one time limit; a foreground run has no job id: its sweep and attempt tell its job)."""
    where, params = latest_where(sweep_ids, "runs.state = :running")
    return rows.all(
        "SELECT runs.sweep_id, runs.cell_id, runs.job_id, min(r.started_at) AS started_at, "
        "cells.framework, cells.model, cells.dataset FROM runs JOIN cells ON cells.id = runs.cell_id "
        "JOIN runs AS r ON r.sweep_id = runs.sweep_id AND r.cell_id = runs.cell_id AND r.latest = :latest "
        "AND (r.job_id = runs.job_id OR (r.job_id IS NULL AND runs.job_id IS NULL AND r.attempt = runs.attempt)) "
        f"WHERE {where} GROUP BY runs.sweep_id, runs.cell_id, runs.job_id, runs.attempt, "
        "cells.framework, cells.model, cells.dataset", {**params, "running": running})


def running_configs(rows: Rows, sweep_ids: Optional[Sequence[str]], running: str) -> dict[tuple[str, str], Any]:
    """(sweep id, cell id) -> the config the sweep recorded (json_value) for each cell a latest
    attempt of which runs now: the time limit its job asked for."""
    where, params = latest_where(sweep_ids, "runs.state = :running")
    return {(r.sweep_id, r.cell_id): json_value(r.config) for r in rows.all(
        "SELECT sweep_cells.sweep_id, sweep_cells.cell_id, sweep_cells.config FROM "
        f"(SELECT DISTINCT runs.sweep_id, runs.cell_id FROM runs WHERE {where}) AS j JOIN sweep_cells "
        "ON sweep_cells.sweep_id = j.sweep_id AND sweep_cells.cell_id = j.cell_id", {**params, "running": running})}


def json_value(value: Any) -> Any:
    """A JSON column's value read as SQL text: SQLite's sqlite3 gives its text, PostgreSQL's
    driver the value; None where it is no JSON."""
    if isinstance(value, (str, bytes)):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value
