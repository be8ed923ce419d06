"""What the container costs the measurement: each trainer in its image (runtime=container, ch-run)
and in its venv (runtime=venv), alternating.

For each framework and model, `--pairs` pairs of runs, in ABBA order (container first in even
pairs, venv first in odd ones) so that drift of the machine hits both alike; each run is the
trainer's command exactly as a job builds it (`runtime.command`), its images/s the trainer's own
timing over the measured steps. Prints per framework × model the median images/s of each, their
CVs and the ratio container ÷ venv (1.0 = no cost), and the images' build time and size from
their manifests. Not a test: the figures go into docs/containers.md ("Measured").

    .venv/bin/python benchmarks/container_overhead.py [--frameworks torch,cntk] [--models lenet,resnet50]
        [--pairs 3] [--iterations 100] [--threads 2] [--together] [--json out.json]

`--together` runs each pair's two at the same time, one on each CPU (swapped every other pair,
`--threads 1`): a machine whose speed drifts within minutes (a shared VM) then slows both alike,
and the pair's ratio keeps only what differs between them.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.job import metrics  # noqa: E402
from orchestrator.job.run import trainer_args  # noqa: E402
from orchestrator.job.job_result import read_events  # noqa: E402
from orchestrator.envs.runtime import ContainerRuntime  # noqa: E402
from orchestrator.envs.venv_runtime import REPO, VenvRuntime  # noqa: E402

#: model: (batch size, iterations, warm-up, the dataset whose shape it takes), small enough for a 2-core CPU
MODELS = {"lenet": (64, 100, 10, "mnist"), "resnet50": (4, 10, 3, "imagenet")}


def start_run(runtime, settings: dict, workdir: Path, cpu: Optional[int] = None) -> tuple:
    """One trainer run as a job runs it, started (on CPU `cpu` alone, if given): what finish_run takes."""
    run_dir = workdir / f"run-{time.monotonic_ns()}"
    run_dir.mkdir()
    argv, env = runtime.command(trainer_args(settings, None), run_dir=str(run_dir))
    env = {**os.environ, **env}
    events, log = run_dir.parent / f"{run_dir.name}.events", run_dir.parent / f"{run_dir.name}.log"
    with open(events, "wb") as out, open(log, "wb") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=str(REPO), stdin=subprocess.DEVNULL,
                                preexec_fn=None if cpu is None else lambda: os.sched_setaffinity(0, {cpu}))
    return runtime, settings, proc, events, log


def finish_run(started: tuple) -> float:
    """The started run's images/s, once it ends."""
    runtime, settings, proc, events, log = started
    if proc.wait() != 0:
        raise SystemExit(f"{runtime.kind} {settings['model']} failed ({proc.returncode}): {log.read_text()[-2000:]}")
    return metrics.compute(read_events(events)[0], [])["images_per_sec"]


def one_run(runtime, settings: dict, workdir: Path) -> float:
    """One trainer run as a job runs it; its images/s."""
    return finish_run(start_run(runtime, settings, workdir))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frameworks", default="torch,cntk")
    ap.add_argument("--models", default="lenet,resnet50")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=None, help="measured steps (default: per model)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", help="write every run's images/s and the summary here")
    ap.add_argument("--together", action="store_true",
                    help="run each pair's two at once, each on a CPU of its own (swapped every other pair), "
                         "so that whatever else loads the machine loads both alike (needs 2 CPUs, --threads 1)")
    args = ap.parse_args()
    report = {"threads": args.threads, "pairs": args.pairs, "together": args.together, "cells": [], "images": {}}
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # a root job's trainer runs as nobody in its run directory
        for fw in args.frameworks.split(","):
            runtimes = {"container": ContainerRuntime(fw), "venv": VenvRuntime(fw)}
            for runtime in runtimes.values():
                runtime.ensure(log=lambda line: print(line, flush=True))
            m = runtimes["container"].manifest
            report["images"][fw] = {"digest": m["digest"], "size_mb": round(m["size_bytes"] / 1e6),
                                    "build_s": m["build_s"], "steps": m["steps"]}
            for model in args.models.split(","):
                batch, iterations, warmup, like = MODELS.get(model, (32, 20, 5, "imagenet"))
                settings = {"model": model, "dataset": "synthetic", "like": like, "batch_size": batch,
                            "scaling": "strong", "iterations": args.iterations or iterations, "warmup": warmup,
                            "gpus": 0, "threads": args.threads, "precision": "fp32", "seed": 0}
                rates: dict[str, list[float]] = {"container": [], "venv": []}
                for i in range(args.pairs):
                    order = ("container", "venv") if i % 2 == 0 else ("venv", "container")
                    if args.together:  # order: which one takes CPU 0
                        started = [start_run(runtimes[kind], settings, Path(tmp), cpu) for cpu, kind in enumerate(order)]
                        done = dict(zip(order, (finish_run(run) for run in started)))
                    else:
                        done = {kind: one_run(runtimes[kind], settings, Path(tmp)) for kind in order}
                    for kind in order:
                        rates[kind].append(done[kind])
                        print(f"{fw} {model} pair {i}: {kind:9s} {done[kind]:10.2f} img/s", flush=True)
                med = {k: statistics.median(v) for k, v in rates.items()}
                cv = {k: (statistics.stdev(v) / statistics.fmean(v) * 100 if len(v) > 1 else 0.0)
                      for k, v in rates.items()}
                cell = {"framework": fw, "model": model, "batch": batch, "rates": rates, "median": med, "cv": cv,
                        "ratio": med["container"] / med["venv"],
                        "pair_ratios": [c / v for c, v in zip(rates["container"], rates["venv"])]}
                report["cells"].append(cell)
    how = "simultaneous pairs, one CPU each, swapped" if args.together else "alternating pairs"
    print(f"\n{args.threads} threads, {args.pairs} {how}, load average {os.getloadavg()[0]:.1f}")
    print(f"{'framework':10s} {'model':9s} {'container img/s':>16s} {'venv img/s':>12s} {'ratio':>7s}  pair ratios")
    for c in report["cells"]:
        print(f"{c['framework']:10s} {c['model']:9s} {c['median']['container']:10.2f} ({c['cv']['container']:3.1f}%)"
              f" {c['median']['venv']:8.2f} ({c['cv']['venv']:3.1f}%) {c['ratio']:7.3f}  "
              + " ".join(f"{r:.3f}" for r in c["pair_ratios"]))
    for fw, image in report["images"].items():
        steps = ", ".join("%s %s s" % (s["step"], s["seconds"]) for s in image["steps"])
        print(f"image {fw}: {image['size_mb']} MB, built in {image['build_s']} s ({steps})")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
