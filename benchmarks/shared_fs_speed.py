"""How fast `orchestrator collect` lands result files into a `results.db` on a shared file system
that already holds many runs, with one collector and with several at once on two mounts (issue 35).

For each `--preload` size N: a results.db with N collected runs and their N result files under
`runs/` (as a project that has run N jobs leaves them), made once on the local disk, then its
runs tree copied onto the volume through mount A and its database's paths pointed there. Then, for
each `--collectors` count K: the database copied onto the volume afresh, `--files` new result files
written under `runs/` through mount A, and K `collect` started at one instant (each in its own UTS
namespace as host loginA, loginB, loginC...; odd ones through mount B), as benchmarks/shared_fs.py
starts them. Each line says the slowest collector's wall time, files/s (new files / that time),
what landed (0 lost, 0 duplicated, integrity ok are required) and, with `--profile` (cProfile),
where the time went, summed over the collectors: starting (imports, opening the database), the
lease (waiting for it; checking this host's view after dropping its cached pages), statements
(SQLite's reads over the network), commits (the journal and its fsyncs), reading result files,
scanning runs/.

    scripts/sharedfs.sh start
    .venv/bin/python benchmarks/shared_fs_speed.py --preload 1000,20000 --collectors 1,4 --files 300
"""
from __future__ import annotations

import argparse
import os
import pstats
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import shared_fs  # noqa: E402 - its result files, its silent Slurm and its race of collectors

#: Where the time goes: a name, and the functions (pstats' name, file suffix; for "~", built-ins,
#: the name's start) whose cumulative times it sums; "statements" is SQLite's execute less the lease
#: taken inside it (the authorizer); "commits" holds the journal's writes and fsyncs.
WHERE = {
    "lease wait": [("_take", "sqlite_lease.py")],
    "view check": [("_check_fresh", "sqlite_lease.py")],
    "lease record": [("_record", "sqlite_lease.py")],
    "statements": [("<function LeasedCursor.execute", "~")],  # sqlite3's own, called through super()
    "commits": [("<function LeasedConnection.commit", "~")],
    "read files": [("read_result", "resultfile.py")],
    "scan runs/": [("find_results", "collector.py")],
    "collect": [("collect", "commands/collect.py")],
}


def preload(n: int, python: str, env: dict[str, str], local: Path) -> Path:
    """A project on the local disk whose results.db holds `n` collected runs (its runs/ their
    files), journal mode delete as on a network file system; made once per size."""
    project = local / f"preload-{n}"
    if (project / "done").exists():
        return project
    if not (project / "made").exists():
        shutil.rmtree(project, ignore_errors=True)
        (project / "runs").mkdir(parents=True)
        shared_fs.make_results(project / "runs", n, 90)
        (project / "made").touch()
    for p in project.glob("results.db*"):
        p.unlink()
    subprocess.run([python, "-m", "orchestrator", "collect"], cwd=project, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    con = sqlite3.connect(project / "results.db")
    # its sweeps as the launcher records them (with their cells), not as the collector makes an
    # unknown one: a project's sweeps are the launcher's
    con.execute("UPDATE sweeps SET n_cells = (SELECT count(*) FROM sweep_cells WHERE sweep_id = sweeps.id), "
                "note = 'as the launcher records it (benchmarks/shared_fs_speed.py)'")
    con.commit()
    con.execute("PRAGMA journal_mode = delete")
    con.close()
    (project / "done").touch()
    return project


def onto_volume(project: Path, volume: Path) -> None:
    """The preloaded runs tree onto the volume (once), and a database copy whose runs' paths name it."""
    marker = volume / "runs-copied"
    if not marker.exists() or marker.read_text() != str(project):
        shutil.rmtree(volume, ignore_errors=True)
        volume.mkdir(parents=True)
        subprocess.run(["cp", "-r", str(project / "runs"), str(volume / "runs")], check=True)
        marker.write_text(str(project))
    fixed = project / "results-on-volume.db"
    shutil.copyfile(project / "results.db", fixed)
    con = sqlite3.connect(fixed)
    for column in ("result_path", "run_dir"):
        con.execute(f"UPDATE runs SET {column} = replace({column}, ?, ?)",
                    (str(project.resolve()), str(volume.resolve())))
    con.commit()
    con.close()


def measure(n: int, k: int, args: argparse.Namespace, env: dict[str, str], project: Path, work: Path,
            round_no: int) -> str:
    """One measurement: N runs in the database, K collectors, `--files` new files; its line."""
    volume_a = args.a / shared_fs.PROJECT / f"speed-{n}"
    volume_b = args.b / shared_fs.PROJECT / f"speed-{n}"
    for p in volume_a.glob("results.db*"):
        p.unlink()
    for p in (volume_a / "runs").glob("r[0-8]*"):  # the new files of an earlier measurement
        shutil.rmtree(p)
    shutil.copyfile(project / "results-on-volume.db", volume_a / "results.db")
    uids = shared_fs.make_results(volume_a / "runs", args.files, round_no)
    logs = work / f"n{n}-k{k}"
    logs.mkdir(parents=True, exist_ok=True)
    hosts = [f"login{chr(ord('A') + i)}" for i in range(k)]
    dirs = [(volume_a, volume_b)[i % 2] for i in range(k)]
    extra = [["--batch", str(args.batch)] if args.batch else [] for _ in range(k)]
    # the odd hosts see mount B at mount A's path, as login nodes mount a volume at one path
    binds = [("", "", "") if i % 2 == 0 else (str(args.b), str(args.a), str(volume_a)) for i in range(k)]
    commands = shared_fs.race(args.python, dirs, hosts, env, args.timeout, logs, extra, profile=args.profile,
                              binds=binds)
    wall = max(c.seconds for c in commands)
    time.sleep(1.5)  # the FUSE attribute caches run out
    view = shared_fs.read_view(volume_a, uids, logs / "view")
    total = sqlite3.connect(logs / "view" / "results.db").execute(
        "SELECT count(*) FROM runs WHERE collected_at IS NOT NULL").fetchone()[0]
    failed = sum(1 for c in commands if c.rc != 0)
    line = (f"{n:>6} {k:>3} {args.files:>6} {wall:>7.1f} {args.files / wall:>8.1f} {view.landed:>7} "
            f"{args.files - view.landed:>5} {view.duplicated:>4} {total:>7} {failed:>5}  {view.integrity}")
    if args.profile:
        line += "\n" + where(logs, hosts)
    for c in commands:
        if c.rc != 0:
            line += "\n        " + c.line()
    return line


def where(logs: Path, hosts: Sequence[str]) -> str:
    """The time each part took, summed over the collectors' profiles (seconds, and calls)."""
    totals = {name: [0.0, 0] for name in WHERE}
    run_total = 0.0
    for host in hosts:
        stats = pstats.Stats(str(logs / f"{host}.prof")).stats  # type: ignore[attr-defined]
        run_total += max(ct for _, _, _, ct, _ in stats.values())
        for (file, _, func), (_, calls, _, ct, _) in stats.items():
            for name, wanted in WHERE.items():
                if any(file.endswith(suffix) and (func == f or suffix == "~" and func.startswith(f))
                       for f, suffix in wanted):
                    totals[name][0] += ct
                    totals[name][1] += calls
    taken = totals["lease wait"][0] + totals["view check"][0]
    totals["statements"][0] -= taken  # the lease is taken inside the first statement of a turn
    parts = [f"{name} {t:.2f} s ({calls})" for name, (t, calls) in totals.items() if name != "collect"]
    start = run_total - totals["collect"][0]
    return f"        time in {len(hosts)} collector(s), {run_total:.1f} s: start {start:.2f} s; " + "; ".join(parts)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", nargs="?", type=Path, default=shared_fs.SCRATCH / "hostA")
    ap.add_argument("b", nargs="?", type=Path, default=shared_fs.SCRATCH / "hostB")
    ap.add_argument("--preload", default="1000,20000", help="runs already in the database (comma-separated)")
    ap.add_argument("--collectors", default="1,4", help="collectors at once (comma-separated)")
    ap.add_argument("--files", type=int, default=300, help="new result files per measurement")
    ap.add_argument("--batch", type=int, default=None, help="collect --batch N (default: collect's own)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--profile", action="store_true", help="where the time goes (cProfile)")
    ap.add_argument("--local", type=Path, default=Path(tempfile.gettempdir()) / "shared_fs_speed",
                    help="where the preloaded projects are made and kept (local disk)")
    ap.add_argument("--python", default=str(shared_fs.PYTHON if shared_fs.PYTHON.exists() else sys.executable))
    args = ap.parse_args(argv)
    shared_fs.check_shared(args.a, args.b)
    sizes = [int(v) for v in args.preload.split(",")]
    counts = [int(v) for v in args.collectors.split(",")]
    print(f"file system: {shared_fs.mount_of(args.a)[1]}; orchestrator {shared_fs.ROOT}; {args.files} new files "
          f"per measurement; batch {args.batch or 'default'}")
    print(f"{'runs':>6} {'K':>3} {'files':>6} {'wall s':>7} {'files/s':>8} {'landed':>7} {'lost':>5} {'dup':>4} "
          f"{'in db':>7} {'rc!=0':>5}  integrity", flush=True)
    args.local.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="shared_fs_speed.", dir=args.local))  # logs and profiles stay
    print(f"logs and profiles: {work}")
    env = shared_fs.command_env(shared_fs.silent_slurm(work / "bin"))
    round_no = 0
    for n in sizes:
        project = preload(n, args.python, env, args.local)
        onto_volume(project, args.a / shared_fs.PROJECT / f"speed-{n}")
        for k in counts:
            round_no += 1
            print(measure(n, k, args, env, project, work, round_no), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
