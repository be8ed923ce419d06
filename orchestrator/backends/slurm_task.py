"""What a Slurm array task runs first: take its own pickle out of its array's bundle, then run it.

submitit writes one pickle per task and renames them all once sbatch has returned; a submitter
killed in between leaves tasks that wait 60 s and fail, and on a shared file system one file per
task is what a large array costs (a 5,000-task array: 5,000 file creations before sbatch, 5,000
renames after). Our executor (`slurm_executor.executor_class`) writes the tasks' pickles as
*one bundle per array*, `<job name>.tasks`, complete before sbatch is called, and nothing after;
each task copies its own entry out to the `<job>_<task>_submitted.pkl` submitit's job code
loads (atomically, so a requeued task finds it there, whole).

A task whose bundle is gone belongs to a submission the orchestrator has given up on (typing
the sweep again cancelled its runs and removed the bundle before the late sbatch landed): it
cancels itself, so nothing is measured twice.

Run as `python -m orchestrator.backends.slurm_task FOLDER` (the executor's batch script). It
imports only the standard library, submitit and orchestrator.private_files: it runs on compute nodes.
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from orchestrator import private_files

_COUNT = struct.Struct("<Q")
_SPAN = struct.Struct("<QQ")


def bundle_path(folder: Path, job_name: str) -> Path:
    """Where the submitter leaves an array's task pickles, before sbatch."""
    return folder / f"{job_name}.tasks"


def write_bundle(path: Path, pickles: Sequence[bytes]) -> None:
    """The tasks' pickles in one file: their count, the end offsets, then the pickles; written
    under a temporary name and renamed, so a task never reads half of one; 0600, as each pickle
    holds the database URL (private_files.py)."""
    ends, total = [], 0
    for data in pickles:
        total += len(data)
        ends.append(total)
    private_files.write_bytes(path, b"".join([_COUNT.pack(len(pickles)), struct.pack(f"<{len(ends) + 1}Q", 0, *ends),
                                              *pickles]))


def read_task(path: Path, index: int) -> bytes | None:
    """Task `index`'s pickle from a bundle; None where the bundle (or that task) is not there."""
    try:
        with path.open("rb") as bundle:
            (count,) = _COUNT.unpack(bundle.read(_COUNT.size))
            if not 0 <= index < count:
                return None
            bundle.seek(_COUNT.size + 8 * index)
            start, end = _SPAN.unpack(bundle.read(_SPAN.size))
            bundle.seek(_COUNT.size + 8 * (count + 1) + start)
            return bundle.read(end - start)
    except FileNotFoundError:
        return None


def take_task_pickle(bundle: Path, index: int, target: Path) -> bool:
    """Puts task `index`'s pickle where submitit's job code loads it; True once it is there."""
    if target.exists():
        return True
    data = read_task(bundle, index)
    if data is None:
        return False
    private_files.write_bytes(target, data)  # 0600, as the bundle
    return True


def main(folder: str) -> int:
    # lazy: slurm.py imports this module's bundle functions on status's path; submitit only on the node
    from submitit.core import job_environment
    from submitit.core.submission import process_job

    os.environ["SUBMITIT_FOLDER"] = folder
    env = job_environment.JobEnvironment()
    target = env.paths.submitted_pickle
    task = os.environ.get("SLURM_ARRAY_TASK_ID", "0")
    bundle = bundle_path(Path(folder), os.environ.get("SLURM_JOB_NAME", ""))
    if not take_task_pickle(bundle, int(task), target):
        job = f"{os.environ.get('SLURM_ARRAY_JOB_ID', os.environ.get('SLURM_JOB_ID', ''))}_{task}"
        print(f"orchestrator: no pickle for task {job} ({target} nor {bundle}): its submission was "
              f"given up and its runs submitted again; cancelling this task", file=sys.stderr, flush=True)
        subprocess.run(["scancel", job], check=False)
        return 1
    process_job(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
