"""Hand-made `result.json` files in the documented format (docs/protocol.md §3), for the tests of
the collector, the database and the CLI. Cell ids are the real hash of the settings."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from orchestrator import setting_registry
from orchestrator.sweep.cell import cell_id

T0 = 1_700_000_000.0


def make_settings(**overrides: Any) -> dict[str, Any]:
    # every setting the registry declares, None unless given here (throughput mode: accuracy
    # mode's are None; a setting added later: None, as a cell made before it holds)
    settings = {name: None for name in setting_registry.NAMES}
    settings.update({
        "framework": "torch", "model": "lenet", "dataset": "mnist",
        "hardware": "local", "gpus": 0, "threads": 2, "batch_size": 64, "scaling": "strong",
        "iterations": 20, "warmup": 5, "seed": 0, "precision": "fp32",
    })
    settings.update(overrides)
    return settings


def make_result(sweep: str = "sweep-a", repeat: int = 0, attempt: int = 1, state: str = "done",
                metrics: Optional[dict[str, float]] = None, error: Optional[dict[str, str]] = None,
                **settings: Any) -> dict[str, Any]:
    """A valid result for one run; `settings` override the cell's benchmark settings."""
    cell = make_settings(**settings)
    cid = cell_id(cell)
    if state == "failed" and error is None:
        error = {"class": "out_of_memory", "message": "CUDA out of memory.\nTried to allocate 2.00 GiB"}
    if metrics is None:
        metrics = {} if state == "failed" else {
            "images_per_sec": 1000.0, "images_per_sec_mean": 1010.0, "images_per_sec_median": 1005.0,
            "images_per_sec_std": 12.5, "images_per_sec_mad": 4.0, "step_time_mean": 0.064,
            "step_time_median": 0.0637, "cpu_percent_avg": 180.0, "cpu_percent_peak": 199.0,
            "rss_peak_bytes": 512 * 2**20, "host_cpu_percent_avg": 90.0,
            "host_mem_used_peak_bytes": 4_000_000_000,
        }
    return {
        "schema": 1,
        "run_uid": f"{sweep}:{cid}:{repeat}:{attempt}",
        "sweep_id": sweep, "cell_id": cid, "repeat": repeat, "attempt": attempt,
        "state": state,
        "error": error,
        "cell": cell,
        "node": "node01", "job_id": "4242", "executor": "local",
        "started_at": T0, "ended_at": T0 + 100,
        "paths": {"run_dir": "/elsewhere/run", "events": "events.jsonl", "stdout": "events.jsonl",
                  "stderr": "trainer.log", "samples": "samples.jsonl"},
        "trainer": None if state == "failed" else {
            "framework": cell["framework"], "version": "2.3.1", "build": {"cuda": None},
            "model": cell["model"], "params": 61706, "input_shape": [1, 28, 28], "classes": 10,
            "dataset": cell["dataset"], "like": None, "batch_size": cell["batch_size"],
            "per_device_batch": cell["batch_size"], "gpus": cell["gpus"], "devices": [],
            "threads": cell["threads"], "precision": cell["precision"], "seed": cell["seed"],
            "python": "3.11.7"},
        "window": None if state == "failed" else {"start": T0 + 10, "end": T0 + 90, "steps": 20, "images": 1280},
        "metrics": metrics,
        "monitor": [{"name": "host", "method": "psutil", "period_s": 0.1, "samples": 812}],
        "provenance": make_provenance(cell),
    }


def make_provenance(cell: dict[str, Any]) -> dict[str, Any]:
    """A job's provenance record (orchestrator/job/provenance.py), for a P100 node under Slurm."""
    return {
        "node": "node01", "os": "Linux-5.14.0-x86_64-with-glibc2.34",
        "cpu": {"model": "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz", "cores": 28, "threads": 56,
                "usable": 16, "threads_used": cell["threads"]},
        "gpu": {"driver": "535.104.05", "cuda_driver": "12.2", "devices": [
            {"index": 1, "uuid": "GPU-1111", "name": "Tesla P100-PCIE-16GB",
             "memory_total_bytes": 17071734784, "power_limit_w": 250.0}]},
        "framework": {"name": cell["framework"], "version": "2.3.1", "build": {"cuda": "12.1"}},
        "environment": "sif:sha256:0123456789abcdef",
        "git": {"revision": "3cdf11e73d766c93dda53b805eca374ce2407de7", "dirty": False},
        "slurm": {"job_id": "4242_3", "raw_job_id": "4245", "partition": "p100", "nodelist": "node01",
                  "cpus_on_node": "16"},
        "exclusive": True,
    }


def result_path(runs: Path, result: dict[str, Any]) -> Path:
    """Where the job writes it: <runs>/<sweep>/<cell>/<repeat>[.<attempt>]/result.json."""
    leaf = str(result["repeat"]) if result["attempt"] == 1 else f"{result['repeat']}.{result['attempt']}"
    return runs / result["sweep_id"] / result["cell_id"] / leaf / "result.json"


def write_result(runs: Path, result: dict[str, Any]) -> Path:
    path = result_path(runs, result)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    return path


def write_text(runs: Path, relative: str, text: str) -> Path:
    """A file under runs/ with arbitrary (typically broken) contents."""
    path = runs / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
