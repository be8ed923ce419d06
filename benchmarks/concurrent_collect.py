"""N `orchestrator collect` started at one instant on one host's local disk, on a new results file
and on a growing one: failed commands (must be 0), runs lost or stored twice (must be 0).

Each round of `--kind new` makes a fresh project (result files, no results.db: the collectors
make it together); each round of `--kind growing` adds `--files` result files to one project
whose results.db the earlier rounds filled. The collectors are benchmarks/shared_fs.py's (one
write to their stdin starts them together), each as its own process of the orchestrator here.

    sudo .venv/bin/python benchmarks/concurrent_collect.py --rounds 80 --collectors 2,4
"""
from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import shared_fs  # noqa: E402 - its result files, its silent Slurm and its race of collectors


def landed(project: Path) -> tuple[int, int]:
    """(distinct collected run uids, rows of them) in the project's results.db."""
    con = sqlite3.connect(project / "results.db")
    try:
        uids = [u for (u,) in con.execute("SELECT uid FROM runs NOT INDEXED WHERE collected_at IS NOT NULL")]
    finally:
        con.close()
    return len(set(uids)), len(uids)


def run(kind: str, collectors: int, rounds: int, files: int, work: Path, python: str) -> str:
    env = shared_fs.command_env(shared_fs.silent_slurm(work / "bin"))
    project = work / f"{kind}-{collectors}"
    made: set[str] = set()
    failed, said = 0, {}
    t0 = time.monotonic()
    for r in range(rounds):
        if kind == "new":
            shutil.rmtree(project, ignore_errors=True)
            made = set()
        (project / "runs").mkdir(parents=True, exist_ok=True)
        made.update(shared_fs.make_results(project / "runs", files, r))
        logs = work / "logs"
        logs.mkdir(exist_ok=True)
        hosts = [f"c{i}" for i in range(collectors)]
        for cmd in shared_fs.race(python, [project] * collectors, hosts, env, 300, logs, [[]] * collectors):
            if cmd.rc != 0:
                failed += 1
                said[cmd.last] = said.get(cmd.last, 0) + 1
        distinct, rows = landed(project)
        if distinct != len(made) or rows != distinct:
            said[f"round {r}: {len(made) - distinct} lost, {rows - distinct} stored twice"] = 1
            failed += 1
    opens = rounds * collectors
    lines = [f"{kind} file, {collectors} collectors x {rounds} rounds ({files} files each): {opens} commands, "
             f"{failed} failed ({time.monotonic() - t0:.0f} s, load {os.getloadavg()[0]:.2f})"]
    lines += [f"    {n}x {s}" for s, n in said.items()]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=80)
    ap.add_argument("--collectors", default="2,4", help="comma-separated counts (default 2,4)")
    ap.add_argument("--files", type=int, default=40, help="result files per round")
    ap.add_argument("--kind", choices=("new", "growing", "both"), default="both")
    ap.add_argument("--python", default=str(shared_fs.PYTHON if shared_fs.PYTHON.exists() else sys.executable))
    args = ap.parse_args()
    if not 1 <= args.rounds <= 1000:
        ap.error("--rounds 1..1000")
    kinds = ("new", "growing") if args.kind == "both" else (args.kind,)
    with tempfile.TemporaryDirectory(prefix="concurrent-collect-") as tmp:
        for kind in kinds:
            for n in (int(c) for c in args.collectors.split(",")):
                print(run(kind, n, args.rounds, args.files, Path(tmp), args.python), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
