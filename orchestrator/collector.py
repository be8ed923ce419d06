"""Lands the jobs' `result.json` files in the database, each exactly once.

Jobs never touch the database (compute nodes may not reach it, and a thousand jobs writing one
SQLite file would fight over its lock); they leave a result file in their run directory, and
this collector, run on the login node by `python -m orchestrator collect` or by the launcher
after a sweep, turns each file into rows. It may run many times, and two may run at once:

- each file lands in its own transaction, so a bad file or a crash loses nothing else;
- a run is *claimed* with `UPDATE runs SET collected_at=? WHERE uid=? AND collected_at IS NULL`
  and its metrics are written only by the collector whose UPDATE changed the row, so a run
  that two collectors read at the same time is still counted once;
- should two collectors both create the same sweep, cell or run row, the unique keys refuse the
  second insert; that collector rolls back and retries the file once, then finds it claimed.

A malformed file is reported with its path and the reason, and left where it is.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from . import runstate
from .db import Cell, Metric, Run, Sweep, SweepCell
from .metric_registry import unit_of
from .resultfile import CELL_COLUMNS, RESULT_NAME, BadResult, read_result


@dataclass
class CollectReport:
    """What one collection did: runs landed, runs found already landed, files refused."""

    added: int = 0
    already: int = 0
    broken: list[tuple[Path, str]] = field(default_factory=list)
    #: failed results of runs whose job is still in flight (requeued): landed once it ends
    waiting: int = 0

    def __str__(self) -> str:
        waiting = f", {self.waiting} waiting for their job to end" if self.waiting else ""
        return f"{self.added} added, {self.already} already in the DB, {len(self.broken)} broken{waiting}"


class _AlreadyCollected(Exception):
    """Another collector (or an earlier run of this one) claimed the run first."""


class _InFlight(Exception):
    """The run's job is still in flight: its failed result file may be an earlier incarnation's."""


def find_results(runs_root: Path) -> list[Path]:
    """Every `result.json` under `runs_root`; a job's `result.json.tmp` (not yet renamed) is not one."""
    return sorted(p for p in runs_root.rglob(RESULT_NAME) if p.is_file())


def collect(session_factory: sessionmaker, runs_root: Path) -> CollectReport:
    """Ingests every result file under `runs_root` that the database does not hold yet."""
    runs_root = Path(runs_root)
    if not runs_root.is_dir():
        raise FileNotFoundError(f"no runs directory {runs_root}")
    report = CollectReport()
    with session_factory() as session:
        landed = set(session.scalars(select(Run.result_path).where(
            Run.collected_at.is_not(None), Run.result_path.is_not(None))))
    for path in find_results(runs_root):
        # Cheap skip for files collected from this very place; a moved runs/ tree still ends up
        # in `already` through the claim below.
        if str(path.resolve()) in landed:
            report.already += 1
            continue
        try:  # one file's problem, whatever it is, is that file's broken reason, never the end
            result = read_result(path)
            added = _land(session_factory, path, result)
        except BadResult as exc:
            report.broken.append((path, str(exc)))
            continue
        except IntegrityError as exc:
            report.broken.append((path, f"the database refused it twice: {exc.orig}"))
            continue
        except _InFlight:
            report.waiting += 1
            continue
        except Exception as exc:  # noqa: BLE001 - reported with the file, collection goes on
            report.broken.append((path, f"{type(exc).__name__}: {exc}"))
            continue
        if added:
            report.added += 1
        else:
            report.already += 1
    return report


def _land(session_factory: sessionmaker, path: Path, result: dict[str, Any]) -> bool:
    """One file, one transaction; True if this call landed it, False if it was already in."""
    try:
        return _land_once(session_factory, path, result)
    except IntegrityError:
        # A concurrent collector inserted the same sweep, cell or run between our look and our
        # insert; the retry finds its rows (and, most likely, the run already claimed).
        return _land_once(session_factory, path, result)


def _land_once(session_factory: sessionmaker, path: Path, result: dict[str, Any]) -> bool:
    try:
        with session_factory() as session, session.begin():
            _ingest(session, path, result)
    except _AlreadyCollected:
        return False
    return True


def _ingest(session: Session, path: Path, result: dict[str, Any]) -> None:
    """Writes one result's rows within the caller's transaction; raises _AlreadyCollected."""
    now = time.time()
    sweep_id, cell_id, uid = result["sweep_id"], result["cell_id"], result["run_uid"]

    if session.get(Sweep, sweep_id) is None:
        session.add(Sweep(
            id=sweep_id, created_at=result.get("started_at") or path.stat().st_mtime,
            argv=[], overrides=[], n_cells=0,
            note=f"created by the collector from {path}: the launcher did not record this sweep"))
    if session.get(Cell, cell_id) is None:
        cell = result["cell"]
        session.add(Cell(id=cell_id, settings=cell, created_at=now,
                         **{key: cell[key] for key in CELL_COLUMNS}))
    session.flush()  # sweeps and cells first: runs and sweep_cells refer to them
    if session.get(SweepCell, (sweep_id, cell_id)) is None:
        session.add(SweepCell(sweep_id=sweep_id, cell_id=cell_id))
    run = session.scalar(select(Run).where(Run.uid == uid))
    if run is None:
        run = Run(uid=uid, sweep_id=sweep_id, cell_id=cell_id, repeat=result["repeat"],
                  attempt=result["attempt"], state=runstate.PENDING)  # _fill_run moves it
        session.add(run)
    session.flush()

    if run.state in runstate.IN_FLIGHT and result["state"] != runstate.DONE:
        # its job is still in flight (a requeued job's earlier incarnation wrote this failure):
        # landing it would close the repeat before its real measurement
        raise _InFlight(uid)
    claim = session.execute(
        update(Run).where(Run.uid == uid, Run.collected_at.is_(None)).values(collected_at=now),
        execution_options={"synchronize_session": False})
    if claim.rowcount != 1:
        raise _AlreadyCollected(uid)

    _fill_run(run, path, result)
    run.collected_at = now
    # Metrics left by an earlier landing whose collected_at was reset (to re-collect) are replaced.
    session.execute(delete(Metric).where(Metric.run_id == run.id))
    session.add_all(Metric(run_id=run.id, name=name, value=float(value), unit=unit_of(name))
                    for name, value in (result.get("metrics") or {}).items())


def _fill_run(run: Run, path: Path, result: dict[str, Any]) -> None:
    """Copies what the result file knows about its run onto the run's row."""
    error = result.get("error") or {}
    trainer = result.get("trainer") or {}
    paths = result.get("paths") or {}
    # The run directory is where the file lies now, which stays true after runs/ is moved or
    # copied off the cluster; the job's own `paths.run_dir` may name another machine's mount.
    run_dir = path.parent.resolve()

    # A run tracking already ended keeps its verdict: it was drawn from the result file *and*
    # the scheduler (Slurm's CANCELLED beats a file that says the trainer got a signal).
    if run.state not in runstate.FINAL or run.state == runstate.LOST:
        run.state = result["state"]
        run.state_detail = None
        run.error_class = error.get("class")
        run.error_message = error.get("message")
    run.node = result.get("node") or run.node
    run.job_id = result.get("job_id") or run.job_id
    run.executor = result.get("executor") or run.executor
    run.started_at = result.get("started_at")
    run.ended_at = result.get("ended_at")
    run.run_dir = str(run_dir)
    run.log_path = _under(run_dir, paths.get("stderr")) or run.log_path
    run.result_path = str(path.resolve())
    run.params = trainer.get("params")
    run.framework_version = trainer.get("version")
    run.framework_build = trainer.get("build")
    _fill_provenance(run, result)


def _fill_provenance(run: Run, result: dict[str, Any]) -> None:
    """The provenance columns (docs/protocol.md §3 `provenance`); a part of the wrong type is skipped."""
    prov = result.get("provenance") or {}
    cpu, gpu = prov.get("cpu") or {}, prov.get("gpu") or {}
    git, slurm = prov.get("git") or {}, prov.get("slurm") or {}
    devices = [d for d in gpu.get("devices") or [] if isinstance(d, dict)]

    def typed(value: Any, *types: type) -> Any:
        return value if isinstance(value, types) and not (isinstance(value, bool) and bool not in types) else None

    names = sorted({d.get("name") for d in devices if isinstance(d.get("name"), str)})
    run.provenance = prov or None
    run.environment = typed(prov.get("environment"), str) or typed(result.get("environment"), str)
    run.cpu_model = typed(cpu.get("model"), str)
    run.cpu_cores = typed(cpu.get("cores"), int)
    run.cpu_threads = typed(cpu.get("usable"), int)
    run.gpu_name = ", ".join(names) or None
    run.gpu_uuids = ",".join(d["uuid"] for d in devices if isinstance(d.get("uuid"), str)) or None
    run.gpu_driver = typed(gpu.get("driver"), str)
    run.cuda_driver = typed(gpu.get("cuda_driver"), str)
    run.git_revision = typed(git.get("revision"), str)
    run.git_dirty = typed(git.get("dirty"), bool)
    run.slurm_job_id = typed(slurm.get("job_id"), str)
    run.exclusive = typed(prov.get("exclusive"), bool)
    run.energy_method = typed((result.get("energy") or {}).get("method"), str)


def _under(run_dir: Path, name: Optional[str]) -> Optional[str]:
    """A path from the result's `paths`, relative ones taken from the run directory."""
    if not name:
        return None
    p = Path(name)
    return str(p if p.is_absolute() else run_dir / p)
