"""What `orchestrator report` and `compare` cost on a big results database (issue 14: a report over
100,000 runs in seconds).

Makes a database the way a site's nightly checks leave one after a season: the study's matrix
(conf/preset/study.yaml: 9 network × dataset cases × 5 frameworks × 6 hardware configurations,
the 54 a K20m cannot hold refused: 216 cells), run by as many sweeps as make `--runs` runs, each
measuring every cell again (`force=true`: attempt n+1 of each of 3 repeats), with GPU metrics,
a few failures, and the refusals each sweep records. `--variants 10` makes the matrix ten times
wider (5 batch sizes × 2 precisions: 2,160 cells, fewer sweeps). Then it times, as a user types them,

    orchestrator report --out DIR                  # every sweep: the latest attempt of every repeat
    orchestrator report --sweep latest --out DIR
    orchestrator compare --base <first sweep> --new latest

Rows are written with plain SQL (executemany) into a database the orchestrator made (open_db),
so the schema, views and indexes are the real ones. Not a test: the figure goes into docs/reports.md
("Speed").

    .venv/bin/python benchmarks/report_scale.py [--runs 100000] [--variants 1] [--keep DIR]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from orchestrator.store import db  # noqa: E402
from orchestrator.sweep.cell import SETTINGS, cell_id  # noqa: E402

CASES = [("lenet", "mnist")] + [(m, d) for m in ("alexnet", "resnet50", "googlenet", "vgg16") for d in ("cifar10", "imagenet")]
FRAMEWORKS = ("caffe", "tensorflow", "torch", "mxnet", "cntk")
HARDWARE = (("cpu12", 0, 12), ("cpu20", 0, 20), ("k20m", 1, 16), ("k20m", 2, 16), ("p100", 1, 16), ("p100", 2, 16))
REPEATS = 3


def matrix(variants: int) -> tuple[list[dict], list[dict]]:
    """(placed cells, refused cells) of the study at `variants` batch size × precision variants."""
    batches = [16, 32, 64, 128, 256]
    precisions = ["fp32", "fp16"]
    placed, refused = [], []
    for (model, dataset), framework, (hardware, gpus, cpus), (batch, precision) in itertools.product(
            CASES, FRAMEWORKS, HARDWARE, list(itertools.product(batches, precisions))[:variants]):
        settings = {"framework": framework, "model": model, "dataset": dataset, "like": None, "hardware": hardware,
                    "gpus": gpus, "threads": cpus, "batch_size": batch, "scaling": "strong", "iterations": 50,
                    "warmup": 10, "seed": 0, "precision": precision}
        (refused if hardware == "k20m" and framework in ("tensorflow", "torch", "mxnet") else placed).append(settings)
    return placed, refused


def build(path: Path, runs_wanted: int, variants: int) -> tuple[int, list[str]]:
    db.open_db(f"sqlite:///{path}").kw["bind"].dispose()  # the real schema, views and indexes
    placed, refused = matrix(variants)
    sweeps = max(1, round(runs_wanted / (len(placed) * REPEATS)))
    rng = random.Random(0)
    con = sqlite3.connect(path)
    now = time.time() - sweeps * 86400
    con.executemany("insert into cells (id, framework, model, dataset, like, hardware, gpus, threads, batch_size, "
                    "scaling, iterations, warmup, seed, precision, settings, created_at) values "
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(cell_id(s), *(s[k] for k in SETTINGS), json.dumps(s), now) for s in placed])
    base = {cell_id(s): rng.lognormvariate(6, 1.5) for s in placed}
    run_id, sweep_ids = 0, []
    for n in range(sweeps):
        sweep = f"2026{n:04d}-000000-bench"
        sweep_ids.append(sweep)
        created = now + n * 86400
        argv = ["python", "-m", "orchestrator", "-m", "+preset=study", "cluster=slurm", "repeats=3", "force=true"]
        con.execute("insert into sweeps (id, created_at, argv, overrides, n_cells) values (?, ?, ?, ?, ?)",
                    (sweep, created, json.dumps(argv), "[]", len(placed)))
        con.executemany("insert into sweep_cells (sweep_id, cell_id) values (?, ?)",
                        [(sweep, cell_id(s)) for s in placed])
        con.executemany("insert into refusals (sweep_id, overrides, reason, framework, model, dataset, hardware, gpus, "
                        "threads, batch_size, precision, settings) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [(sweep, "+preset=study", (f"{s['framework']} does not support hardware=k20m (compute "
                                                   f"capability 3.5)"), *(s[k] for k in ("framework", "model", "dataset", "hardware", "gpus",
                                                                 "threads", "batch_size", "precision")), json.dumps(s))
                         for s in refused])
        runs, metrics = [], []
        for s in placed:
            cid = cell_id(s)
            for repeat in range(REPEATS):
                run_id += 1
                failed = rng.random() < 0.03
                runs.append((run_id, f"{sweep}:{cid}:{repeat}:{n + 1}", sweep, cid, repeat, n + 1,
                             "failed" if failed else "done", "out_of_memory" if failed else None,
                             "CUDA out of memory" if failed else None, "node01", 431080, "Intel Xeon E5-2680 v4", 14,
                             "Tesla P100-PCIE-16GB" if s["gpus"] else None, "535.104.05", "12.2", "2.3.1",
                             "sif:sha256:0123456789abcdef", "3cdf11e73d766c93dda53b805eca374ce2407de7", 0,
                             created + repeat, created + repeat + 60))
                if failed:
                    continue
                speed = base[cid] * rng.gauss(1, 0.03)
                values = {"images_per_sec": speed, "images_per_sec_std": speed * 0.02, "cpu_percent_avg": 150.0,
                          "rss_peak_bytes": 3e9, "host_cpu_percent_avg": 40.0}
                if s["gpus"]:
                    power = 180.0 * s["gpus"] * rng.gauss(1, 0.02)
                    values |= {"gpu_mem_peak_bytes": 9e9, "gpu_proc_mem_peak_bytes": 8e9, "gpu_power_avg_w": power,
                               "gpu_idle_power_w": 30.0 * s["gpus"], "energy_j": power * 60,
                               "energy_per_image_j": power / speed, "energy_net_per_image_j": (power - 30 * s["gpus"]) / speed,
                               "images_per_sec_per_w": speed / power}
                metrics += [(run_id, name, value) for name, value in values.items()]
        con.executemany("insert into runs (id, uid, sweep_id, cell_id, repeat, attempt, state, error_class, "
                        "error_message, node, params, cpu_model, cpu_cores, gpu_name, gpu_driver, cuda_driver, "
                        "framework_version, environment, git_revision, git_dirty, started_at, ended_at) values "
                        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", runs)
        con.executemany("insert into metrics (run_id, name, value) values (?, ?, ?)", metrics)
    con.commit()
    con.close()
    return run_id, sweep_ids


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, CPU seconds of the command and its figure workers, the finished command)."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "orchestrator", *argv], env=env, cwd=str(REPO),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000, help="about this many runs (default 100,000)")
    parser.add_argument("--variants", type=int, default=1, choices=range(1, 11), metavar="1..10",
                        help="batch size × precision variants of each study cell (default 1: the study's 216 cells)")
    parser.add_argument("--keep", type=Path, help="build the database and the reports here, and keep them")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="report-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    path = work / "results.db"
    if path.exists():
        path.unlink()
    start = time.perf_counter()
    runs, sweeps = build(path, args.runs, args.variants)
    con = sqlite3.connect(path)
    metrics = con.execute("select count(*) from metrics").fetchone()[0]
    con.close()
    print(f"database: {runs:,} runs, {metrics:,} metric rows, {len(sweeps)} sweeps of {runs // len(sweeps) // REPEATS:,} "
          f"cells, "
          f"{path.stat().st_size / 1e6:.0f} MB (built in {time.perf_counter() - start:.0f} s)")
    env = dict(os.environ, ORCHESTRATOR_DB=f"sqlite:///{path}", COLUMNS="200")
    for label, argv in (("report, every sweep", ["report", "--out", str(work / "all")]),
                        ("report --sweep latest", ["report", "--sweep", "latest", "--out", str(work / "latest")]),
                        ("compare first sweep vs latest", ["compare", "--base", sweeps[0], "--new", "latest"])):
        wall, cpu, done = timed(argv, env)
        if done.returncode not in (0, 1):
            print(done.stdout[-2000:], done.stderr[-2000:])
            return 1
        print(f"{label}: {wall:.1f} s ({cpu:.1f} s CPU; exit {done.returncode}): "
              f"{done.stdout.strip().splitlines()[0][:100]}")
    print(f"(this machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})")
    if not args.keep:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
