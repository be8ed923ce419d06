"""The read side at scale: collect, status, results and --help (issue 13, items 3, 4 and 6).

Measures, on this machine, with the orchestrator as it is checked out:

- `collect` of N fresh result files (many cells over few sweeps, as jobs leave them after the
  launcher recorded the sweep), in ms per file, at 1,000 and 10,000 files;
- `status`, `results`, `results --summary` and `results --csv` as a user types them (a new
  process each, wall time) on a database of 100,000 runs (1,000 still open on a Slurm that
  does not answer here, failures of several classes, retried repeats);
- `orchestrator --help` and `orchestrator status --help`.

Commands run with Python's bytecode cache (the environment's PYTHONDONTWRITEBYTECODE lifted, the
cache kept outside the source tree), each once before it is timed, as an installed orchestrator
runs; each figure gives the wall time and the CPU time (user + system), which other work on a
shared machine inflates less. The machine's load is printed first.

Not a test: its figures go into docs/scale.md. A module, so that `benchmarks/scale.py` may
import the measurements (one function each) and the table printer.

    .venv/bin/python benchmarks/scale_read.py [--collect 1000,10000] [--runs 100000] [--repeat 5]
                                              [--only collect,status,results,help] [--keep DIR] [--db URL]

With `--db URL` (a database server's URL whose role may CREATE DATABASE, such as
`scripts/postgres.sh url` prints) the measurements run on databases made there instead of SQLite
files: `scale_collect_<n>` for each collect (made afresh, dropped after) and `scale_runs_<n>_<revision>` for
status and results (kept, and reused if it is there, as --keep's big.db is); `--db-prefix P` names them
`P_collect_<n>` and `P_runs_<n>_<revision>` instead.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Iterator, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the orchestrator, and the tests' result_factory

from result_factory import T0, make_provenance, make_result, make_settings, write_result  # noqa: E402

from orchestrator.store import db, kept_lines, result_rows, schema  # noqa: E402
from orchestrator.sweep.cell import cell_id  # noqa: E402
from orchestrator.results.resultfile import CELL_COLUMNS  # noqa: E402
from sqlalchemy import create_engine, inspect  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

FRAMEWORKS = ("torch", "tensorflow", "mxnet", "caffe", "cntk", "numpy")
MODELS = ("lenet", "alexnet", "resnet50", "googlenet", "vgg16")
FAILURES = (("out_of_memory", "CUDA out of memory. Tried to allocate 2.00 GiB"),
            ("timeout", "slurm ended job 1234_5 as TIMEOUT (time limit 60 min)"),
            ("crash", "Segmentation fault in the data reader"),
            ("diverged", "loss is nan at step 12"))


@dataclass
class Row:
    """One line of the table: what was measured, the figure, and how."""

    what: str
    figure: str
    how: str = ""


def print_table(rows: Iterable[Row], out: Any = None) -> None:
    """The rows as a Markdown table (what docs/scale.md carries)."""
    rows = list(rows)
    out = out or sys.stdout
    widths = [max(len(h), *(len(getattr(r, f)) for r in rows)) if rows else len(h)
              for h, f in (("what", "what"), ("measured", "figure"), ("how", "how"))]
    line = "| " + " | ".join(f"{{:{w}}}" for w in widths) + " |"
    print(line.format("what", "measured", "how"), file=out)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|", file=out)
    for r in rows:
        print(line.format(r.what, r.figure, r.how), file=out)


# --- what the measurements run on ---------------------------------------------------------------

def settings_of(i: int) -> dict[str, Any]:
    """The benchmark settings of the i-th cell: few configurations, many seeds (a seed sweep)."""
    return make_settings(framework=FRAMEWORKS[i % len(FRAMEWORKS)], model=MODELS[i // 7 % len(MODELS)],
                         hardware=("cpu12", "p100")[i // 3 % 2], seed=i)


def write_results(runs: Path, n: int, sweeps: int = 2) -> list[dict[str, Any]]:
    """`n` result files of `n` cells over `sweeps` sweeps, one in ten a failure, as jobs write them."""
    results = []
    for i in range(n):
        state = "failed" if i % 10 == 9 else "done"
        result = make_result(sweep=f"sweep-{i % sweeps}", state=state, **settings_of(i))
        write_result(runs, result)
        results.append(result)
    return results


def bulk_insert(con: sqlite3.Connection, table: str, rows: Sequence[dict[str, Any]]) -> None:
    """Rows (dicts with the same keys) into `table` with one executemany; JSON values as text."""
    if not rows:
        return
    keys = list(rows[0])
    con.executemany(
        f"INSERT INTO {table} ({', '.join(f'{chr(34)}{k}{chr(34)}' for k in keys)}) "
        f"VALUES ({', '.join('?' for _ in keys)})",
        ([json.dumps(v) if isinstance(v, (dict, list)) else v for v in (r[k] for k in keys)] for r in rows))


@contextmanager
def bulk(url: str, analyze: bool = False) -> Iterator[tuple[Callable[[str, Sequence[dict[str, Any]]], None],
                                                             Callable[[str], list[Any]]]]:
    """(insert(table, rows), select(sql) -> rows) in one transaction on the database at `url`
    (made already): Python's sqlite3 on a SQLite file, SQLAlchemy Core elsewhere. Like
    bulk_insert, every row gets the columns of the first one. `analyze`: statistics after."""
    path = db.sqlite_path(url)
    if path is not None:
        con = sqlite3.connect(str(path))
        con.execute("PRAGMA synchronous = OFF")
        with con:
            yield (lambda table, rows: bulk_insert(con, table, rows)), (lambda sql: con.execute(sql).fetchall())
        if analyze:
            con.execute("ANALYZE")
        con.close()
        return
    tables = schema.Base.metadata.tables
    engine = create_engine(url)

    def insert(conn: Any, table: str, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            keys = list(rows[0])
            for i in range(0, len(rows), 20_000):
                conn.execute(tables[table].insert(), [{k: r[k] for k in keys} for r in rows[i:i + 20_000]])

    with engine.begin() as conn:
        yield (lambda table, rows: insert(conn, table, rows)), (lambda sql: conn.exec_driver_sql(sql).fetchall())
    if analyze:  # and the visibility map an index-only scan needs (PostgreSQL's VACUUM)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE" if engine.dialect.name == "postgresql" else "ANALYZE")
    engine.dispose()


def server_database(server: str, name: str, fresh: bool = True) -> str:
    """The URL of database `name` on the server of URL `server` (made if missing; made afresh,
    dropping one of that name, if `fresh`)."""
    engine = create_engine(server, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        if fresh:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        exists = conn.exec_driver_sql("SELECT 1 FROM pg_database WHERE datname = %(n)s", {"n": name}).first()
        if not exists:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    engine.dispose()
    return make_url(server).set(database=name).render_as_string(hide_password=False)


def drop_server_database(server: str, url: str) -> None:
    engine = create_engine(server, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')
    engine.dispose()


def cell_row(cid: str, settings: dict[str, Any]) -> dict[str, Any]:
    return {"id": cid, **{k: settings[k] for k in CELL_COLUMNS}, "settings": settings, "created_at": T0}


def sweep_row(sweep: str, cells: Sequence[dict[str, Any]], created_at: float) -> dict[str, Any]:
    """A sweep as the launcher records it: argv, and the overrides of every cell (its big JSON)."""
    overrides = [[f"framework={c['framework']}", f"model={c['model']}", f"hardware={c['hardware']}",
                  f"seed={c['seed']}"] for c in cells]
    return {"id": sweep, "created_at": created_at, "argv": ["python", "-m", "orchestrator", "-m", "seed=range(0,N)"],
            "overrides": overrides, "n_cells": len(cells), "note": None}


def run_row(uid: str, sweep: str, cid: str, repeat: int, attempt: int, state: str, **more: Any) -> dict[str, Any]:
    row = {"uid": uid, "sweep_id": sweep, "cell_id": cid, "repeat": repeat, "attempt": attempt, "state": state,
           "state_detail": None, "job_id": None, "executor": "slurm", "node": None, "submitted_at": T0,
           "started_at": None, "ended_at": None, "collected_at": None, "error_class": None,
           "error_message": None, "run_dir": None, "log_path": None, "result_path": None, "latest": True}
    row.update(more)
    return row


def record_as_launcher(url: str, results: Sequence[dict[str, Any]]) -> None:
    """What the launcher wrote before the jobs ran (each sweep, its cells, their runs), and tracking
    since: each run in its result's state, not yet collected (`collect` reconciles first)."""
    db.open_db(url).kw["bind"].dispose()  # the schema
    by_sweep: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by_sweep.setdefault(r["sweep_id"], []).append(r)
    with bulk(url) as (insert, _):
        insert("sweeps", [sweep_row(s, [r["cell"] for r in rs], T0 + i) for i, (s, rs) in
                          enumerate(sorted(by_sweep.items()))])
        insert("cells", [cell_row(r["cell_id"], r["cell"]) for r in results])
        insert("sweep_cells", [{"sweep_id": r["sweep_id"], "cell_id": r["cell_id"],
                                "config": {"cell": r["cell"], "cluster": {"executor": "slurm"}}} for r in results])
        insert("runs", [run_row(r["run_uid"], r["sweep_id"], r["cell_id"], r["repeat"], r["attempt"],
                                r["state"], job_id=f"1000_{i}") for i, r in enumerate(results)])


def build_runs_db(where: Any, n_runs: int = 100_000, n_cells: int = 96_000, n_open: int = 1_000,
                  sweeps: int = 4, failed_every: int = 20, retried: int = 500) -> dict[str, int]:
    """A database of `n_runs` runs as years of sweeps leave it, written in bulk (seconds, not hours):
    `n_cells` cells over `sweeps` sweeps (the first cells with a second repeat), `n_open` runs still
    submitted, one in `failed_every` failed (several classes, some lost), up to `retried` of those
    failed repeats (one in five) tried again (attempt 2, done); every done run with the 12 metrics of a CPU run.
    `where`: a SQLite file's path, or a database's URL."""
    url = where if isinstance(where, str) else f"sqlite:///{where}"
    db.open_db(url).kw["bind"].dispose()
    metrics = make_result()["metrics"]
    prov = make_provenance(make_settings())
    cells = [settings_of(i) for i in range(n_cells)]
    ids = [cell_id(c) for c in cells]
    sweep_of = [f"sweep-{i % sweeps}" for i in range(n_cells)]
    runs, retry = [], []
    counts = {"runs": 0, "open": 0, "failed": 0, "done": 0}
    for i in range(n_runs):
        c, repeat = i % n_cells, i // n_cells
        sweep, cid = sweep_of[c], ids[c]
        uid = f"{sweep}:{cid}:{repeat}:1"
        run_dir = f"/scratch/runs/{sweep}/{cid}/{repeat}"
        if i < n_open:
            runs.append(run_row(uid, sweep, cid, repeat, 1, "submitted", job_id=f"9000_{i}", run_dir=run_dir))
            counts["open"] += 1
        elif i // sweeps % failed_every == 0:  # in every sweep
            k = i // sweeps // failed_every
            klass, message = FAILURES[k % len(FAILURES)]
            lost = k % 7 == 3
            runs.append(run_row(uid, sweep, cid, repeat, 1, "lost" if lost else "failed", job_id=f"9001_{i}",
                                error_class="lost" if lost else klass,
                                error_message="job ended without writing result.json" if lost else message,
                                run_dir=run_dir, log_path=f"{run_dir}/trainer.log", ended_at=T0 + 100))
            counts["failed"] += 1
            if len(retry) < retried and counts["failed"] % 5 == 0:
                retry.append((sweep, cid, repeat))
        else:
            runs.append(run_row(uid, sweep, cid, repeat, 1, "done", job_id=f"9002_{i}", node="node01",
                                started_at=T0, ended_at=T0 + 100, collected_at=T0 + 200, run_dir=run_dir,
                                log_path=f"{run_dir}/trainer.log", result_path=f"{run_dir}/result.json",
                                params=61706, framework_version="2.3.1", provenance=prov,
                                cpu_model=prov["cpu"]["model"], git_revision=prov["git"]["revision"]))
            counts["done"] += 1
    retried_keys = {(cid, repeat) for _, cid, repeat in retry}
    for row in runs:  # as schema.mark_latest leaves them: an attempt followed by another is not the latest
        row["latest"] = (row["cell_id"], row["repeat"]) not in retried_keys
    for sweep, cid, repeat in retry:
        runs.append(run_row(f"{sweep}:{cid}:{repeat}:2", sweep, cid, repeat, 2, "done", job_id="9003",
                            collected_at=T0 + 300, started_at=T0, ended_at=T0 + 100))
    counts["runs"] = len(runs)
    with bulk(url, analyze=True) as (insert, select):
        insert("sweeps", [sweep_row(f"sweep-{s}", cells[s::sweeps], T0 + s) for s in range(sweeps)])
        insert("cells", [cell_row(cid, c) for cid, c in zip(ids, cells)])
        insert("sweep_cells", [{"sweep_id": s, "cell_id": cid, "config": None} for s, cid in zip(sweep_of, ids)])
        insert("runs", runs)
        done = select("SELECT id FROM runs WHERE state = 'done'")
        for start in range(0, len(done), 50_000):  # in parts: a million runs' metrics never all in memory
            insert("metrics", [{"run_id": run_id, "name": k, "value": v * (1.0 + (run_id % 97) / 1000.0), "unit": None}
                               for (run_id,) in done[start:start + 50_000] for k, v in metrics.items()])
    keep_summary(url)
    counts["cells"] = n_cells
    return counts


def keep_summary(url: str) -> None:
    """The kept per-cell summary (kept_summary), per-run metrics (kept_metrics) and CSV texts
    (kept_lines) of rows written in bulk, as `collect` keeps them when it lands them
    (result_rows.refresh_summary, keep_metrics), in one pass: without its kept_lines row (nor a
    kept_lines_due row, as a launch leaves) a run is not in `results --csv`."""
    engine = create_engine(url)
    with engine.begin() as conn:
        result_rows.rebuild_summary(conn)
        result_rows.rebuild_metrics(conn)
        kept_lines.rebuild(conn)
    engine.dispose()


def silent_slurm(bin_dir: Path) -> dict[str, str]:
    """An environment whose `sacct` and `squeue` fail at once: Slurm does not answer, open runs
    keep their states (and the measurement does not depend on a cluster)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("sacct", "squeue", "sinfo", "scontrol"):
        script = bin_dir / name
        script.write_text("#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n")
        script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


# --- the measurements ---------------------------------------------------------------------------

def measure_collect(n: int, workdir: Path, recorded: bool = True, url: Optional[str] = None) -> dict[str, float]:
    """One collection of `n` fresh result files (the launcher's rows there first, if `recorded`),
    then a second one that finds them all landed; seconds and ms per file. `url`: a new, empty
    database to collect into (a SQLite file in `workdir` by default)."""
    from orchestrator.results.collector import collect

    runs, url = workdir / "runs", url or f"sqlite:///{workdir / 'results.db'}"
    results = write_results(runs, n)
    if recorded:
        record_as_launcher(url, results)
    factory = db.open_db(url)
    t, cpu = time.perf_counter(), time.process_time()
    report = collect(factory, runs)
    first, cpu = time.perf_counter() - t, time.process_time() - cpu
    t = time.perf_counter()
    again = collect(factory, runs)
    second = time.perf_counter() - t
    factory.kw["bind"].dispose()
    if report.added != n or again.already != n:
        raise SystemExit(f"collect of {n}: {report} then {again}; expected {n} added, then {n} already")
    return {"n": n, "seconds": first, "ms_per_file": 1000 * first / n, "cpu_ms_per_file": 1000 * cpu / n,
            "again_seconds": second}


def command_env(env: Optional[dict[str, str]] = None) -> dict[str, str]:
    """The environment a command runs in: this one's, with Python's bytecode cache as a user has
    it (kept under the work directory's pycache, not in the source tree), and `env`."""
    out = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "scale_read.pycache")
    return {**out, **(env or {})}


#: What the commands import, compiled into the bytecode cache before anything is timed.
WARM = ("orchestrator.__main__", "orchestrator.cli", "orchestrator.store.db", "orchestrator.launch.tracking",
        "orchestrator.results.collector", "orchestrator.backends.slurm", "rich.console", "rich.table", "sqlalchemy.orm")


def warm_cache() -> None:
    """Fills the bytecode cache with what the commands import (an installed orchestrator has it)."""
    subprocess.run([sys.executable, "-c", "; ".join(f"import {m}" for m in WARM)], env=command_env(), check=True)


def time_command(argv: Sequence[str], env: Optional[dict[str, str]] = None, cwd: Optional[Path] = None,
                 repeat: int = 5) -> dict[str, float]:
    """A command's wall time, a new process each time (as a user types it): median and best; its
    CPU time (user + system, median), which other work on the machine inflates less than the wall
    time; its peak resident memory (MB, the largest); and how many lines it printed."""
    times, cpu, rss = [], [], []
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        for _ in range(repeat):
            out.seek(0), out.truncate(), err.seek(0), err.truncate()
            # through a small process of its own, so that its peak memory is its own, not this one's
            proc = subprocess.Popen([sys.executable, "-c", _USAGE, *argv], env=command_env(env), cwd=cwd,
                                    stdout=out, stderr=err)
            proc.wait()
            err.seek(0)
            stderr, _, usage = err.read().decode(errors="replace").rpartition("\nusage ")
            if proc.returncode not in (0, 1) or "Traceback" in stderr or not usage:
                raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {stderr[-2000:]}")
            wall, seconds, kb = usage.split()
            times.append(float(wall))
            cpu.append(float(seconds))
            rss.append(int(kb) / 1024)
        out.seek(0)
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: out.read(1 << 20), b""))
    return {"median": statistics.median(times), "best": min(times), "cpu": statistics.median(cpu),
            "rss_mb": max(rss), "lines": lines}


#: Runs argv[1:] and writes its wall and CPU seconds and peak resident KB as stderr's last line.
_USAGE = """import os, subprocess, sys, time
t = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(proc.pid, 0)
wall = time.perf_counter() - t
sys.stderr.write(f"\\nusage {wall} {usage.ru_utime + usage.ru_stime} {usage.ru_maxrss}\\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def orchestrator_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


def measure_reads(where: Any, repeat: int, workdir: Path,
                  only: Collection[str] = ("status", "results")) -> dict[str, dict[str, float]]:
    """status, results, results --summary and results --csv (those whose first word is in `only`)
    on the database at `where` (a SQLite file's path, or a database's URL)."""
    url = where if isinstance(where, str) else f"sqlite:///{where}"
    env = {"ORCHESTRATOR_DB": url, "COLUMNS": "160", **silent_slurm(workdir / "bin")}
    warm_cache()
    out = {}
    for name, args in (("status", ("status",)), ("results", ("results",)), ("results --summary", ("results", "--summary")),
                       ("results --csv", ("results", "--csv"))):
        if args[0] in only:
            out[name] = time_command(orchestrator_argv(*args), env, workdir, repeat)
    return out


def measure_help(repeat: int) -> dict[str, dict[str, float]]:
    """`orchestrator --help` and `orchestrator status --help`: the CLI's start."""
    warm_cache()
    return {name: time_command(orchestrator_argv(*args), repeat=repeat)
            for name, args in (("--help", ("--help",)), ("status --help", ("status", "--help")))}


# --- the table ----------------------------------------------------------------------------------

def read_rows(only: set[str], work: Path, collect: Sequence[int] = (1_000, 10_000), runs: int = 100_000,
              repeat: int = 5, server: Optional[str] = None, prefix: str = "scale") -> list[Row]:
    """The table's rows for the measurements named in `only` (collect, status, results, help),
    working under `work` (the 100,000-run database is kept there and reused if present); on
    databases made on the server of URL `server` instead of SQLite files, if given (named from
    `prefix`: two people measuring on one server keep to their own)."""
    rows: list[Row] = []
    on = f" ({make_url(server).get_backend_name()})" if server else ""
    for n in collect if "collect" in only else ():
        url = server_database(server, f"{prefix}_collect_{n}") if server else None
        try:
            m = measure_collect(n, work / f"collect-{n}", url=url)
        finally:
            if url:
                drop_server_database(server, url)
        rows.append(Row(f"collect {n:,} results{on}", f"{m['seconds']:.2f} s, {m['ms_per_file']:.2f} ms/file "
                        f"({m['cpu_ms_per_file']:.2f} ms CPU)",
                        f"first collect, in-process, of files the launcher recorded; again: "
                        f"{m['again_seconds']:.2f} s"))
        shutil.rmtree(work / f"collect-{n}", ignore_errors=True)
    if only & {"status", "results"}:
        if server:
            # named for the schema's revision too: a database another checkout built (and would
            # upgrade, or refuse as newer) is never shared with this one
            path: Any = server_database(server, f"{prefix}_runs_{runs}_{db.SCHEMA_VERSION}", fresh=False)
            missing = not _count(path, "runs")
        else:
            path = work / "big.db"
            missing = not path.exists()
        if missing:
            t = time.perf_counter()
            counts = build_runs_db(path, n_runs=runs, n_cells=runs * 24 // 25, n_open=max(1, runs // 100))
            print(f"built {path}: {counts} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        for name, m in measure_reads(path, repeat, work, only).items():
            if name.split()[0] in only:
                rows.append(Row(f"`{name}` over {runs:,} runs{on}", f"{m['median']:.2f} s ({m['cpu']:.2f} s CPU)",
                                f"wall, new process, median of {repeat} (best {m['best']:.2f} s); "
                                f"{m['lines']:,} lines; peak {m['rss_mb']:,.0f} MB"))
    if "help" in only:
        for name, m in measure_help(repeat * 2).items():
            rows.append(Row(f"`orchestrator {name}`", f"{m['median']:.2f} s ({m['cpu']:.2f} s CPU)",
                            f"wall, new process, median of {repeat * 2} (best {m['best']:.2f} s)"))
    return rows


def _count(url: str, table: str) -> int:
    """Rows in `table` (0 where there is no such table)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table(table):
                return 0
            return int(conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar() or 0)
    finally:
        engine.dispose()


def db_prefix(text: str) -> str:
    """A prefix of database names as typed, if it is letters, digits and `_` (it is written into CREATE DATABASE)."""
    if not text.replace("_", "").isalnum() or not text.isascii():
        raise argparse.ArgumentTypeError(f"{text!r}: letters, digits and _ only (e.g. scale_{os.getpid()})")
    return text


def add_read_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--collect", default="1000,10000", help="file counts for collect (comma-separated)")
    ap.add_argument("--runs", type=int, default=100_000, help="runs in the database status and results read")
    ap.add_argument("--repeat", type=int, default=5, help="wall times per command (the median is shown)")
    ap.add_argument("--db", metavar="URL", help="a database server (e.g. `scripts/postgres.sh url`) to measure "
                    "collect, status and results on, in databases made there, instead of SQLite files")
    ap.add_argument("--db-prefix", default="scale", type=db_prefix,
                    help="the start of those databases' names (yours alone on a shared server: "
                    "PREFIX_runs_N_REVISION is kept and reused, PREFIX_collect_N made afresh)")


def rows_from_arguments(only: set[str], work: Path, args: argparse.Namespace) -> list[Row]:
    return read_rows(only, work, [int(x) for x in args.collect.split(",") if x], args.runs, args.repeat,
                     getattr(args, "db", None), getattr(args, "db_prefix", "scale"))


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_read_arguments(ap)
    ap.add_argument("--only", default="collect,status,results,help", help="which measurements")
    ap.add_argument("--keep", type=Path, help="work here and keep it (default: a temporary directory)")
    args = ap.parse_args(argv)
    return print_measured(args.keep, "scale_read.", lambda work: rows_from_arguments(set(args.only.split(",")), work, args))


def print_measured(keep: Optional[Path], prefix: str, measure: Callable[[Path], list[Row]]) -> int:
    """Runs `measure` in a work directory (`keep`, else a temporary one, removed after) and
    prints its rows as the table, with the machine's load before and after."""
    work = keep or Path(tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    print(f"working in {work} ({os.cpu_count()} CPUs, load {load:.2f})", file=sys.stderr)
    try:
        rows = measure(work)
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print_table(rows)
    print(f"\nload average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end, on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
