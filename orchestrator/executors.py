"""Executors: the submitit executor a cluster config names, with the cell's resources applied.

The launcher asks `make_executor` for an executor and calls `submit`; it never branches on
the kind. `local` is submitit's LocalExecutor with one change: its controller starts in a new
session, so a job outlives the shell that submitted it and a Ctrl-C while following a sweep
(`wait=true`) stops the following, not the jobs. The Slurm executor is added by its issue.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def make_executor(cluster: dict[str, Any], folder: Path) -> submitit.Executor:
    """The executor of `cluster.executor` (local now; slurm in its issue), writing under folder."""
    kind = cluster.get("executor", "local")
    if kind == "local":
        executor = DetachedLocalExecutor(folder=folder)
        executor.update_parameters(timeout_min=LOCAL_CONTROLLER_TIMEOUT_MIN)
        return executor
    raise ValueError(f"cluster.executor={kind!r} is not supported here (supported: local)")
