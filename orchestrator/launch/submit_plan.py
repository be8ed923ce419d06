"""What a launch adds: the runs each cell still needs (skipping what is done or in flight), each
cell's learned time limit, the rows that record the cells, and the job spec each cell's job is handed.

Planning reads what the database has (launch_records.known) and writes nothing: submit.py
records the plan. A new run is a plain record (NewRun), not an ORM object: a sweep of 10,000
cells paid for the ORM's bookkeeping of each, and its rows go out as one executemany.
"""
from __future__ import annotations

import functools
import operator
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Hashable, Optional

from orchestrator import runstate, setting_registry
from orchestrator.sweep import time_limits
from orchestrator.backends.base import max_time_min, node_lock, request
from orchestrator.sweep.cell import Cell
from orchestrator.job.run import JobSpec, RunSpec
from orchestrator.store.launch_records import NEW_RUN_COLUMNS
from orchestrator.results.resultfile import run_uid
from orchestrator.envs.runtime import EnvironmentNotReady, make_runtime
from orchestrator.store.sql_adapters import Rows
from orchestrator.store.sqlite_lease import who
from orchestrator.launch.submit_adopt import is_unresolved, recorded_by
from orchestrator.launch.submit_options import Options


@dataclass
class NewRun:
    """One attempt at one repeat, as the launch records it (launch_records.NEW_RUN_COLUMNS)."""

    uid: str
    sweep_id: str
    cell_id: str
    repeat: int
    attempt: int
    executor: str
    run_dir: str
    submit_user: str
    submit_host: str
    state: str = runstate.PENDING
    state_detail: Optional[str] = None
    submitted_at: Optional[float] = None
    latest: bool = True
    job_id: Optional[str] = None
    error_class: Optional[str] = None
    error_message: Optional[str] = None

    def row(self) -> tuple[Any, ...]:
        """Its `runs` row, as launch_records.insert_runs writes it: its NEW_RUN_COLUMNS' values."""
        return _NEW_RUN_ROW(self)


_NEW_RUN_ROW = operator.attrgetter(*NEW_RUN_COLUMNS)


def new_run(sweep_id: str, cell_id: str, repeat: int, attempt: int, opts: Options,
            submitter: Optional[tuple[str, str]] = None) -> NewRun:
    """One attempt at one repeat, pending, with its run directory (`<repeat>[.<attempt>]`).
    `submitter`: (user, host), looked up once by a caller that makes thousands."""
    name = str(repeat) if attempt == 1 else f"{repeat}.{attempt}"
    user, host = submitter or who()
    return NewRun(uid=run_uid(sweep_id, cell_id, repeat, attempt), sweep_id=sweep_id, cell_id=cell_id,
                  repeat=repeat, attempt=attempt, executor=opts.backend.name, state_detail=recorded_by(),
                  run_dir=os.path.join(opts.runs, sweep_id, cell_id, name), submit_user=user, submit_host=host)


def plan_runs(sweep_id: str, cell: Cell, opts: Options, existing: list[Any],
              submitter: tuple[str, str]) -> tuple[list[NewRun], str]:
    """The runs this sweep adds for a cell (given the runs it has), or none and the reason it is skipped."""
    wanted, reasons = [], []
    for repeat in range(opts.repeats):
        mine = [r for r in existing if r.repeat == repeat]
        done = [r for r in mine if r.state == runstate.DONE]
        flying = [r for r in mine if r.state in runstate.IN_FLIGHT]
        unsure = [r for r in mine if r.state == runstate.PENDING and r.job_id is None and is_unresolved(r.state_detail)]
        if unsure:  # even force=true: a second submission could measure it twice
            reasons.append(f"repeat {repeat}: a submission ({unsure[0].state_detail}) is not settled yet: "
                           f"its launcher is still at it, or the scheduler did not answer; type the sweep "
                           f"again later (on that host, if its launcher was killed)")
        elif flying and not opts.force:
            reasons.append(f"repeat {repeat} in flight (run {flying[0].uid}, job {flying[0].job_id})")
        elif done and not opts.force:
            reasons.append(f"repeat {repeat} already done (run {done[0].uid})")
        else:
            wanted.append((repeat, 1 + max((r.attempt for r in mine), default=0)))
    runs = [new_run(sweep_id, cell.id, repeat, attempt, opts, submitter) for repeat, attempt in wanted]
    return runs, "; ".join(reasons)


def cell_rows(sweep_id: str, cells: list[Cell], known: set[str],
              planned: set[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of the sweep's new cells, and its membership rows. A member's resolved config
    (what `rerun` resubmits, and tracking's cluster) is kept where this sweep runs it
    (`planned`): a skipped cell has no run here to need it (a retype of 1,000 done cells wrote
    1,000 configs for nothing)."""
    now = time.time()
    new = [{"id": cell.id, "settings": kept, "created_at": now, **kept}
           for cell in cells if cell.id not in known for kept in [setting_registry.recorded(cell.settings)]]
    members = [{"sweep_id": sweep_id, "cell_id": cell.id, "config": cell.recorded if cell.id in planned else None}
               for cell in cells]
    return new, members


def job_spec(cell: Cell, sweep_id: str, runs: list[Any], opts: Options) -> JobSpec:
    """What a cell's job is handed (pickled): its settings, config, runs and where it runs."""
    hardware = cell.config["hardware"]
    data_dir = cell.config["dataset"].get("dir")
    return JobSpec(
        sweep_id=sweep_id,
        cell_id=cell.id,
        settings=cell.settings,
        config=cell.config,
        runs=[RunSpec(uid=r.uid, repeat=r.repeat, attempt=r.attempt, run_dir=r.run_dir) for r in runs],
        runtime=opts.runtime,
        data_dir=_absolute(data_dir) if data_dir else None,
        monitor_period_s=opts.monitor_period_s,
        executor=opts.backend.name,
        lock=node_lock(opts.backend, opts.cache),
        time_limit_s=60.0 * time_limits.configured(hardware, opts.cluster) if hardware.get("time_min") else None,
    )


@functools.lru_cache(maxsize=64)
def _absolute(folder: str) -> str:
    """A dataset folder as a job on another node opens it; worked out once per folder, not per cell."""
    return str(Path(folder).expanduser().absolute())


def learn_time_limits(cells: list[Cell], opts: Options, rows: Optional[Rows]) -> list[Cell]:
    """The cells with `time_min: auto` learned (time_limits.learn: new cells) from the command's open
    database (`rows`; None: none yet), the build counted where a job builds its environment."""
    built: dict[tuple[str, str], bool] = {}  # by environment: its recipe read and hashed once, not once per cell

    def builds(cell: Cell) -> bool:
        env = ((cell.config.get("framework") or {}).get("env") or cell.settings["framework"], cell.settings["build"])
        if env not in built:
            try:
                built[env] = make_runtime(opts.runtime["kind"], env[0], opts.cache, Path(opts.runtime["images"]),
                                          opts.runtime["binary"], build=env[1]).builds_in_job()
            except EnvironmentNotReady:  # no recipe: the job fails at once, building nothing
                built[env] = False
        return built[env]

    limits: dict[Hashable, Optional[int]] = {}  # by request: a partition's MaxTime found once per request, not per cell

    def max_time_of(config: dict[str, Any]) -> Optional[int]:
        asked = request(opts.backend, config)
        if asked is None or asked not in limits:
            limits[asked] = max_time_min(opts.backend, config)
        return limits[asked]

    return time_limits.learn(cells, rows, max_time_of, opts.cluster, builds)
