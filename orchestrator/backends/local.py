"""The local backend: jobs on this machine, through submitit's local executor.

Its controller starts in a new session, so a job outlives the shell that submitted it and a
Ctrl-C while following a sweep (`wait=true`) stops the following, not the jobs. A job id is
the controller's pid; the machine is always there to ask, so `observe` always answers. A
node-wide lock file gives each timed cell the machine to itself, as `--exclusive` does on Slurm.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Optional

import psutil
import submitit
from submitit.local.local import LocalJob

from orchestrator import private_files
from orchestrator.backends.base import Backend, SchedulerView

#: A local job waits in line for the node lock, so the executor's own limit must cover the
#: wait; the cell's time limit is enforced by the job itself once it holds the lock.
LOCAL_CONTROLLER_TIMEOUT_MIN = 7 * 24 * 60


class DetachedLocalExecutor(submitit.LocalExecutor):
    """submitit's LocalExecutor whose jobs survive the submitting process and its terminal, and
    whose pickles (each holds the database URL) are created 0600 (private_files.py)."""

    def _internal_process_submissions(self, delayed_submissions: list) -> list:
        with private_files.umask() as self._user_umask:
            return super()._internal_process_submissions(delayed_submissions)

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
                stdout=log, stderr=subprocess.STDOUT, umask=getattr(self, "_user_umask", -1))
        return LocalJob(folder=self.folder, job_id=str(process.pid), process=process, tasks=[0])


def _controller(job_id: str) -> Optional[psutil.Process]:
    """The live submitit controller behind a local job id, or None once it has ended."""
    try:
        proc = psutil.Process(int(job_id))
        if proc.status() != psutil.STATUS_ZOMBIE and any("submitit" in part for part in proc.cmdline()):
            return proc
    except (ValueError, psutil.Error):
        pass
    return None


class LocalBackend(Backend):
    """This machine: it places nothing and finds nothing by name; it locks a file where a timed
    cell needs the machine to itself (backends.base.Locking)."""

    name = "local"

    def executor(self, folder: Path) -> DetachedLocalExecutor:
        executor = DetachedLocalExecutor(folder=folder)
        executor.update_parameters(timeout_min=LOCAL_CONTROLLER_TIMEOUT_MIN)
        return executor

    def node_lock(self, cache: Path) -> Optional[str]:
        return str(cache / "local-node.lock") if self.cluster.get("exclusive") else None

    def observe(self, job_ids: Iterable[str]) -> dict[str, SchedulerView]:
        # A local job id is a pid on this machine: once it is gone the job has ended, and the
        # machine knows no more of it (a result file, if any, tells the rest).
        return {job_id: SchedulerView("running", "RUNNING") if _controller(job_id) else SchedulerView("unknown", "")
                for job_id in job_ids}
