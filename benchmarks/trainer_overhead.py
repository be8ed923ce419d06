"""What the trainer costs against a minimal hand-written loop of the same framework.

For each framework × model, runs the framework's trainer (`python -m trainers.<fw>`, as a job
runs it: its venv, the recipe's environment, stdout to an events file) and its minimal loop
(`benchmarks/minimal/<fw>_loop.py`: same model, recipe, input batches, threads and warm-up,
nothing else) `--pairs` times each, alternating within a pair and swapping the order from one
pair to the next (ABBA), so that the drift of a shared machine hits both alike. Each pair
gives one ratio, trainer ÷ minimal images/s (the trainer's own figure: measured images ÷ summed
step times, from its event stream; the loop's computed the same way); the table gives the
median ratio, its min–max over the pairs and the number of pairs. Not a test: the figures go
into docs/measurement.md ("Trainer ÷ minimal loop").

    .venv/bin/python benchmarks/trainer_overhead.py [--frameworks torch,numpy] [--models lenet]
        [--pairs 3] [--threads 2] [--phase inference] [--clock process] [--json out.json]

`--clock process` runs both sides under benchmarks/minimal/process_clock.py: each step's `dt` is then
the CPU seconds the process spent in it, not its wall time, so the ratio compares the work each side
does per step without the waits for a core that a loaded machine adds to one side's runs and not the
other's. A diagnostic beside the wall-clock ratio (the figure a user sees), not a replacement.

`--phase inference` compares the inference trainer (`--phase inference`: `iterations` timed batches,
min_seconds 0, after its first batch and `warmup`) with the loop's `--forward-only` (the same batches
after `warmup` + 1 untimed: the trainer's first batch is timed apart, not measured); JAX has a
forward-only minimal loop alone, so it is compared in inference only.

Defaults per model (CPU): LeNet MNIST-shaped batch 64, 200 steps after 20 warm-up; ResNet-50
ImageNet-shaped batch 4, 10 steps after 3 warm-up; the LSTM batch 32 at seq_len 32, 50 after 5; a
small gpt (2 layers, width 128, 2 heads, context 128) batch 8, 30 after 5, these two in torch only
(`--batch-size`, `--iterations`, `--warmup` override them for every model run).
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

from orchestrator.job.run import trainer_args  # noqa: E402
from orchestrator.job.job_result import read_events  # noqa: E402
from orchestrator.job.metrics import measured_steps, throughput  # noqa: E402
from orchestrator.envs.venv_runtime import REPO, VenvRuntime  # noqa: E402
from trainers.common.support import declared  # noqa: E402

FRAMEWORKS = ("torch", "tensorflow", "mxnet", "caffe", "cntk", "numpy", "jax")
#: the frameworks whose minimal loop times inference only
FORWARD_ONLY_LOOPS = ("jax",)
MODELS = {  # model: (like, batch, iterations, warmup)
    "lenet": ("mnist", 64, 200, 20),
    "resnet50": ("imagenet", 4, 10, 3),
    "lstm": ("ptb", 32, 50, 5),
    "gpt": ("ptb", 8, 30, 5),
}
#: a sequence network's own settings here: DLBench's LSTM at its seq_len 32, a small GPT (CI's shape
#: at context 128: GPT-2 small's 12 x 768 at 1,024 takes seconds a step on a CPU)
SHAPES = {"lstm": {"seq_len": 32}, "gpt": {"seq_len": 128, "layers": 2, "width": 128, "heads": 2}}
#: the frameworks whose minimal loop takes the sequence networks (their labels one per position)
SEQUENCE_LOOPS = ("torch",)
#: the wrapper that runs either side with its step clock on the process's CPU time (--clock process)
PROCESS_CLOCK = "benchmarks.minimal.process_clock"


def settings_for(model: str, args: argparse.Namespace) -> dict:
    like, batch, iterations, warmup = MODELS[model]
    return {"model": model, "dataset": "synthetic", "like": like,
            "batch_size": args.batch_size or batch, "scaling": "strong",
            "iterations": args.iterations or iterations,
            "warmup": warmup if args.warmup is None else args.warmup, "gpus": 0,
            "threads": args.threads, "precision": "fp32", "seed": 0, **SHAPES.get(model, {}),
            **({"phase": "inference", "min_batches": args.iterations or iterations, "min_seconds": 0.0}
               if args.phase == "inference" else {})}


def clocked(argv: list[str], clock: str) -> list[str]:
    """`python -m <module> ...` as given, or under benchmarks/minimal/process_clock.py, which makes
    its step times CPU seconds (`--clock process`)."""
    if clock == "wall":
        return argv
    if argv[1] != "-m":
        raise ValueError(f"expected python -m <module> ..., got {argv[:3]}")
    return [*argv[:2], PROCESS_CLOCK, *argv[2:]]


def run_trainer(framework: str, settings: dict, workdir: Path, clock: str = "wall") -> tuple[float, list[float]]:
    """One trainer run: its images/s as the orchestrator computes it from the events, and its
    measured step times."""
    argv, env = VenvRuntime.for_framework(framework).command(trainer_args(settings, None))
    argv = clocked(argv, clock)
    events, log = workdir / "events.jsonl", workdir / "trainer.log"
    with open(events, "wb") as out, open(log, "wb") as err:
        code = subprocess.call(argv, stdout=out, stderr=err, env={**os.environ, **env},
                               cwd=str(REPO), stdin=subprocess.DEVNULL)
    if code != 0:
        raise SystemExit(f"{framework} trainer failed ({code}): {log.read_text()[-2000:]}")
    stream = read_events(events)[0]
    return throughput(stream)["images_per_sec"], [float(e["dt"]) for e in measured_steps(stream)]


def run_minimal(framework: str, settings: dict, workdir: Path, clock: str = "wall") -> tuple[float, list[float]]:
    """One run of the framework's minimal loop: its images/s and measured step times (from its
    last stdout line)."""
    runtime = VenvRuntime.for_framework(framework)
    _, env = runtime.command([])
    argv = [str(runtime.python), "-m", f"benchmarks.minimal.{framework}_loop",
            "--model", settings["model"], "--like", settings["like"],
            "--batch-size", str(settings["batch_size"]), "--iterations", str(settings["iterations"]),
            "--warmup", str(settings["warmup"] + (settings.get("phase") == "inference")),
            "--threads", str(settings["threads"]), "--seed", str(settings["seed"])]
    argv += ["--forward-only"] if settings.get("phase") == "inference" else []
    argv += [a for name in ("seq_len", "layers", "width", "heads") if settings.get(name) is not None
             for a in ("--" + name.replace("_", "-"), str(settings[name]))]
    argv = clocked(argv, clock)
    log = workdir / "minimal.log"
    with open(log, "wb") as err:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, env={**os.environ, **env},
                              cwd=str(REPO), stdin=subprocess.DEVNULL)
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{framework} minimal loop failed ({done.returncode}): {log.read_text()[-2000:]}")
    record = json.loads(lines[-1])
    return record["images_per_sec"], record["dt"][record["warmup"]:]


class Pairs:
    """One framework × model: its alternating trainer/minimal pairs so far.

    Beside the ratio of images/s (the headline, a sum over the steps, so a burst of load from
    elsewhere weighs in), each pair gives the ratio of the median step times (minimal ÷
    trainer), which such bursts hardly move."""

    def __init__(self, framework: str, model: str, settings: dict, clock: str = "wall"):
        self.framework, self.model, self.settings, self.clock = framework, model, settings, clock
        self.rates: dict[str, list[float]] = {"trainer": [], "minimal": []}
        self.steps: dict[str, list[list[float]]] = {"trainer": [], "minimal": []}
        self.loads: list[float] = []

    def run_pair(self, workdir: Path) -> None:
        """Trainer then minimal, or the other way round every other pair (ABBA)."""
        i = len(self.loads)
        order = ("trainer", "minimal") if i % 2 == 0 else ("minimal", "trainer")
        self.loads.append(os.getloadavg()[0])
        for which in order:
            rate, steps = (run_trainer if which == "trainer" else run_minimal)(
                self.framework, self.settings, workdir, self.clock)
            self.rates[which].append(rate)
            self.steps[which].append(steps)
        print(f"  {self.framework:10s} {self.model:9s} pair {i}: trainer {self.rates['trainer'][-1]:9.2f}  "
              f"minimal {self.rates['minimal'][-1]:9.2f} img/s  ratio {self.ratios[-1]:.3f}  "
              f"median-step ratio {self.step_ratios[-1]:.3f}  (load {self.loads[-1]:.1f})", flush=True)

    @property
    def ratios(self) -> list[float]:
        return [t / m for t, m in zip(self.rates["trainer"], self.rates["minimal"])]

    @property
    def step_ratios(self) -> list[float]:
        return [statistics.median(m) / statistics.median(t)
                for t, m in zip(self.steps["trainer"], self.steps["minimal"])]

    def summary(self) -> dict:
        ratios = self.ratios
        return {"framework": self.framework, "model": self.model, "settings": self.settings, "clock": self.clock,
                "rates": self.rates, "step_times": self.steps, "loads": self.loads,
                "ratios": ratios, "median": statistics.median(ratios), "min": min(ratios),
                "max": max(ratios), "pairs": len(ratios), "step_ratios": self.step_ratios,
                "step_median": statistics.median(self.step_ratios)}


def print_table(results: list[dict], args: argparse.Namespace, seconds: float) -> None:
    """The table docs/measurement.md quotes; the clock named, since a CPU-time ratio is a diagnostic."""
    clock = "wall clock" if args.clock == "wall" else "process CPU time per step, not wall"
    print(f"\n{args.phase} trainer ÷ minimal loop, images/s ({clock}), CPU, {args.threads} threads "
          f"({seconds:.0f} s)")
    print(f"{'framework':10s} {'model':9s} {'batch':>5s} {'steps':>9s} {'median':>7s} {'min–max':>13s} "
          f"{'pairs':>5s} {'trainer':>9s} {'minimal':>9s} {'step ratio':>10s}")
    for r in results:
        s = r["settings"]
        print(f"{r['framework']:10s} {r['model']:9s} {s['batch_size']:5d} {s['warmup']:>3d}+{s['iterations']:<5d} "
              f"{r['median']:7.3f} {r['min']:6.3f}–{r['max']:.3f} {r['pairs']:5d} "
              f"{statistics.median(r['rates']['trainer']):9.2f} {statistics.median(r['rates']['minimal']):9.2f} "
              f"{r['step_median']:10.3f}")
    print("median: of the pairs' ratios of images/s; min–max: over the pairs; trainer, minimal: median "
          "images/s; step ratio: median over the pairs of minimal ÷ trainer median step time")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--iterations", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--phase", choices=("train", "inference"), default="train")
    ap.add_argument("--clock", choices=("wall", "process"), default="wall",
                    help="process: each step's CPU seconds instead of its wall time, a diagnostic that "
                         "separates what the code does from the machine's waits (process_clock.py)")
    ap.add_argument("--json", type=Path, help="also write every run's figures here")
    args = ap.parse_args()
    cells = []
    for framework in args.frameworks.split(","):
        runtime = VenvRuntime.for_framework(framework)
        if framework in FORWARD_ONLY_LOOPS and args.phase != "inference":
            print(f"  {framework}: its minimal loop is forward-only; compared with --phase inference")
            continue
        # a trainer that times its steps in a child process (Support.isolate) is out of the wrapper's clock's
        # reach: under --clock process its wall time would meet the loop's CPU time
        if args.clock == "process" and declared(f"trainers.{framework}").isolate:
            print(f"  {framework}: its trainer runs in a child process, which --clock process does not reach; skipped")
            continue
        if not runtime.is_ready():
            print(f"  {framework}: no environment at {runtime.env_dir} (scripts/frameworks.sh builds it); skipped")
            continue
        models = declared(f"trainers.{framework}").models
        cells += [Pairs(framework, model, settings_for(model, args), args.clock) for model in args.models.split(",")
                  if (models is None or model in models) and (model not in SHAPES or framework in SEQUENCE_LOOPS)]
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.pairs):  # round after round: a long burst of load spoils no cell's every pair
            for cell in cells:
                cell.run_pair(Path(tmp))
    results = [cell.summary() for cell in cells]
    print_table(results, args, time.monotonic() - started)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
