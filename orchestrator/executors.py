"""Executors: the submitit executor a cluster config names, and the resources a cell asks of it.

The launcher asks `make_executor` for an executor, groups its cells by `resources(cell config,
cluster)` (the resource signature), and submits each group with `submit_group`; it never
branches on the kind.

- `local`: submitit's LocalExecutor with one change: its controller starts in a new session,
  so a job outlives the shell that submitted it and a Ctrl-C while following a sweep
  (`wait=true`) stops the following, not the jobs. Resources are the machine's; none asked.
- `slurm`: submitit's SlurmExecutor. A cell's hardware and `gpus` become `--partition`, typed
  GPUs (`--gres=gpu:<type>:<n>` or `--gpus-per-node=<type>:<n>`, `cluster.gpu_request`),
  `--cpus-per-task`, `--mem`, `--time` and `--exclusive` (`cluster.exclusive`); account, QoS,
  constraint and any other sbatch option come from the cluster config. Cells with the same
  signature go out as one job array (`--array=0-N%array_parallelism`): one `sbatch` per
  signature, not per cell.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import submitit
from submitit.local.local import LocalJob

#: A local job waits in line for the node lock, so the executor's own limit must cover the
#: wait; the cell's time limit is enforced by the job itself once it holds the lock.
LOCAL_CONTROLLER_TIMEOUT_MIN = 7 * 24 * 60


class DetachedLocalExecutor(submitit.LocalExecutor):
    """submitit's LocalExecutor whose jobs survive the submitting process and its terminal."""

    def _submit_command(self, command: str) -> LocalJob:
        env = dict(os.environ)
        env.update(
            SUBMITIT_LOCAL_NTASKS="1",
            SUBMITIT_LOCAL_COMMAND=command,
            SUBMITIT_LOCAL_TIMEOUT_S=str(int(60 * self.parameters.get("timeout_min", LOCAL_CONTROLLER_TIMEOUT_MIN))),
            SUBMITIT_LOCAL_SIGNAL_DELAY_S=str(int(self.parameters.get("signal_delay_s", 30))),
            SUBMITIT_LOCAL_NODEID="0",
            SUBMITIT_LOCAL_JOB_NUM_NODES="1",
            SUBMITIT_STDERR_TO_STDOUT="",
            SUBMITIT_EXECUTOR="local",
            SUBMITIT_LOCAL_WITH_SHELL="",
        )
        # The controller must not hold the submitter's stdout/stderr: a caller reading them to
        # the end (a pipe, `$(...)`, a test) would otherwise wait for the whole job. Its own
        # rare messages go to a log beside submitit's per-job logs.
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / "controller.log", "ab") as log:
            process = subprocess.Popen(  # pylint: disable=consider-using-with
                [sys.executable, "-m", "submitit.local._local", str(self.folder)],
                env=env, start_new_session=True, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT)
        return LocalJob(folder=self.folder, job_id=str(process.pid), process=process, tasks=[0])


EXECUTORS = ("local", "slurm")


def make_executor(cluster: dict[str, Any], folder: Path) -> submitit.Executor:
    """The executor of `cluster.executor`, writing its scripts and logs under folder."""
    kind = cluster.get("executor", "local")
    if kind == "local":
        executor = DetachedLocalExecutor(folder=folder)
        executor.update_parameters(timeout_min=LOCAL_CONTROLLER_TIMEOUT_MIN)
        return executor
    if kind == "slurm":
        if shutil.which("sbatch") is None:
            raise RuntimeError("cluster=slurm but `sbatch` is not on PATH here; run from a Slurm login "
                               "node (or load its module), or use cluster=local")
        # max_num_timeout=0: a cell that runs out of time is a result (class timeout), not
        # something to requeue behind the user's back.
        return submitit.SlurmExecutor(folder=folder, max_num_timeout=0,
                                      python=cluster.get("python") or None)
    raise ValueError(f"cluster.executor={kind!r} is not one of {', '.join(EXECUTORS)}")


def resources(config: dict[str, Any], cluster: dict[str, Any]) -> dict[str, Any]:
    """What a cell asks of its executor: submitit parameters, equal for cells that can share an array."""
    if cluster.get("executor", "local") != "slurm":
        return {}
    hardware, gpus = config["hardware"], int(config["gpus"])
    params: dict[str, Any] = {"nodes": 1, "ntasks_per_node": 1,
                              "time": int(hardware.get("time_min") or cluster.get("time_min") or 60)}
    if hardware.get("partition"):
        params["partition"] = hardware["partition"]
    if hardware.get("cpus"):
        params["cpus_per_task"] = int(hardware["cpus"])
    if hardware.get("mem_gb"):
        params["mem"] = f"{int(hardware['mem_gb'])}G"
    if gpus:
        typed = f"{hardware['gpu_type']}:{gpus}" if hardware.get("gpu_type") else str(gpus)
        how = cluster.get("gpu_request", "gres")
        if how == "gres":
            params["gres"] = f"gpu:{typed}"
        elif how == "gpus_per_node":
            params["gpus_per_node"] = typed
        else:
            raise ValueError(f"cluster.gpu_request={how!r} is not one of gres, gpus_per_node")
    if cluster.get("exclusive", True):
        params["exclusive"] = True
    for key in ("account", "qos", "constraint"):
        if cluster.get(key):
            params[key] = cluster[key]
    extra = dict(cluster.get("sbatch") or {})
    if extra:
        params["additional_parameters"] = extra
    if cluster.get("setup"):
        params["setup"] = list(cluster["setup"])
    params["array_parallelism"] = int(cluster.get("array_parallelism") or 16)
    return params


def signature(params: dict[str, Any]) -> str:
    """A stable text key of a resource request: cells with equal keys share one array."""
    return json.dumps(params, sort_keys=True, default=str)


def submit_group(executor: submitit.Executor, fn: Callable[..., Any], specs: list[Any],
                 params: dict[str, Any], name: str) -> list[submitit.Job]:
    """Submits fn(spec) for every spec with one resource request: one job array on Slurm.

    `name` becomes the job name, so a submission interrupted between `sbatch` and the DB
    commit can be found again by name (tracking.adopt) instead of being submitted twice.
    """
    if params or isinstance(executor, submitit.SlurmExecutor):
        executor.update_parameters(job_name=name, **params)
    with executor.batch():
        jobs = [executor.submit(fn, spec) for spec in specs]
    return jobs
