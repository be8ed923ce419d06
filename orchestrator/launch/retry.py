"""`retry.timeout: N`: a timed-out repeat resubmitted automatically, with twice its limit, up to N times.

Who resubmits when nobody waits on the login node: a **follow-up job**. With every submission
of runs that may still be retried (fewer than N retries in this sweep), the launcher submits one small job (one
CPU, FOLLOW_UP_MIN minutes, never exclusive) that Slurm holds until every one of those jobs has
ended (`--dependency=afterany:<their arrays>`). On a compute node it runs what a user would type:

    orchestrator rerun --failed --follow-up --sweep S

that is, `collect`, then `rerun`'s pick of the sweep's repeats whose latest attempt timed out
and that this sweep has retried fewer than N times, each with twice its last limit up to its partition's MaxTime
(orchestrator/launch/rerun.py). That submission is an ordinary one, so it brings the next follow-up
where a retry is still left, and none after the N-th. The user may log out; data still flows one
way (the follow-up is a `collect` and a `rerun` that the scheduler starts, nothing reaches back
into the launcher); and `orchestrator status` shows every attempt as it shows any rerun.

Why not the alternatives:
- submitit's requeue (`max_num_timeout`) keeps the job's time limit: only an administrator may
  raise one, so the same limit would time out again (and a requeue hides the timeout's record);
- a retry job per cell submitted up front (`--dependency=afternotok:`) doubles the jobs a sweep
  puts in the queue (sites cap them: MaxSubmitJobs), and Slurm cannot tie an array's task to
  another array's task on failure (`aftercorr` is for success only);
- the launcher itself waiting (`wait=true`) ends with the user's shell.

What it needs of a site: `sbatch` on compute nodes (Slurm's default) and the results database
reachable from them: a server, or a file on the shared file system where `paths.runs` already
is (the follow-up's log, under `runs/<sweep>/.submitit/`, says so when it is not).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from orchestrator.sweep import config_checks
from orchestrator.store.sql_adapters import SQLITE_FILE

#: The most automatic retries a cell may be given (each doubles its limit: 2^5 = 32 times the first).
MAX_RETRIES = 5
#: The follow-up job's time limit (minutes): a `collect` and a submission.
FOLLOW_UP_MIN = 10
#: Its memory (MB): Python, SQLAlchemy and submitit.
FOLLOW_UP_MEM_MB = 2048
#: What it runs, after `python -m orchestrator` (the sweep's id is appended).
FOLLOW_UP_ARGV = ("rerun", "--failed", "--follow-up", "--sweep")
#: The variable that hands it the launch's overrides (JSON), from its 0600 pickle: the rerun takes
#: their site options (rerun_config.site_only), so that it runs on the launch's site configuration.
OVERRIDES_ENV = "ORCHESTRATOR_FOLLOW_UP_OVERRIDES"


def timeouts(config: Mapping[str, Any]) -> int:
    """`retry.timeout` of a sweep's (or a cell's recorded) config, checked: 0 where unset."""
    given = (config.get("retry") or {}).get("timeout")
    if given is None:
        return 0
    return config_checks.integer("retry.timeout", given, 0, MAX_RETRIES,
                                 f"use retry.timeout=N, the automatic retries of a timed-out cell (0 to {MAX_RETRIES})")


def retry_left(config: Mapping[str, Any], attempt: int, first: int = 1) -> bool:
    """Whether an attempt that times out may still be retried automatically: at most N retries
    of the sweep that asked for them, so of its attempts `first` (its first of the repeat) to
    `first` + N - 1 each is followed up and `first` + N is the last. Attempts are numbered per
    (cell, repeat) across sweeps: a cell typed again after an earlier failure, or with
    force=true, starts at 2 or more, and counting from 1 gave it fewer retries or none (issue 35)."""
    return attempt - first < timeouts(config)


def database_url(url: str, cwd: Optional[Path] = None) -> str:
    """The database URL as a job elsewhere must open it: an SQLite file's relative path made
    absolute (the follow-up's working directory is not promised to be the submitter's)."""
    path = url[len(SQLITE_FILE):] if url.startswith(SQLITE_FILE) else None
    if not path or path.startswith("/") or path.startswith(":memory:"):
        return url
    return SQLITE_FILE + str((cwd or Path.cwd()) / path)


def run(follow_up: Mapping[str, str]) -> int:
    """The follow-up job's body (submitted by the launcher, run by Slurm on a compute node):
    `python -m orchestrator rerun --failed --follow-up --sweep S` with the sweep's database and
    runs directory, which travel in the job's pickle (never on a command line, where a
    database URL's password would show in `ps`)."""
    env = {**os.environ, "ORCHESTRATOR_DB": follow_up["db"], "ORCHESTRATOR_RUNS": follow_up["runs"],
           OVERRIDES_ENV: json.dumps(list(follow_up.get("overrides") or []))}
    argv = [sys.executable, "-m", "orchestrator", *FOLLOW_UP_ARGV, follow_up["sweep"]]
    return subprocess.run(argv, env=env, check=True).returncode


def follow_up(sweep_id: str, job_ids: list[str], config: Mapping[str, Any], backend: Any, db_url: str,
              runs: Path, overrides: Sequence[str] = ()) -> str:
    """Submits the sweep's follow-up job, held until `job_ids` (those whose runs may still be
    retried; `config`: the first one's cell) have ended; returns the line that says so. Its
    failure to go out loses nothing: the line says it, and `rerun --failed --class timeout` does
    the same by hand. `overrides`: the launch's (the first followed cell's), which its pickle
    carries, never the database."""
    partition = (backend.cluster.get("follow_up_partition") or config["hardware"].get("partition")) or None
    spec = {"sweep": sweep_id, "db": database_url(db_url), "runs": str(runs), "overrides": list(overrides)}
    folder = runs / sweep_id / ".submitit"
    try:
        executor = backend.executor(folder)  # its own: none of the cells' parameters
        job_id = backend.follow_up(executor, run, spec, job_ids, partition, f"orch-{sweep_id}-retry",
                                   FOLLOW_UP_MIN, FOLLOW_UP_MEM_MB)  # a FollowingUp backend (submit_options.Options)
    except Exception as exc:  # the sweep's own jobs are out: a missing follow-up must not fail it
        return (f"retry.timeout: the follow-up job was not submitted ({type(exc).__name__}: {exc}); "
                f"rerun timed-out cells with `orchestrator rerun --failed --class timeout`")
    return (f"retry.timeout={timeouts(config)}: job {job_id} resubmits this sweep's timed-out repeats (twice "
            f"their limit) once its {len(job_ids)} job(s) end; its log: {folder}")
