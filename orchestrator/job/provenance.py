"""Where and with what a run was measured: node, CPU, GPUs, framework, environment, code, job.

Collected by the job for every run into result.json's `provenance` (docs/protocol.md §3), so a
number can be traced to the machine, driver, framework build, environment and commit that made
it. Every part is best effort: what cannot be read here (no git, no /proc/cpuinfo, no Slurm)
is left out or null, never an error.
"""
from __future__ import annotations

import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any, Mapping, Optional

import psutil

from orchestrator.envs.venv_runtime import REPO
from trainers.common.host import available_cpus, cpu_model


def cpu_info(threads_used: Optional[int] = None) -> dict[str, Any]:
    """CPU model, physical cores and hardware threads of the node, the CPUs this job may use
    (its affinity mask, which Slurm and taskset narrow) and the threads the trainer was told to use."""
    return {"model": cpu_model(), "cores": psutil.cpu_count(logical=False),
            "threads": psutil.cpu_count(logical=True), "usable": available_cpus(), "threads_used": threads_used}


def git_revision(repo: Path = REPO) -> Optional[dict[str, Any]]:
    """The project's commit and whether the working tree differs from it; None without git or a
    checkout. Reads only: GIT_OPTIONAL_LOCKS=0 keeps `git status` from touching the index."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, env=env)
        if head.returncode != 0:
            return None
        status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=30, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return {"revision": head.stdout.strip(),
            "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}


def slurm_job(environ: Mapping[str, str]) -> Optional[dict[str, Any]]:
    """The Slurm job this runs in (array jobs as `<array job>_<task>`), or None outside Slurm."""
    if "SLURM_JOB_ID" not in environ:
        return None
    job_id = environ["SLURM_JOB_ID"]
    if environ.get("SLURM_ARRAY_JOB_ID") and environ.get("SLURM_ARRAY_TASK_ID"):
        job_id = f"{environ['SLURM_ARRAY_JOB_ID']}_{environ['SLURM_ARRAY_TASK_ID']}"
    return {"job_id": job_id, "raw_job_id": environ["SLURM_JOB_ID"],
            "partition": environ.get("SLURM_JOB_PARTITION"), "nodelist": environ.get("SLURM_JOB_NODELIST"),
            "cpus_on_node": environ.get("SLURM_CPUS_ON_NODE")}


def gpu_info(monitor: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """GPU names, UUIDs, driver and CUDA driver versions, from the GPU sampler's description
    (NVML), so NVML is asked once per run; None when no GPU was monitored."""
    gpu = next((m for m in monitor if m.get("name") == "gpu" and m.get("gpus")), None)
    if gpu is None:
        return None
    return {"driver": gpu.get("driver"), "cuda_driver": gpu.get("cuda_driver"),
            "devices": [{k: g.get(k) for k in ("index", "uuid", "name", "memory_total_bytes", "power_limit_w")}
                        for g in gpu["gpus"]]}


def gather(settings: Mapping[str, Any], trainer: Optional[Mapping[str, Any]] = None,
           environment: Optional[str] = None, monitor: Optional[list[dict[str, Any]]] = None,
           exclusive: Optional[bool] = None, environ: Optional[Mapping[str, str]] = None,
           built_in: Optional[str] = None) -> dict[str, Any]:
    """The run's provenance record (result.json `provenance`); `built_in`: the folder of the venv
    (by its recipe's hash) or the image the trainer ran from."""
    environ = os.environ if environ is None else environ
    trainer = trainer or {}
    return {
        "node": socket.gethostname(),
        "os": platform.platform(),
        "cpu": cpu_info(settings.get("threads")),
        "gpu": gpu_info(monitor or []),
        "framework": {"name": settings.get("framework"), "version": trainer.get("version"),
                      "build": trainer.get("build"), "blas": trainer.get("blas"),
                      "compiler": (trainer.get("build") or {}).get("compiler"),
                      "python_compiler": trainer.get("python_compiler")},
        # which build of the framework (build=) and the environment it ran from: its recipe's hash names it
        "build": {"name": settings.get("build"), "environment_dir": built_in},
        "environment": environment,
        "git": git_revision(),
        "slurm": slurm_job(environ),
        "exclusive": exclusive,
    }
