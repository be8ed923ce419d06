"""What the trainer costs against a minimal hand-written loop of the same framework.

For each framework × model, runs the framework's trainer (`python -m trainers.<fw>`, as a job
runs it: its venv, the recipe's environment, stdout to an events file) and its minimal loop
(`benchmarks/minimal/<fw>_loop.py`: same model, recipe, input batches, threads and warm-up,
nothing else) `--pairs` times each, alternating within a pair and swapping the order from one
pair to the next (ABBA), so that the drift of a shared machine hits both alike. Each pair
gives one ratio, trainer ÷ minimal images/s (the trainer's own figure: measured images ÷ summed
step times, from its event stream; the loop's computed the same way); the table gives the
median ratio, its min–max over the pairs and the number of pairs. Not a test: the figures go
into README's "How a number is made".

    .venv/bin/python benchmarks/trainer_overhead.py [--frameworks torch,numpy] [--models lenet]
        [--pairs 3] [--threads 2] [--json out.json]

Defaults per model (CPU): LeNet MNIST-shaped batch 64, 200 steps after 20 warm-up; ResNet-50
ImageNet-shaped batch 8, 10 steps after 3 warm-up (`--batch-size`, `--iterations`, `--warmup`
override them for every model run).
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.job import read_events, trainer_args  # noqa: E402
from orchestrator.metrics import throughput  # noqa: E402
from orchestrator.runtime import REPO, VenvRuntime  # noqa: E402
from trainers.common.support import declared  # noqa: E402

FRAMEWORKS = ("torch", "tensorflow", "mxnet", "caffe", "cntk", "numpy")
MODELS = {  # model: (like, batch, iterations, warmup)
    "lenet": ("mnist", 64, 200, 20),
    "resnet50": ("imagenet", 8, 10, 3),
}


def settings_for(model: str, args: argparse.Namespace) -> dict:
    like, batch, iterations, warmup = MODELS[model]
    return {"model": model, "dataset": "synthetic", "like": like,
            "batch_size": args.batch_size or batch, "scaling": "strong",
            "iterations": args.iterations or iterations,
            "warmup": warmup if args.warmup is None else args.warmup, "gpus": 0,
            "threads": args.threads, "precision": "fp32", "seed": 0}


def run_trainer(framework: str, settings: dict, workdir: Path) -> float:
    """One trainer run; its images/s as the orchestrator computes it from the events."""
    argv, env = VenvRuntime.for_framework(framework).command(trainer_args(settings, None))
    events, log = workdir / "events.jsonl", workdir / "trainer.log"
    with open(events, "wb") as out, open(log, "wb") as err:
        code = subprocess.call(argv, stdout=out, stderr=err, env={**os.environ, **env},
                               cwd=str(REPO), stdin=subprocess.DEVNULL)
    if code != 0:
        raise SystemExit(f"{framework} trainer failed ({code}): {log.read_text()[-2000:]}")
    return throughput(read_events(events)[0])["images_per_sec"]


def run_minimal(framework: str, settings: dict, workdir: Path) -> float:
    """One run of the framework's minimal loop; its images/s (its last stdout line)."""
    runtime = VenvRuntime.for_framework(framework)
    _, env = runtime.command([])
    argv = [str(runtime.python), "-m", f"benchmarks.minimal.{framework}_loop",
            "--model", settings["model"], "--like", settings["like"],
            "--batch-size", str(settings["batch_size"]), "--iterations", str(settings["iterations"]),
            "--warmup", str(settings["warmup"]), "--threads", str(settings["threads"]),
            "--seed", str(settings["seed"])]
    log = workdir / "minimal.log"
    with open(log, "wb") as err:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, env={**os.environ, **env},
                              cwd=str(REPO), stdin=subprocess.DEVNULL)
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{framework} minimal loop failed ({done.returncode}): {log.read_text()[-2000:]}")
    return json.loads(lines[-1])["images_per_sec"]


def measure(framework: str, model: str, settings: dict, pairs: int, workdir: Path) -> dict:
    """`pairs` alternating trainer/minimal runs; their rates and ratios."""
    runs = {"trainer": run_trainer, "minimal": run_minimal}
    rates: dict[str, list[float]] = {"trainer": [], "minimal": []}
    for i in range(pairs):
        order = ("trainer", "minimal") if i % 2 == 0 else ("minimal", "trainer")
        for which in order:
            rates[which].append(runs[which](framework, settings, workdir))
        ratio = rates["trainer"][-1] / rates["minimal"][-1]
        print(f"  {framework:10s} {model:9s} pair {i}: trainer {rates['trainer'][-1]:9.2f}  "
              f"minimal {rates['minimal'][-1]:9.2f} img/s  ratio {ratio:.3f}", flush=True)
    ratios = [t / m for t, m in zip(rates["trainer"], rates["minimal"])]
    return {"framework": framework, "model": model, "settings": settings, "rates": rates,
            "ratios": ratios, "median": statistics.median(ratios), "min": min(ratios),
            "max": max(ratios), "pairs": len(ratios)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--iterations", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--json", type=Path, help="also write every run's figures here")
    args = ap.parse_args()
    results = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for framework in args.frameworks.split(","):
            runtime = VenvRuntime.for_framework(framework)
            if not runtime.is_ready():
                print(f"  {framework}: no environment at {runtime.env_dir} (scripts/frameworks.sh builds it); skipped")
                continue
            models = declared(f"trainers.{framework}").models
            for model in args.models.split(","):
                if models is not None and model not in models:
                    continue
                results.append(measure(framework, model, settings_for(model, args), args.pairs, Path(tmp)))
    print(f"\ntrainer ÷ minimal loop, images/s, CPU, {args.threads} threads "
          f"({time.monotonic() - started:.0f} s)")
    print(f"{'framework':10s} {'model':9s} {'batch':>5s} {'steps':>9s} {'median':>7s} {'min–max':>13s} "
          f"{'pairs':>5s} {'trainer':>9s} {'minimal':>9s}")
    for r in results:
        s = r["settings"]
        print(f"{r['framework']:10s} {r['model']:9s} {s['batch_size']:5d} {s['warmup']:>3d}+{s['iterations']:<5d} "
              f"{r['median']:7.3f} {r['min']:6.3f}–{r['max']:.3f} {r['pairs']:5d} "
              f"{statistics.median(r['rates']['trainer']):9.2f} {statistics.median(r['rates']['minimal']):9.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
