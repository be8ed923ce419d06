"""The Slurm backend: submitit's Slurm executor, job arrays per resource signature, and
`sacct`/`squeue` read by pure parsers.

A cell's hardware and `gpus` become `--partition`, typed GPUs (`--gres=gpu:<type>:<n>` or
`--gpus-per-node=<type>:<n>`, `cluster.gpu_request`), `--cpus-per-task`, `--mem`, `--time`
and `--exclusive` (`cluster.exclusive`); account, QoS, constraint and any other sbatch option
come from the cluster config. Cells with the same request go out as one job array.

Following jobs: one `sacct -X` call per poll for every open job (accounting keeps ended jobs),
and one `squeue -r` call, the authority on what still waits or runs (it carries the pending
reason; accounting lags a fresh submission and keeps a never-started array as one PENDING
range). The text both print is parsed by the pure functions below (`parse_sacct`,
`parse_squeue`, `verdicts`), tested on canned output beside the tests on the real cluster.

A command that fails or times out is no answer: when neither answers `observe` raises
SchedulerUnavailable; a job is `unknown` (and may become lost) only when `squeue` answered
and does not list it, and accounting has no record of it either.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from orchestrator.backends.base import Backend, SchedulerUnavailable, Seen
from orchestrator.safety import sbatch_request

#: How long one sacct/squeue call may take before the scheduler counts as not answering.
COMMAND_TIMEOUT_S = 30.0

#: Slurm's job states (sacct and squeue, "JOB STATE CODES") -> (phase, failure class of a job
#: that ended this way without a result file). COMPLETED says nothing about a missing result.
STATES = {
    "PENDING": ("queued", None), "CONFIGURING": ("queued", None), "REQUEUED": ("queued", None),
    "REQUEUE_FED": ("queued", None), "REQUEUE_HOLD": ("queued", None), "RESV_DEL_HOLD": ("queued", None),
    "SUSPENDED": ("running", None), "STOPPED": ("running", None), "RUNNING": ("running", None),
    "COMPLETING": ("running", None), "STAGE_OUT": ("running", None), "SIGNALING": ("running", None),
    "RESIZING": ("running", None),
    "COMPLETED": ("ended", None), "FAILED": ("ended", "crash"), "SPECIAL_EXIT": ("ended", "crash"),
    "TIMEOUT": ("ended", "timeout"), "DEADLINE": ("ended", "timeout"),
    "CANCELLED": ("ended", "cancelled"), "REVOKED": ("ended", "cancelled"),
    "OUT_OF_MEMORY": ("ended", "out_of_memory"), "NODE_FAIL": ("ended", "node_fail"),
    "BOOT_FAIL": ("ended", "node_fail"), "PREEMPTED": ("ended", "preempted"),
}
#: Ends Slurm imposed from outside the job: its word beats the job's own result file, which
#: at best says the trainer got a signal.
IMPOSED = ("TIMEOUT", "DEADLINE", "CANCELLED", "REVOKED", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
           "PREEMPTED")
#: Our word for an array task accounting still shows as pending but the queue no longer holds:
#: it left the queue without starting (cancelled before it ran).
LEFT_QUEUE = "LEFT_QUEUE"


@dataclass(frozen=True)
class Record:
    """One line of sacct or squeue: a job, an array task, or a still-pending array range."""

    job: str                      # "123", "123_4", or the range's base "123"
    state: str                    # first word of the state ("CANCELLED by 0" -> CANCELLED)
    detail: Optional[str] = None  # node list (started) or pending reason (squeue)
    tasks: Optional[frozenset[int]] = None  # a pending range's task indices
    throttle: Optional[int] = None          # a range's `%N` limit


_ARRAY = re.compile(r"^(\d+)_\[([0-9,\-]+)(?:%(\d+))?\]$")


def array_base(job_id: str) -> str:
    """`123` of an array task `123_4` or a pending range `123_[4-9%2]`; a plain id as it is."""
    return job_id.split("_", 1)[0]


def expand_range(spec: str) -> frozenset[int]:
    """The task indices of an array range body: `1,3,5-7` -> {1, 3, 5, 6, 7}."""
    out: set[int] = set()
    for part in spec.split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


def state_word(text: str) -> str:
    """A state column's first word: `CANCELLED by 1000` -> CANCELLED; `` -> ``."""
    return text.split()[0] if text.strip() else ""


def _record(job: str, state: str, detail: str) -> Optional[Record]:
    detail = detail.strip() or None
    if detail in ("None assigned", "(null)", "None"):
        detail = None
    ranged = _ARRAY.match(job)
    if ranged:
        return Record(ranged.group(1), state_word(state), detail, expand_range(ranged.group(2)),
                      int(ranged.group(3)) if ranged.group(3) else None)
    if not re.fullmatch(r"\d+(_\d+)?", job):
        return None  # a step (123.batch), a het component (123+0): not an allocation
    return Record(job, state_word(state), detail)


def parse_sacct(text: str) -> list[Record]:
    """`sacct -X -n -P --format=JobID,State,NodeList` output -> records (bad lines skipped)."""
    out = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 2:
            record = _record(parts[0].strip(), parts[1], parts[2] if len(parts) > 2 else "")
            if record is not None:
                out.append(record)
    return out


def parse_squeue(text: str) -> list[Record]:
    """`squeue -h -r -o %i|%T|%r|%N` output -> records; the detail is the reason while it waits,
    the node once it runs."""
    out = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 4:
            continue
        phase = STATES.get(state_word(parts[1]), ("unknown", None))[0]
        record = _record(parts[0].strip(), parts[1], parts[2] if phase == "queued" else parts[3])
        if record is not None:
            out.append(record)
    return out


def _seen(record: Record) -> Seen:
    phase, klass = STATES.get(record.state, ("unknown", None))
    detail = record.detail
    if phase == "queued" and record.throttle is not None and not detail:
        detail = f"array limit %{record.throttle}"
    return Seen(phase, record.state, detail, klass, imposed=phase == "ended" and record.state in IMPOSED)


def _lookup(records: list[Record]) -> tuple[dict[str, Record], dict[str, list[Record]]]:
    """Records by job id, and pending ranges by array base."""
    by_id: dict[str, Record] = {}
    ranges: dict[str, list[Record]] = {}
    for r in records:
        if r.tasks is not None:
            ranges.setdefault(r.job, []).append(r)
        else:
            by_id[r.job] = r
    return by_id, ranges


def _find(job_id: str, by_id: dict[str, Record], ranges: dict[str, list[Record]]) -> Optional[Record]:
    if job_id in by_id:
        return by_id[job_id]
    base, _, index = job_id.partition("_")
    if index.isdigit():
        for r in ranges.get(base, ()):
            if int(index) in (r.tasks or ()):
                return r
    return None


def verdicts(wanted: Iterable[str], sacct: Optional[list[Record]], squeue: Optional[list[Record]]) -> dict[str, Seen]:
    """What Slurm says of each wanted job, from sacct's and squeue's records (None: that command
    did not answer). A job neither can tell about is left out; `unknown` needs squeue's answer.
    Raises SchedulerUnavailable when neither answered."""
    if sacct is None and squeue is None:
        raise SchedulerUnavailable("neither sacct nor squeue answered")
    acct_ids, acct_ranges = _lookup(sacct or [])
    queue_ids, queue_ranges = _lookup(squeue or [])
    out: dict[str, Seen] = {}
    for job_id in wanted:
        queued_now = _find(job_id, queue_ids, queue_ranges) if squeue is not None else None
        accounted = _find(job_id, acct_ids, acct_ranges) if sacct is not None else None
        if queued_now is not None:  # the controller's word on what waits or runs now
            seen = _seen(queued_now)
            if seen.phase != "unknown":
                out[job_id] = seen
                continue
        if accounted is not None:
            seen = _seen(accounted)
            if seen.phase == "ended" or squeue is None:
                out[job_id] = seen
            elif seen.phase == "queued":
                # accounting keeps a never-started array task pending after it left the queue
                out[job_id] = Seen("ended", LEFT_QUEUE, "left the queue before it started", "cancelled")
            # running per accounting but no longer in the queue: it is ending; ask again later
            continue
        if squeue is not None:  # (with accounting off, the queue is all Slurm knows)
            out[job_id] = Seen("unknown", "")
        # sacct only, no record: too new for accounting, or the controller is down: no answer
    return out


def run_command(argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> str:
    """A Slurm command's stdout; SchedulerUnavailable where it fails or does not answer in time."""
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SchedulerUnavailable(f"{argv[0]} did not answer within {timeout:g} s") from None
    except OSError as exc:
        raise SchedulerUnavailable(f"{argv[0]}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        # squeue -j with ids the controller has purged: an answer (none of them), not a failure
        if argv[0] == "squeue" and "Invalid job id" in done.stderr:
            return ""
        message = " ".join(done.stderr.split())[:300] or f"exit status {done.returncode}"
        raise SchedulerUnavailable(f"{argv[0]}: {message}")
    return done.stdout


def _executor_class() -> type:
    """submitit's SlurmExecutor whose pickles a task can claim by itself (see slurm_task.py):
    every submission is an array, its pickles named `<job name>_<index>.pkl` until sbatch
    returns, and the batch script runs `orchestrator.backends.slurm_task` first."""
    import shlex
    import uuid

    import submitit
    from submitit.core import utils
    from submitit.slurm.slurm import SlurmJob

    from orchestrator.backends.slurm_task import claim, pending_pickle

    class OrchestratorSlurmExecutor(submitit.SlurmExecutor):
        def _internal_process_submissions(self, delayed_submissions: list) -> list:
            folder = utils.JobPaths.get_first_id_independent_folder(self.folder)
            folder.mkdir(parents=True, exist_ok=True)
            name = self.parameters.get("job_name") or f"orch-{uuid.uuid4().hex[:8]}"
            pickles = []
            for index, delayed in enumerate(delayed_submissions):
                delayed.set_timeout(self.parameters.get("time", 5), self.max_num_timeout)
                delayed.dump(pending_pickle(folder, name, str(index)))
                pickles.append(pending_pickle(folder, name, str(index)))
            array = OrchestratorSlurmExecutor(self.folder, self.max_num_timeout, python=self.python)
            array.update_parameters(**{**self.parameters, "job_name": name})
            array.parameters["map_count"] = len(delayed_submissions)
            self._throttle()
            first = array._submit_command(self._submitit_command_str)
            jobs = [SlurmJob(folder=self.folder, job_id=f"{first.job_id}_{index}",
                             tasks=list(range(first.num_tasks))) for index in range(len(pickles))]
            for job, pickle in zip(jobs, pickles):
                if not claim(pickle, job.paths.submitted_pickle):  # (a started task may have claimed it)
                    raise FileNotFoundError(f"{pickle} vanished before job {job.job_id} claimed it")
            return jobs

        @property
        def _submitit_command_str(self) -> str:
            return " ".join([self.python, "-u -m orchestrator.backends.slurm_task", shlex.quote(str(self.folder))])

    return OrchestratorSlurmExecutor


class SlurmBackend(Backend):
    name = "slurm"

    @property
    def grace_s(self) -> float:
        """Accounting may not list a job this long after sbatch returned (120 s, or
        $ORCHESTRATOR_LOST_GRACE_S): a job unknown to Slurm is not called lost before."""
        import os

        try:
            return float(os.environ.get("ORCHESTRATOR_LOST_GRACE_S", 120.0))
        except ValueError:
            return 120.0

    def executor(self, folder: Path) -> Any:
        if shutil.which("sbatch") is None:
            raise RuntimeError("cluster=slurm but `sbatch` is not on PATH here; run from a Slurm login "
                               "node (or load its module), or use cluster=local")
        # max_num_timeout=0: a cell that runs out of time is a result (class timeout), not
        # something to requeue behind the user's back.
        return _executor_class()(folder=folder, max_num_timeout=0, python=self.cluster.get("python") or None)

    def resources(self, config: dict[str, Any]) -> dict[str, Any]:
        cluster = self.cluster
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
        return sbatch_request(params)  # nothing from configuration breaks out of its #SBATCH line

    def submit(self, executor: Any, fn: Any, specs: list[Any], params: dict[str, Any], name: str) -> list[str]:
        return super().submit(executor, fn, specs, {"job_name": name, **params}, name)

    def observe(self, job_ids: Iterable[str]) -> dict[str, Seen]:
        wanted = sorted(set(job_ids))
        if not wanted:
            return {}
        bases = ",".join(sorted({array_base(j) for j in wanted}))
        errors = []
        try:  # -X: allocations only, not steps
            sacct = parse_sacct(run_command(["sacct", "-X", "-n", "-P", "--format=JobID,State,NodeList",
                                             "-j", bases]))
        except SchedulerUnavailable as exc:
            sacct, _ = None, errors.append(str(exc))
        try:
            squeue = parse_squeue(run_command(["squeue", "-h", "-r", "-o", "%i|%T|%r|%N", "-j", bases]))
        except SchedulerUnavailable as exc:
            squeue, _ = None, errors.append(str(exc))
        if sacct is None and squeue is None:
            raise SchedulerUnavailable("; ".join(errors))
        self.last_error = "; ".join(errors)  # one of the two answered: jobs it cannot tell about are left out
        return verdicts(wanted, sacct, squeue)

    def find(self, names: Iterable[str]) -> dict[str, str]:
        names = sorted(set(names))
        if not names:
            return {}
        texts, errors = [], []
        for argv in (["sacct", "-X", "-n", "-P", "--format=JobID,JobName", "-S", "now-30days",
                      "--name", ",".join(names)],
                     ["squeue", "-h", "-o", "%i|%j", "--name", ",".join(names)]):
            try:
                texts.append(run_command(argv))
            except SchedulerUnavailable as exc:
                errors.append(str(exc))
        if not texts:
            raise SchedulerUnavailable("; ".join(errors))
        found: dict[str, str] = {}
        for line in "\n".join(texts).splitlines():
            parts = line.split("|")
            if len(parts) >= 2 and parts[1] in names:
                found.setdefault(parts[1], array_base(parts[0]))
        return found

    def task_job_id(self, found: str, index: int) -> str:
        return f"{found}_{index}"  # every submission is an array (see _executor_class)

    def abandon(self, name: str, folder: Path) -> None:
        from orchestrator.backends.slurm_task import pending_pickle

        for pickle in folder.glob(pending_pickle(Path(), name, "*").name):
            pickle.unlink(missing_ok=True)

    def cancel(self, job_ids: Iterable[str]) -> None:
        ids = sorted(set(job_ids))
        if ids:
            run_command(["scancel", *ids])
