"""Two login nodes collecting into one `results.db` on a shared file system (issue 30).

Given two directories that are two mounts of one volume (by default those `scripts/sharedfs.sh
start` makes: $SHAREDFS_TEST_DIR/hostA and .../hostB, GlusterFS mounted twice, each client with
its own page cache as two hosts would have), each round:

1. makes a fresh project folder on the volume (`shared-fs-bench/round-NN`, written through mount
   A) with N result files under `runs/<sweep>/<cell>/<repeat>/result.json`, as jobs leave them
   (tests/result_factory.py's format; many cells over two sweeps, one in ten a failure), and its
   `results.db` made by one `open_db` beforehand (as the launcher leaves it; `--race-create`
   leaves the making to the two collectors);
2. starts `python -m orchestrator collect` twice at one instant, one with its working directory
   in the project through mount A, one through mount B, each in its own UTS namespace with its
   own host name (`unshare --uts`: loginA, loginB), as two login nodes would; both use the
   defaults `sqlite:///results.db` and `./runs`, so each reaches the one file through its mount;
3. after both end, copies `results.db` (and a `-wal` file left behind, which a next reader would
   recover) off the volume and checks the copy: `PRAGMA integrity_check`, `PRAGMA journal_mode`,
   runs landed (collected) against files made (lost), run uids stored more than once (read
   without the index), runs both collectors said they added (claimed twice), whether mounts A and
   B read the same bytes, and each command's exit status and last line.

Prints a line per round and the totals, with the file system (from /proc/mounts) and journal mode.
Commands run the orchestrator next to this file (PYTHONPATH is this checkout), so a copy of the
tree (e.g. `git archive HEAD`) can be measured as it is. Bounded: `--rounds`, a time limit per
command, and `--max-minutes` for the whole run (no round starts after it).

Not a test; a test that wants it calls `main([...])` with few rounds. Needs root (`unshare --uts`).

    scripts/sharedfs.sh start
    .venv/bin/python benchmarks/shared_fs.py [--rounds 20] [--files 150] [A B]
    scripts/sharedfs.sh stop
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the orchestrator, and the tests' result_factory

from result_factory import make_result, write_result  # noqa: E402

import shared_fs_stall  # noqa: E402 - its self-stopping collector (this folder is on sys.path)

SCRATCH = Path(os.environ.get("SHAREDFS_TEST_DIR", "/tmp/orchestrator-sharedfs"))
FRAMEWORKS = ("torch", "tensorflow", "mxnet", "caffe", "cntk", "numpy")
MODELS = ("lenet", "alexnet", "resnet50", "googlenet", "vgg16")
REPORT = re.compile(r"(\d+) added, (\d+) already in the DB, (\d+) broken")
#: The folder on the volume the rounds use (another checkout benchmarking at once picks its own: --project).
PROJECT = os.environ.get("SHARED_FS_PROJECT", "shared-fs-bench")
PYTHON = ROOT / ".venv" / "bin" / "python"


@dataclass
class Command:
    """One collector's run: where it ran, how it ended, what it said."""

    host: str
    rc: Optional[int] = None
    seconds: float = 0.0
    last: str = ""
    added: Optional[int] = None
    timed_out: bool = False
    said: str = ""  # everything it printed

    @property
    def status(self) -> str:
        """The exit status, or the signal that ended it (SIGBUS: a memory-mapped file shrank under it)."""
        if self.timed_out:
            return "T/O"
        if self.rc is not None and self.rc < 0:
            try:
                return signal.Signals(-self.rc).name
            except ValueError:
                return f"sig{-self.rc}"
        return str(self.rc)

    def line(self) -> str:
        rc = "timeout" if self.timed_out else (f"rc={self.rc}" if self.status == str(self.rc) else f"killed by {self.status}")
        line = f"{self.host}: {rc} {self.seconds:5.1f} s  {self.last[:150]}"
        if self.rc != 0:  # a failure: all it said, to see why
            line += "".join(f"\n            | {ln[:300]}" for ln in self.said.splitlines()[-15:])
        return line


@dataclass
class Round:
    n: int
    made: int
    landed: int = 0
    lost: int = 0
    duplicated: int = 0
    claimed_twice: int = 0
    integrity: str = ""
    journal: str = ""
    wal_left: bool = False
    same_bytes: Optional[bool] = None
    error: str = ""
    stalled: str = ""
    commands: list[Command] = field(default_factory=list)
    views: dict[str, "View"] = field(default_factory=dict)

    @property
    def bad(self) -> bool:
        return bool(self.lost or self.duplicated or self.claimed_twice or self.integrity != "ok" or self.error
                    or any(c.rc != 0 for c in self.commands))


# --- the volume -------------------------------------------------------------------------------

def mount_of(path: Path) -> tuple[str, str, str]:
    """(mount point, file system type, source) of the mount holding `path`, from /proc/mounts."""
    path, best = path.resolve(), ("/", "?", "?")
    for line in Path("/proc/mounts").read_text().splitlines():
        source, point, fstype = line.split()[:3]
        point = point.replace("\\040", " ")
        if (path == Path(point) or Path(point) in path.parents) and len(point) >= len(best[0]):
            best = (point, fstype, source)
    return best


def statfs_magic(path: Path) -> str:
    done = subprocess.run(["stat", "-f", "-c", "%t", str(path)], capture_output=True, text=True)
    return f"0x{done.stdout.strip()}" if done.returncode == 0 else "?"


def check_shared(a: Path, b: Path, wait_s: float = 5.0) -> None:
    """A file written through A must be read through B (else they are not one volume)."""
    token = f"{os.getpid()}-{time.time_ns()}"
    (a / ".shared_fs-check").write_text(token)
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                if (b / ".shared_fs-check").read_text() == token:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{a} and {b} are not one volume: a file written through {a} is not "
                                 f"seen through {b} within {wait_s:g} s (scripts/sharedfs.sh start?)")
            time.sleep(0.1)
    finally:
        (a / ".shared_fs-check").unlink(missing_ok=True)


# --- one round --------------------------------------------------------------------------------

def make_results(runs: Path, n: int, round_no: int) -> list[str]:
    """`n` result files of `n` cells over two sweeps, one in ten a failure; their run uids."""
    uids = []
    for i in range(n):
        result = make_result(sweep=f"r{round_no:02d}-sweep-{i % 2}", state="failed" if i % 10 == 9 else "done",
                             framework=FRAMEWORKS[i % len(FRAMEWORKS)], model=MODELS[i // 7 % len(MODELS)],
                             hardware=("cpu12", "p100")[i // 3 % 2], seed=i)
        write_result(runs, result)
        uids.append(result["run_uid"])
    return uids


def silent_slurm(bin_dir: Path) -> str:
    """A PATH whose `sacct`/`squeue` fail at once (no cluster here: collect's reconcile skips)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("sacct", "squeue", "sinfo", "scontrol"):
        script = bin_dir / name
        script.write_text("#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n")
        script.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def command_env(path: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ORCHESTRATOR_DB", "ORCHESTRATOR_RUNS")}
    env.update(PATH=path, PYTHONPATH=str(ROOT), COLUMNS="200", NO_COLOR="1", TERM="dumb")
    return env


def precreate(python: str, cwd: Path, env: dict[str, str], timeout: float) -> str:
    """The project's results.db, made by one process (as the launcher leaves it); '' or why not."""
    code = "from orchestrator.store import db; db.open_db('sqlite:///results.db').kw['bind'].dispose()"
    try:
        done = subprocess.run([python, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"making results.db took over {timeout:g} s"
    return "" if done.returncode == 0 else f"making results.db failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"


def race(python: str, dirs: Sequence[Path], hosts: Sequence[str], env: dict[str, str], timeout: float,
         logs: Path, extra: Sequence[Sequence[str]], during: Optional[Callable[[list[int]], None]] = None,
         profile: bool = False, binds: Sequence[tuple[str, str, str]] = (), first: Sequence[str] = ()) -> list[Command]:
    """`orchestrator collect` in each dir at once, each in its own UTS namespace as host `hosts[i]`.
    Both wait on their stdin before the exec; one write to each starts them together. `during`
    is called with their process ids once they are started; with `profile`, each runs under
    cProfile into `logs/<host>.prof`. `binds[i]`, where given, is (mount, path, dir): in a mount
    namespace of its own, host i sees that mount at that path and works in that dir (two login
    nodes mount the volume at one path). `first`: what host 0 runs instead of `-m orchestrator`."""
    procs = []
    for i, (d, host, more) in enumerate(zip(dirs, hosts, extra)):
        out = open(logs / f"{host}.out", "w+b")
        script = ('hostname "$1" || exit 97; if [ -n "$2" ]; then mount --bind "$2" "$3" && cd "$4" || exit 96; fi; '
                  'shift 4; read -r go || exit 98; exec "$@" </dev/null')
        prof = ["-m", "cProfile", "-o", str(logs / f"{host}.prof")] if profile else []
        bind = list(binds[i]) if i < len(binds) and binds[i][0] else ["", "", ""]
        argv = ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script, "sh", host, *bind,
                python, *prof, *(first if i == 0 and first else ["-m", "orchestrator"]), "collect", *more]
        proc = subprocess.Popen(argv, cwd=d, env=env, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        procs.append((proc, out, Command(host)))
    time.sleep(0.2)  # both shells at their `read`
    t0 = time.perf_counter()
    for proc, _, _ in procs:
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
    for proc, _, _ in procs:
        proc.stdin.close()
    if during is not None:
        during([proc.pid for proc, _, _ in procs])
    deadline = t0 + timeout
    for proc, out, cmd in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            cmd.timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)  # our own process group (start_new_session)
            proc.wait()
        cmd.rc, cmd.seconds = proc.returncode, time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode(errors="replace")
        out.close()
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        cmd.last = lines[-1] if lines else "(printed nothing)"
        cmd.said = text
        m = REPORT.search(text)
        cmd.added = int(m.group(1)) if m else None
    return [c for _, _, c in procs]


def digest(path: Path) -> Optional[str]:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


@dataclass
class View:
    """The results file as one reader finds it."""

    landed: int = 0
    duplicated: int = 0
    integrity: str = "?"
    journal: str = "?"
    wal_left: bool = False
    error: str = ""


def read_view(project: Path, uids: list[str], work: Path) -> View:
    """`results.db` as a next reader through `project` finds it: copied off the volume with a
    `-wal` file left behind (which that reader would recover), then checked on local disk, so
    the check changes nothing on the volume."""
    v = View()
    work.mkdir(parents=True, exist_ok=True)
    for p in work.glob("results.db*"):
        p.unlink()
    try:
        shutil.copyfile(project / "results.db", work / "results.db")
        wal = project / "results.db-wal"
        if wal.exists() and wal.stat().st_size:
            v.wal_left = True
            shutil.copyfile(wal, work / "results.db-wal")
    except OSError as exc:
        v.error = f"copying results.db: {exc}"
        return v
    stored: list[str] = []
    try:
        con = sqlite3.connect(work / "results.db", timeout=5)
        try:
            v.journal = con.execute("PRAGMA journal_mode").fetchone()[0]
            v.integrity = "; ".join(row[0] for row in con.execute("PRAGMA integrity_check(5)"))
            # without the index: a uid stored twice (a broken unique index) is seen too
            stored = [row[0] for row in con.execute("SELECT uid FROM runs NOT INDEXED WHERE collected_at IS NOT NULL")]
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        v.error = f"{exc}"
        if v.integrity == "?":
            v.integrity = str(exc)
    made = set(uids)
    landed = [u for u in stored if u in made]
    v.landed, v.duplicated = len(set(landed)), len(landed) - len(set(landed))
    return v


def check_db(projects: dict[str, Path], uids: list[str], work: Path, r: Round) -> None:
    """Each view of the results file (through A, through B, on the server's brick where known),
    after the FUSE attribute caches (1 s by default) have run out; the round's figures are
    those of the server's file where it is known, else of A's view."""
    time.sleep(1.5)
    for name, project in projects.items():
        r.views[name] = read_view(project, uids, work / f"view-{name}")
    digests = {name: digest(project / "results.db") for name, project in projects.items() if name in ("A", "B")}
    r.same_bytes = digests.get("A") is not None and digests.get("A") == digests.get("B")
    main = r.views.get("srv") or r.views["A"]
    r.landed, r.lost, r.duplicated = main.landed, len(uids) - main.landed, max(v.duplicated for v in r.views.values())
    r.integrity, r.journal, r.wal_left = main.integrity, main.journal, main.wal_left
    r.error = "; ".join(f"{name}: {v.error}" for name, v in r.views.items() if v.error)
    # every `added` is a committed claim of one run, which the claim makes unique: more than the
    # runs made means both hosts committed the same runs, i.e. one's commit overwrote the other's
    added = [c.added for c in r.commands if c.added is not None]
    r.claimed_twice = max(0, sum(added) - len(uids)) if len(added) == len(r.commands) else 0


def one_round(n_round: int, args: argparse.Namespace, path_env: str, work: Path) -> Round:
    rel = Path(PROJECT) / f"round-{n_round:02d}"
    project_a, project_b = args.a / rel, args.b / rel
    if project_a.exists():
        shutil.rmtree(project_a)
    (project_a / "runs").mkdir(parents=True)
    uids = make_results(project_a / "runs", args.files, n_round)
    r = Round(n_round, len(uids))
    deadline = time.monotonic() + 10  # B sees the new tree (it should at once: FUSE lookups are fresh)
    while not (project_b / "runs").is_dir() and time.monotonic() < deadline:
        time.sleep(0.1)
    env = command_env(path_env)
    if not args.race_create:
        r.error = precreate(args.python, project_a, env, args.timeout)
        if r.error:
            return r
    logs = work / f"round-{n_round:02d}"
    logs.mkdir(parents=True, exist_ok=True)
    batch = ["--batch", str(args.batch)] if args.batch else []
    # --split: each login node collects its own sweep (runs/<sweep>), so every commit adds rows
    # no other commit adds, and a commit overwritten by the other host's shows as runs lost
    extra = [batch + ([f"--runs=runs/r{n_round:02d}-sweep-{i}"] if args.split else []) for i in (0, 1)]
    stalled: list[str] = []
    during = shared_fs_stall.stall(args.stall, stalled, args.stall_at) if args.stall else None
    first = [str(Path(shared_fs_stall.__file__).resolve()), args.stall_at] if args.stall else []
    r.commands = race(args.python, [project_a, project_b], ["loginA", "loginB"], env, args.timeout, logs, extra,
                      during=during, first=first)
    r.stalled = "; ".join(stalled + ([shared_fs_stall.fence_said(r.commands[0].said)] if args.stall else []))
    projects = {"A": project_a, "B": project_b}
    if args.brick:
        projects["srv"] = args.brick / rel
    check_db(projects, uids, work, r)
    if not args.keep:
        shutil.rmtree(project_a, ignore_errors=True)
    return r


# --- the report -------------------------------------------------------------------------------

HEAD = f"{'round':>5} {'files':>5} {'landed A/B/srv':>15} {'lost':>5} {'dup':>4} {'2x':>4} {'rcA':>6} {'rcB':>6} " \
       f"{'journal':>8} {'A=B':>4} {'wal':>4}  integrity_check"


def row(r: Round) -> str:
    rc = [c.status for c in r.commands] + ["-", "-"]
    same = "-" if r.same_bytes is None else ("yes" if r.same_bytes else "NO")
    landed = "/".join(str(r.views[k].landed) if k in r.views else "-" for k in ("A", "B", "srv"))
    text = f"{r.n:>5} {r.made:>5} {landed:>15} {r.lost:>5} {r.duplicated:>4} {r.claimed_twice:>4} {rc[0]:>6} " \
           f"{rc[1]:>6} {r.journal or '?':>8} {same:>4} {'left' if r.wal_left else '-':>4}  {r.integrity or '?'}"
    other = [f"{k}: {v.integrity}" for k, v in r.views.items() if v.integrity != r.integrity]
    return text + (f" ({', '.join(other)})" if other else "") + (f"  [{r.error}]" if r.error else "")


def parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The benchmark's arguments, checked (the mounts must be two views of one volume)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", nargs="?", type=Path, default=SCRATCH / "hostA", help="mount A (default: %(default)s)")
    ap.add_argument("b", nargs="?", type=Path, default=SCRATCH / "hostB", help="mount B (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--files", type=int, default=150, help="result files per round")
    ap.add_argument("--batch", type=int, default=None, help="collect --batch N (default: collect's own)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per command before it is killed")
    ap.add_argument("--max-minutes", type=float, default=30, help="no round starts after this")
    ap.add_argument("--split", action="store_true",
                    help="loginA collects sweep 0 only, loginB sweep 1 only (default: both collect all)")
    ap.add_argument("--race-create", action="store_true",
                    help="no results.db beforehand: the two collectors make it at once")
    ap.add_argument("--python", default=str(PYTHON if PYTHON.exists() else sys.executable))
    ap.add_argument("--brick", type=Path, default=None,
                    help="the volume's folder on the server (GlusterFS brick), read as the server's truth "
                         "(default: $SHAREDFS_TEST_DIR/brick with the default mounts, if it exists; 'none': no)")
    ap.add_argument("--keep", action="store_true", help="keep each round's project on the volume")
    ap.add_argument("--stall", type=float, default=0, metavar="S",
                    help="loginA stops itself (SIGSTOP) at its first write commit, for S seconds, in every round; "
                         "past the lease's stale time (sqlite_lease.LEASE_STALE_S) loginB breaks the lease")
    ap.add_argument("--stall-at", choices=("commit", "fenced"), default="commit",
                    help="commit: before its fence (which must then fire: LeaseLost); fenced: after it passed "
                         "(the gap SQLite's shared POSIX locks cover on GlusterFS) (shared_fs_stall.py)")
    ap.add_argument("--quiet", action="store_true", help="no command lines per round")
    args = ap.parse_args(argv)
    if not 1 <= args.rounds <= 1000 or not 1 <= args.files <= 100_000:
        ap.error("--rounds 1..1000, --files 1..100000")
    for d in (args.a, args.b):
        if not d.is_dir():
            ap.error(f"{d} is not a directory (scripts/sharedfs.sh start makes the two mounts)")
    check_shared(args.a, args.b)
    if args.brick is None and (args.a, args.b) == (SCRATCH / "hostA", SCRATCH / "hostB") and (SCRATCH / "brick").is_dir():
        args.brick = SCRATCH / "brick"
    elif args.brick is not None and str(args.brick) == "none":
        args.brick = None
    return args


def header(args: argparse.Namespace) -> str:
    """What is measured, printed before the rounds; the file system's type."""
    point_a, fstype, source = mount_of(args.a)
    point_b = mount_of(args.b)[0]
    print(f"file system: {fstype} ({source}), statfs magic {statfs_magic(args.a)}; A = {args.a} (mount {point_a}), "
          f"B = {args.b} (mount {point_b})")
    print(f"orchestrator: {ROOT} (PYTHONPATH), {args.python}; {args.rounds} rounds x {args.files} result files, "
          f"two `collect` at once (loginA on A, loginB on B{', each its own sweep' if args.split else ', all files each'}){', results.db made by them' if args.race_create else ''}")
    print(f"server's view: {args.brick or '(none: lost/integrity from A)'}")
    print("columns: landed as read through A, through B, and on the server; lost = made but not landed (server); dup = a run uid stored twice; 2x = runs both collectors said they "
          "added (one host's commit overwrote the other's); A=B: mounts read the same bytes; wal: a -wal file left")
    print(HEAD, flush=True)
    return fstype


def rounds(args: argparse.Namespace, started: float) -> list[Round]:
    """The rounds, each printed as it ends, until --rounds or --max-minutes."""
    totals: list[Round] = []
    with tempfile.TemporaryDirectory(prefix="shared_fs.") as tmp:
        work = Path(tmp)
        path_env = silent_slurm(work / "bin")
        for n in range(1, args.rounds + 1):
            if time.monotonic() - started > 60 * args.max_minutes:
                print(f"(stopped after {n - 1} rounds: --max-minutes {args.max_minutes:g})")
                break
            t = time.monotonic()
            r = one_round(n, args, path_env, work)
            totals.append(r)
            print(row(r) + f"  ({time.monotonic() - t:.1f} s)", flush=True)
            if r.stalled:
                print(f"        {r.stalled}", flush=True)
            if not args.quiet:
                for c in r.commands:
                    print("        " + c.line(), flush=True)
    if not args.keep:
        shutil.rmtree(args.a / PROJECT, ignore_errors=True)
    return totals


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse(argv)
    fstype = header(args)
    started = time.monotonic()
    totals = rounds(args, started)
    made = sum(r.made for r in totals)
    journals = sorted({r.journal for r in totals if r.journal})
    failed = sum(1 for r in totals for c in r.commands if c.rc != 0)
    print(f"\ntotals on {fstype}, journal mode {'/'.join(journals) or '?'}: {len(totals)} rounds, {made} files made, "
          f"{sum(r.landed for r in totals)} landed, {sum(r.lost for r in totals)} lost "
          f"(in {sum(1 for r in totals if r.lost)} rounds), {sum(r.duplicated for r in totals)} duplicated, "
          f"{sum(r.claimed_twice for r in totals)} claimed twice, "
          f"{sum(1 for r in totals if r.integrity != 'ok')} rounds failing integrity_check, "
          f"{failed} of {2 * len(totals)} commands exited non-zero, "
          f"{sum(1 for r in totals if r.same_bytes is False)} rounds where A and B read different bytes; "
          f"{time.monotonic() - started:.0f} s")
    return 1 if any(r.bad for r in totals) else 0

if __name__ == "__main__":
    sys.exit(main())
