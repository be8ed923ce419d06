"""Many processes opening one SQLite results file at one instant: failures per 1,000 opens (must be 0).

Each round makes a results file — new (absent), or a copy of a database of an older release
(tests/data/results-5f8e814.db, not in WAL mode, which every opener must switch and upgrade) —
then forks N processes that wait at one barrier, and each opens it and writes one row of its own:
- `--how connect`: what every connection of every command does first (sqlite3, then
  sql_adapters.sqlite_pragmas: the journal mode, the busy timeout), then a row in a table of its own;
- `--how open_db`: the whole of db.open_db (the journal mode, then making or upgrading the
  schema, whichever it finds to do), then a sweep of its own.
An open fails when a process raises or says nothing; afterwards the file must pass `PRAGMA
integrity_check` and hold every row reported written (and, with open_db, be at the head revision).

    python benchmarks/concurrent_open.py --rounds 100 --processes 8          # both ways, new and old files

The release before this module's failed 19 of 1,600 opens `--how connect` with 8 processes
("database is locked" from PRAGMA journal_mode = WAL: SQLite does not wait for that lock),
about 1 in 85; tests/test_db.py runs the same rounds (race()) with fewer of them.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
OLD_DB = REPO / "tests" / "data" / "results-5f8e814.db"


class Tally(NamedTuple):
    opens: int
    failures: int
    said: list[str]  # the distinct failures, with how often


def _open_and_write(how: str, path: Path, name: str, barrier, queue) -> None:
    from orchestrator.store import db, schema, sql_adapters

    try:
        barrier.wait(timeout=60)
        if how == "open_db":
            factory = db.open_db(f"sqlite:///{path}")
            with factory.begin() as session:
                session.add(schema.Sweep(id=name, created_at=time.time(), argv=[], overrides=[], n_cells=0))
        else:
            con = sqlite3.connect(path, timeout=sql_adapters.BUSY_TIMEOUT_S)
            try:
                sql_adapters.sqlite_pragmas(con)
                con.execute("CREATE TABLE IF NOT EXISTS probe (name TEXT)")
                con.execute("INSERT INTO probe VALUES (?)", (name,))
                con.commit()
            finally:
                con.close()
        queue.put((name, "ok"))
    except BaseException as exc:  # noqa: BLE001 - counted, said, never a traceback
        queue.put((name, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"))


def race(how: str, kind: str, processes: int, rounds: int, where: Path) -> Tally:
    """`rounds` rounds of `processes` openers (`how`: "connect" or "open_db") on a `kind` ("new"
    or "old") file under `where`."""
    from orchestrator.store import db  # imported once here, so that forked openers start at once

    ctx = multiprocessing.get_context("fork")
    opens, failures, said = 0, 0, {}
    for r in range(rounds):
        path = where / f"{how}-{kind}-{r}.db"
        if kind == "old":
            shutil.copy(OLD_DB, path)
        barrier, queue = ctx.Barrier(processes), ctx.Queue()
        names = [f"p{r}-{i}" for i in range(processes)]
        procs = [ctx.Process(target=_open_and_write, args=(how, path, n, barrier, queue)) for n in names]
        for p in procs:
            p.start()
        answers = {}
        for _ in procs:
            try:
                name, answer = queue.get(timeout=120)
            except Exception:  # noqa: BLE001 - a silent process: counted below
                break
            answers[name] = answer
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        opens += processes
        for n in names:
            answer = answers.get(n, "said nothing")
            if answer != "ok":
                failures += 1
                said[answer] = said.get(answer, 0) + 1
        con = sqlite3.connect(path)
        try:
            problems = []
            if con.execute("PRAGMA integrity_check").fetchall() != [("ok",)]:
                problems.append("integrity_check failed")
            if how == "open_db":
                if con.execute("SELECT version_num FROM alembic_version").fetchall() != [(db.SCHEMA_VERSION,)]:
                    problems.append("not at the head revision")
                written = {n for (n,) in con.execute("SELECT id FROM sweeps WHERE id LIKE ?", (f"p{r}-%",))}
            else:
                written = {n for (n,) in con.execute("SELECT name FROM probe")}
            lost = [n for n in names if answers.get(n) == "ok" and n not in written]
            if lost:
                problems.append(f"{len(lost)} sweeps reported written are missing")
        finally:
            con.close()
        for problem in problems:
            failures += 1
            said[problem] = said.get(problem, 0) + 1
    return Tally(opens, failures, [f"{n}× {s}" for s, n in sorted(said.items(), key=lambda x: -x[1])])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--kind", choices=("new", "old", "both"), default="both")
    parser.add_argument("--how", choices=("connect", "open_db", "both"), default="both")
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (default: a temporary directory)")
    args = parser.parse_args()
    kinds = ("new", "old") if args.kind == "both" else (args.kind,)
    hows = ("connect", "open_db") if args.how == "both" else (args.how,)
    where = Path(tempfile.mkdtemp(prefix="concurrent-open-", dir=args.dir))
    try:
        for how, kind in ((h, k) for h in hows for k in kinds):
            t0 = time.monotonic()
            tally = race(how, kind, args.processes, args.rounds, where)
            print(f"{how}, {kind} file, {args.processes} processes × {args.rounds} rounds: {tally.opens} opens, "
                  f"{tally.failures} failures = {1000 * tally.failures / max(tally.opens, 1):.1f} per 1,000 "
                  f"({time.monotonic() - t0:.1f} s; load {os.getloadavg()[0]:.2f})")
            for line in tally.said:
                print(f"    {line}")
    finally:
        shutil.rmtree(where, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
