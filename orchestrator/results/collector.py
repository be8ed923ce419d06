"""Lands the jobs' `result.json` files in the database, each exactly once.

Jobs never touch the database (compute nodes may not reach it, and a thousand jobs writing one
SQLite file would fight over its lock); they leave a result file in their run directory, and
this collector, run on the login node by `python -m orchestrator collect` or by the launcher
after a sweep, turns each file into rows. It may run many times, and two may run at once:

- files are read and checked first (a broken one is reported with its path and the reason, and
  left where it is), then land in batches of up to `BATCH_SIZE`, one transaction each, which on
  SQLite takes the write lock at its start (BEGIN IMMEDIATE), so that what the batch looked up
  stays true until it commits; a crash loses at most the batch in progress, which the next
  collection lands;
- a run is *claimed* (result_rows.claim: its row changed only where it is still uncollected and
  in the state looked up), or inserted, collected, where no row had it; its metrics are written
  only by the collector whose claim or insert changed the row, so a run two collectors read at
  once counts once. An insert skips a sweep, cell or run another collector has added (a server
  waits for it first), and a run so skipped is looked up again alone, where it is found landed.
  The statements are result_rows.py's, which also refresh the kept per-cell summary;
- should anything in a batch fail (a row the database refuses, a run changed under it), the
  batch rolls back and each of its files lands alone, in its own transaction, retried once; a
  file that still fails is reported broken and the others are not lost.

Per file it costs one statement or two: the sweep and cell rows a batch needs are found with
one query on their ids (never loading a sweep's override list), ids already seen are remembered
for the rest of the collection, and new rows and metrics go in with one statement per table.
"""
from __future__ import annotations

import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Optional

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import sessionmaker

from orchestrator.store import result_rows
from orchestrator import runstate, setting_registry
from orchestrator.store.result_rows import Contended
from orchestrator.store.sqlite_lease import LeaseLost
from orchestrator.metric_registry import unit_of
from orchestrator.results.resultfile import CELL_COLUMNS, OPTIONAL_CELL_COLUMNS, RESULT_NAME, BadResult, read_result

#: Result files read, and folders listed, at once: on a network file system each is a round trip
#: that waits on the server, not on this CPU, and threads overlap the waits.
READERS = 8
#: Files per transaction: large enough that a commit's cost vanishes, small enough that the
#: write lock is never held for long (a launcher waits for it) and a crash loses little work.
BATCH_SIZE = 500


@dataclass
class CollectReport:
    """What one collection did: runs landed, runs found already landed, files refused."""

    added: int = 0
    already: int = 0
    broken: list[tuple[Path, str]] = field(default_factory=list)
    #: failed results of runs whose job is still in flight (requeued): landed once it ends
    waiting: int = 0
    #: sweeps not looked into (all their runs collected) that hold fewer runs than cells: the
    #: database looks behind its runs/ (restored from a backup, salvaged with .recover)
    behind: list[str] = field(default_factory=list)

    def hint(self) -> str:
        """One line where the database looks behind runs/ ('' where it does not)."""
        some = ", ".join(self.behind[:3]) + (", ..." if len(self.behind) > 3 else "")
        return (f"{len(self.behind)} sweep(s) ({some}) hold fewer runs than cells and were not looked into: if "
                f"this database was restored or recovered, run `orchestrator collect --all`") if self.behind else ""

    def __str__(self) -> str:
        waiting = f", {self.waiting} waiting for their job to end" if self.waiting else ""
        return f"{self.added} added, {self.already} already in the DB, {len(self.broken)} broken{waiting}"


@dataclass
class _File:
    """A result file read and checked, on its way into the database."""

    path: Path        # as found under the runs directory (reports name it so)
    resolved: Path    # where it really lies (recorded in the run's row)
    result: dict[str, Any]


#: What became of one file in a batch.
ADDED, ALREADY, WAITING, CONTENDED = "added", "already", "waiting", "contended"


@dataclass
class _Known:
    """Ids this collection has seen in the database (rows are never deleted), so each is asked
    for once per collection, not once per file."""

    sweeps: set[str] = field(default_factory=set)
    cells: set[str] = field(default_factory=set)
    pairs: set[tuple[str, str]] = field(default_factory=set)


def find_results(runs_root: Path, skip: Collection[str] = ()) -> list[tuple[Path, Path]]:
    """Every `result.json` under `runs_root` but in its top folders named in `skip` (a job's
    `result.json.tmp`, not yet renamed, is not one): each as found and where it really lies.
    One listing per folder (os.scandir), READERS folders of a level at once, and no look at each
    file: on a network file system every look is a round trip, and a project's runs/ holds every
    run it ever had."""
    found, level, top = [], [(runs_root, runs_root.resolve())], True
    with ThreadPoolExecutor(READERS) as pool:
        while level:
            deeper = []
            for (shown, real), entries in zip(level, pool.map(_listing, [shown for shown, _ in level])):
                for name, is_dir, is_link in entries:
                    if not is_dir:
                        found.append((shown / name, (shown / name).resolve() if is_link else real / name))
                    elif not (top and name in skip):
                        deeper.append((shown / name, real / name))
            level, top = deeper, False
    return sorted(found)


def _listing(folder: Path) -> list[tuple[str, bool, bool]]:
    """A folder's subfolders and its result file: (name, is a folder, is a link); none if unreadable."""
    try:
        with os.scandir(folder) as entries:
            return [(e.name, e.is_dir(follow_symlinks=False), e.is_symlink()) for e in entries
                    if e.is_dir(follow_symlinks=False) or (e.name == RESULT_NAME and e.is_file())]
    except OSError:
        return []


def collect(session_factory: sessionmaker, runs_root: Path, batch_size: int = BATCH_SIZE,
            everything: bool = False) -> CollectReport:
    """Ingests every result file under `runs_root` that the database does not hold yet.

    The folder of a sweep the launcher recorded (runs/<sweep id>) whose runs are all collected
    is not looked into (unless `everything`): its runs count as already in the database. The
    launcher records every run before its job starts, so such a folder holds no result to land;
    a sweep the collector made (the launcher did not record it) is always looked into. Files go
    in batches, each first checked against what is landed (by any collector), then read READERS
    at once; collectors started together begin at different batches, and so share the work."""
    runs_root = Path(runs_root)
    if not runs_root.is_dir():
        raise FileNotFoundError(f"no runs directory {runs_root}")
    report, known = CollectReport(), _Known()
    with session_factory() as session:
        done = {} if everything else result_rows.collected_sweeps(session, [p.name for p in runs_root.iterdir()
                                                                             if p.is_dir()])
    report.behind = sorted(sweep for sweep, (_, cells) in done.items() if cells > done[sweep][0])
    done = {sweep: n for sweep, (n, _) in done.items()}
    report.already += sum(done.values())
    found = find_results(runs_root, done)
    size = max(1, batch_size)
    chunks = [found[i:i + size] for i in range(0, len(found), size)]
    start = random.randrange(len(chunks)) if chunks else 0  # collectors at once start apart
    with ThreadPoolExecutor(READERS) as pool:
        for chunk in chunks[start:] + chunks[:start]:
            new = _not_landed(session_factory, chunk)
            report.already += len(chunk) - len(new)
            read = list(pool.map(_read, new))
            report.broken += [f for f in read if not isinstance(f, _File)]
            _land(session_factory, [f for f in read if isinstance(f, _File)], known, report)
    report.broken.sort()
    return report


def _not_landed(session_factory: sessionmaker, chunk: list[tuple[Path, Path]]) -> list[tuple[Path, Path]]:
    """The files of `chunk` not landed from where they lie, by this collector or another (one
    that started at once may have landed them while this one waited): one look at the index of
    landed paths (ix_runs_landed), before any is read. A moved runs/ tree still ends up in
    `already`, through the claim."""
    with session_factory() as session:
        landed = result_rows.landed_paths(session, [str(real) for _, real in chunk])
    return [pair for pair in chunk if str(pair[1]) not in landed]


def _read(pair: tuple[Path, Path]) -> Any:
    """A result file read and checked (a _File), or (its path, why it is broken): one file's
    problem, whatever it is, is that file's broken reason, never the end of the collection."""
    path, resolved = pair
    try:
        return _File(path, resolved, read_result(path))
    except BadResult as exc:
        return (path, str(exc))
    except Exception as exc:  # noqa: BLE001 - reported with the file, collection goes on
        return (path, f"{type(exc).__name__}: {exc}")


def _land(session_factory: sessionmaker, files: list[_File], known: _Known, report: CollectReport) -> None:
    """A batch in one transaction; if that fails, each of its files alone (see the module's doc)."""
    if not files:
        return
    try:
        outcomes = _transaction(session_factory, files, known)
    except OperationalError as exc:  # a lost lease or a server's deadlock: the batch once more
        outcomes = _again(session_factory, files, known) if _transient(exc) else [CONTENDED] * len(files)
    except Exception:  # noqa: BLE001 - the files alone say which one it was
        outcomes = [CONTENDED] * len(files)
    for file, outcome in zip(files, outcomes):
        if outcome == CONTENDED:
            outcome = _ingest_alone(session_factory, file, known)
        if outcome == ADDED:
            report.added += 1
        elif outcome == ALREADY:
            report.already += 1
        elif outcome == WAITING:
            report.waiting += 1
        else:
            report.broken.append((file.path, outcome))


def _again(session_factory: sessionmaker, files: list[_File], known: _Known) -> list[str]:
    """The batch in a new transaction (another turn of the lease); if that fails, its files alone."""
    try:
        return _transaction(session_factory, files, known)
    except Exception:  # noqa: BLE001 - the files alone say which one it was
        return [CONTENDED] * len(files)


def _ingest_alone(session_factory: sessionmaker, file: _File, known: _Known) -> str:
    """One file in its own transaction, tried twice (a concurrent collector may have inserted the
    same sweep, cell or run between our look and our insert; the retry finds its rows); a broken
    reason if it still fails."""
    for attempt in (1, 2):
        try:
            (outcome,) = _transaction(session_factory, [file], known)
        except IntegrityError as exc:
            if attempt == 2:
                return f"the database refused it twice: {exc.orig}"
            continue
        except Contended:
            continue
        except OperationalError as exc:
            if not _transient(exc) or attempt == 2:
                return f"{type(exc).__name__}: {exc}"
            continue  # a server ended it for another's sake (deadlock, serialization): again
        except Exception as exc:  # noqa: BLE001 - reported with the file, collection goes on
            return f"{type(exc).__name__}: {exc}"
        if outcome != CONTENDED:
            return outcome
    return "another process changed its run twice while it was being collected; collect again"


def _transaction(session_factory: sessionmaker, files: list[_File], known: _Known) -> list[str]:
    """Lands `files` in one transaction; their outcomes, in order. Raises whatever the database
    raised (nothing of the batch is then written)."""
    with session_factory() as session:
        conn = session.connection()
        if conn.dialect.name == "sqlite":  # the write lock first: what we look up stays true
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        new = _Known()
        _parents(conn, files, known, new)
        outcomes = _runs(conn, files)
        session.commit()
    known.sweeps |= new.sweeps
    known.cells |= new.cells
    known.pairs |= new.pairs
    return outcomes


def _parents(conn: Connection, files: list[_File], known: _Known, new: _Known) -> None:
    """The sweep, cell and sweep-cell rows the batch's runs refer to, inserted where missing;
    ids found or inserted join `known` (those inserted, in `new`, once the batch commits)."""
    first: dict[str, _File] = {}
    for f in files:
        first.setdefault(f.result["sweep_id"], f)
        first.setdefault(f.result["cell_id"], f)
    sweeps = {f.result["sweep_id"] for f in files} - known.sweeps
    known.sweeps |= result_rows.present(conn, "sweeps", sweeps)
    if sweeps - known.sweeps:
        result_rows.add(conn, "sweeps", [
            {"id": s, "created_at": first[s].result.get("started_at") or first[s].path.stat().st_mtime,
             "argv": [], "overrides": [], "n_cells": 0,
             "note": f"created by the collector from {first[s].path}: the launcher did not record this sweep"}
            for s in sorted(sweeps - known.sweeps)])
        new.sweeps |= sweeps - known.sweeps
    cells = {f.result["cell_id"] for f in files} - known.cells
    known.cells |= result_rows.present(conn, "cells", cells)
    if cells - known.cells:
        now = time.time()
        kept = {c: setting_registry.recorded(first[c].result["cell"]) for c in cells - known.cells}
        result_rows.add(conn, "cells", [
            {"id": c, "settings": kept[c], "created_at": now, **{key: kept[c][key] for key in CELL_COLUMNS},
             **{key: kept[c].get(key) for key in OPTIONAL_CELL_COLUMNS}}
            for c in sorted(cells - known.cells)])
        new.cells |= cells - known.cells
    by_sweep: dict[str, set[str]] = {}
    for sweep, cell in {(f.result["sweep_id"], f.result["cell_id"]) for f in files} - known.pairs:
        by_sweep.setdefault(sweep, set()).add(cell)
    for sweep, cell_ids in sorted(by_sweep.items()):
        found = result_rows.present(conn, "sweep_cells", cell_ids, sweep)
        known.pairs |= {(sweep, c) for c in found}
        if cell_ids - found:
            result_rows.add(conn, "sweep_cells", [{"sweep_id": sweep, "cell_id": c} for c in sorted(cell_ids - found)])
            new.pairs |= {(sweep, c) for c in cell_ids - found}


def _runs(conn: Connection, files: list[_File]) -> list[str]:
    """Claims (or inserts, collected) each file's run and writes its metrics; the outcomes.
    Raises Contended where the claims changed fewer rows than they should (see result_rows.claim)."""
    now = time.time()
    rows = result_rows.looked_up(conn, (f.result["run_uid"] for f in files))
    outcomes: list[str] = []
    inserts: list[dict[str, Any]] = []
    claims: list[tuple[int, dict[str, Any]]] = []  # (index in files, the claim's parameters)
    taken: set[str] = set()
    for i, f in enumerate(files):
        uid, row = f.result["run_uid"], rows.get(f.result["run_uid"])
        if uid in taken:  # the same run twice in one batch (a copied run directory)
            outcomes.append(ALREADY)
            continue
        if row is not None and row.state in runstate.IN_FLIGHT and f.result["state"] != runstate.DONE:
            # its job is still in flight (a requeued job's earlier incarnation wrote this failure):
            # landing it would close the repeat before its real measurement
            outcomes.append(WAITING)
            continue
        if row is not None and row.collected_at is not None:
            outcomes.append(ALREADY)
            continue
        taken.add(uid)
        outcomes.append(ADDED)
        if row is None:  # the launcher never recorded it: inserted, collected (the uid is unique)
            inserts.append({"uid": uid, "sweep_id": f.result["sweep_id"], "cell_id": f.result["cell_id"],
                            "repeat": f.result["repeat"], "attempt": f.result["attempt"],
                            **_run_values(None, f, now)})
        else:
            claims.append((i, {"claim_uid": uid, "claim_state": row.state, **_run_values(row, f, now)}))
    for i in result_rows.claim(conn, [c for _, c in claims]):
        outcomes[claims[i][0]] = CONTENDED
    ids = {r.uid: r.id for r in rows.values()}
    ids.update(result_rows.insert_runs(conn, inserts))  # a run another collector inserted since our
    outcomes = [CONTENDED if o == ADDED and f.result["run_uid"] not in ids else o  # lookup has no id
                for f, o in zip(files, outcomes)]  # here: looked up again, alone, and found landed
    landed = [(ids[f.result["run_uid"]], f.result) for f, outcome in zip(files, outcomes) if outcome == ADDED]
    result_rows.replace_metrics(conn, [run_id for run_id, _ in landed], [
        {"run_id": run_id, "name": name, "value": float(value), "unit": unit_of(name)}
        for run_id, result in landed for name, value in (result.get("metrics") or {}).items()])
    # the kept summary of every cell whose runs changed, in this transaction (result_rows says why)
    result_rows.refresh_summary(conn, {f.result["cell_id"] for f, outcome in zip(files, outcomes) if outcome == ADDED})
    return outcomes


#: SQLSTATEs of a transaction a database server ended so that another could go on (PostgreSQL's
#: serialization_failure and deadlock_detected): the same work, tried again, succeeds.
TRANSIENT_SQLSTATES = ("40001", "40P01")


def _transient(exc: OperationalError) -> bool:
    """Whether the transaction was ended for another's sake and the same work, tried again,
    succeeds: a server's (psycopg names the SQLSTATE `sqlstate`, psycopg2 `pgcode`), or a SQLite
    file's writer lease lost before the commit (this process stalled: sqlite_lease.LeaseLost)."""
    orig = getattr(exc, "orig", None)
    if isinstance(orig, LeaseLost):
        return True
    return (getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)) in TRANSIENT_SQLSTATES


def _run_values(row: Any, f: _File, now: float) -> dict[str, Any]:
    """The run's fields from what its result file knows (`row`: the run as looked up, or None),
    collected now."""
    result = f.result
    error = result.get("error") or {}
    trainer = result.get("trainer") or {}
    paths = result.get("paths") or {}
    old = row._mapping if row is not None else {}
    # The run directory is where the file lies now, which stays true after runs/ is moved or
    # copied off the cluster; the job's own `paths.run_dir` may name another machine's mount.
    run_dir = f.resolved.parent
    values: dict[str, Any] = {}
    # A run tracking already ended keeps its verdict: it was drawn from the result file *and*
    # the scheduler (Slurm's CANCELLED beats a file that says the trainer got a signal).
    if old.get("state") not in runstate.FINAL or old.get("state") == runstate.LOST:
        values.update(state=runstate.check_move(old.get("state"), result["state"]), state_detail=None,
                      error_class=error.get("class"), error_message=error.get("message"))
    values.update(
        node=result.get("node") or old.get("node"),
        node_addrs=result_rows.node_addrs(result),
        job_id=result.get("job_id") or old.get("job_id"),
        executor=result.get("executor") or old.get("executor"),
        started_at=result.get("started_at"),
        ended_at=result.get("ended_at"),
        run_dir=str(run_dir),
        log_path=_under(run_dir, paths.get("stderr")) or old.get("log_path"),
        result_path=str(f.resolved),
        params=trainer.get("params"),
        framework_version=trainer.get("version"),
        framework_build=trainer.get("build"),
        collected_at=now,
        **result_rows.provenance_columns(result))
    return values


def _under(run_dir: Path, name: Optional[str]) -> Optional[str]:
    """A path from the result's `paths`, relative ones taken from the run directory."""
    if not name:
        return None
    p = Path(name)
    return str(p if p.is_absolute() else run_dir / p)
