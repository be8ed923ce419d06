"""What the monitor costs the measurement: the torch trainer with the monitor on and off, alternating.

Runs the PyTorch trainer (LeNet on synthetic MNIST-shaped data by default, on the CPU unless
--gpus) in its venv, `--pairs` times with the monitor sampling every `--period` s (host and, with
--gpus, NVML) and as many times without it, alternating on/off so drift of the machine hits both
alike, and prints the median images/s of each and their ratio. Not a test: the figure goes into
docs/measurement.md.

    .venv/bin/python benchmarks/monitor_overhead.py [--pairs 5] [--iterations 200] [--threads 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.job import metrics  # noqa: E402
from orchestrator.job.run import trainer_args  # noqa: E402
from orchestrator.job.job_result import read_events  # noqa: E402
from orchestrator.job.monitor import Monitor, default_samplers  # noqa: E402
from orchestrator.envs.venv_runtime import REPO, VenvRuntime, _trainer_env  # noqa: E402


def one_run(argv: list[str], env: dict[str, str], monitored: bool, period: float, gpus: int,
            workdir: Path) -> tuple[float, int]:
    """One trainer run; returns its images/s (the trainer's own timing) and the samples taken."""
    events = workdir / "events.jsonl"
    monitor = Monitor(default_samplers(gpus, env), period, workdir / "samples.jsonl") if monitored else None
    with open(events, "wb") as out, open(workdir / "trainer.log", "wb") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=str(REPO), stdin=subprocess.DEVNULL)
        if monitor:
            monitor.start(proc.pid)
        code = proc.wait()
        samples = monitor.stop() if monitor else []
    if code != 0:
        raise SystemExit(f"trainer failed ({code}): {(workdir / 'trainer.log').read_text()[-2000:]}")
    measured = metrics.compute(read_events(events)[0], samples)
    return measured["images_per_sec"], len(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--model", default="lenet")
    ap.add_argument("--like", default="mnist")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--gpus", type=int, default=0)
    ap.add_argument("--period", type=float, default=0.1)
    ap.add_argument("--python", help="the trainer's interpreter (default: the torch venv, built if missing)")
    args = ap.parse_args()
    python = args.python or str(VenvRuntime.for_framework("torch").ensure())
    settings = {"model": args.model, "dataset": "synthetic", "like": args.like, "batch_size": args.batch_size,
                "scaling": "strong", "iterations": args.iterations, "warmup": args.warmup, "gpus": args.gpus,
                "threads": args.threads, "precision": "fp32", "seed": 0}
    argv = [python, "-m", "trainers.torch", *trainer_args(settings, None)]
    env = {**os.environ, **_trainer_env(str(REPO))}
    rates: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            for monitored in ((True, False) if i % 2 == 0 else (False, True)):  # ABBA: no order bias
                rate, n = one_run(argv, env, monitored, args.period, args.gpus, Path(tmp))
                rates[monitored].append(rate)
                print(f"pair {i}: monitor {'on ' if monitored else 'off'} {rate:10.1f} img/s"
                      + (f"  ({n} samples)" if monitored else ""), flush=True)
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    spread = {k: statistics.stdev(v) / statistics.fmean(v) * 100 if len(v) > 1 else 0.0 for k, v in rates.items()}
    print(f"\n{args.model} {args.like}-shaped, batch {args.batch_size}, {args.threads} threads, gpus={args.gpus}, "
          f"{args.iterations} steps, period {args.period} s, {args.pairs} pairs")
    print(f"median images/s: monitor on {on:.1f} (CV {spread[True]:.1f}%), off {off:.1f} (CV {spread[False]:.1f}%)")
    print(f"ratio on/off: {on / off:.4f} ({(on / off - 1) * 100:+.2f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
