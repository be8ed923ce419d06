"""Checks the GPU measurement on a real GPU: runs cells through the job's own path (`run_once`:
idle phase, monitor, trainer, metrics, provenance, result.json) with *this* interpreter as the
trainer's environment, for a node whose Python already holds PyTorch and nvidia-ml-py but cannot
build the venv (no network). Not a test; prints what it measured.

    python3 benchmarks/gpu_check.py OUT_DIR [--model resnet50] [--repeats 3] [--iterations 200]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.job import run as job  # noqa: E402
from orchestrator import setting_registry
from orchestrator.envs.venv_runtime import REPO, _trainer_env  # noqa: E402


class ThisPython:
    """A runtime whose environment is the running interpreter's."""

    kind = "this-python"

    def ensure(self, log):
        return Path(sys.executable)

    def identity(self) -> str:
        return f"python:{sys.executable}"

    def command(self, args, gpus=0, binds=()):
        return [sys.executable, "-m", "trainers.torch", *args], _trainer_env(str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--like", default="imagenet")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--idle-s", type=float, default=3.0)
    args = ap.parse_args()
    job.make_runtime = lambda *a, **k: ThisPython()
    settings = {"framework": "torch", "model": args.model, "dataset": "synthetic", "like": args.like,
                "hardware": "local", "gpus": args.gpus, "threads": 8, "batch_size": args.batch_size,
                "scaling": "strong", "iterations": args.iterations, "warmup": args.warmup, "seed": 0,
                "precision": "fp32"}
    cid = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]  # no omegaconf here
    sweep = time.strftime("gpucheck-%Y%m%d-%H%M%S")
    spec = job.JobSpec(sweep_id=sweep, cell_id=cid, settings=setting_registry.filled(settings),
                       config={"monitor": {"period_s": 0.1, "idle_s": args.idle_s},
                               "cluster": {"exclusive": True}},
                       runs=[job.RunSpec(uid=f"{sweep}:{cid}:{r}:1", repeat=r, attempt=1,
                                         run_dir=str(Path(args.out) / sweep / cid / str(r)))
                             for r in range(args.repeats)],
                       runtime={"kind": "this-python"}, monitor_period_s=0.1)
    for path in job.run_cell(spec):
        result = json.loads(Path(path).read_text())
        m = result.get("metrics") or {}
        print(f"== {path}: {result['state']} {result.get('error') or ''}")
        for key in sorted(m):
            if key.startswith(("images_per_sec", "gpu_", "energy", "cpu_percent_avg", "rss_peak")):
                print(f"   {key:28s} {m[key]:.6g}")
        print("   energy:", json.dumps(result.get("energy")))
        for mon in result.get("monitor", []):
            print("   monitor:", json.dumps({k: v for k, v in mon.items() if k != "gpus"}))
            for g in mon.get("gpus", []):
                print("     gpu:", json.dumps(g))
        prov = result.get("provenance") or {}
        print("   provenance:", json.dumps({k: prov.get(k) for k in ("node", "cpu", "gpu", "framework", "git",
                                                                    "slurm", "exclusive", "environment")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
