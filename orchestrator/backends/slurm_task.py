"""What a Slurm array task runs first: find its pickle, even when its submitter died, then run it.

submitit's submitter dumps each task's pickle, calls sbatch, and only then renames the pickles
to the `<job>_<task>_submitted.pkl` names the tasks look for; a submitter killed between sbatch
and the rename leaves tasks that wait 60 s and fail. Our executor (`slurm.OrchestratorSlurmExecutor`)
names the pickles by the array's job name and task index instead, so a task whose submitter
died claims its own pickle (one atomic rename, the same one the submitter would make).

A task whose pickle is gone belongs to a submission the orchestrator has given up on (typing
the sweep again cancelled its runs and removed their pickles before the late sbatch landed):
it cancels itself, so nothing is measured twice.

Run as `python -m orchestrator.backends.slurm_task FOLDER` (the executor's batch script). It
imports only the standard library and submitit: it runs on compute nodes.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def pending_pickle(folder: Path, job_name: str, task: str) -> Path:
    """Where the submitter left a task's pickle before sbatch returned."""
    return folder / f"{job_name}_{task}.pkl"


def claim(source: Path, target: Path) -> bool:
    """Moves a pending pickle into place; True once it is there (whoever moved it)."""
    try:
        os.replace(source, target)
    except FileNotFoundError:
        pass
    return target.exists()


def main(folder: str) -> int:
    from submitit.core import job_environment
    from submitit.core.submission import process_job

    os.environ["SUBMITIT_FOLDER"] = folder
    env = job_environment.JobEnvironment()
    target = env.paths.submitted_pickle
    task = os.environ.get("SLURM_ARRAY_TASK_ID", "0")
    source = pending_pickle(Path(folder), os.environ.get("SLURM_JOB_NAME", ""), task)
    if not target.exists() and not claim(source, target):
        job = f"{os.environ.get('SLURM_ARRAY_JOB_ID', os.environ.get('SLURM_JOB_ID', ''))}_{task}"
        print(f"orchestrator: no pickle for task {job} ({target} nor {source}): its submission was "
              f"given up and its runs submitted again; cancelling this task", file=sys.stderr, flush=True)
        subprocess.run(["scancel", job], check=False)
        return 1
    process_job(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
