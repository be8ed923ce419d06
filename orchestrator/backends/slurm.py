"""The Slurm backend: submitit's Slurm executor, job arrays per resource signature, and
`sacct`/`squeue` read by pure parsers.

A cell's hardware and `gpus` become one structured request, and its submitit parameters
(`--partition`, typed GPUs, `--cpus-per-task`, `--mem`, `--time`, `--exclusive`, the cluster's
own sbatch options) are derived from that (backends/sbatch.py, which also holds the policy on
sbatch options from configuration). Cells with the same request go out as one job array.

Following jobs: one `sacct -X` call per poll for every open job (accounting keeps ended jobs),
and one `squeue -r` call, the authority on what still waits or runs (it carries the pending
reason; accounting lags a fresh submission and keeps a never-started array as one PENDING
range). The text both print is parsed by the pure functions below (`parse_sacct`,
`parse_squeue`, `verdicts`), tested on canned output beside the tests on the real cluster.

A command that fails or times out is no answer: when neither answers `observe` raises
SchedulerUnavailable; a job is `unknown` (and may become lost) only when `squeue` answered
and does not list it, and accounting has no record of it either.

What the cluster has (partitions, nodes, MaxArraySize; backends/slurm_cluster.py) is read
once per sweep: a request no node of its partition can hold is refused before sbatch
(`refuse`), arrays are split at MaxArraySize (`array_limit`), and a job pending for a reason
that never clears is reported so by `status` and, `unplaceable_after_min` after its
submission (or once the user cancels it), ended as `unplaceable`.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from orchestrator.backends import sbatch
from orchestrator.backends.base import Backend, SchedulerUnavailable, SchedulerView
from orchestrator.backends.slurm_cluster import (DEFAULT_MAX_ARRAY_SIZE, Cluster, Request, cluster_from,
                                                 doubtful, hopeless, refusal, request_from_squeue,
                                                 request_from_tres)
from orchestrator.backends.slurm_executor import executor_class
from orchestrator.backends.slurm_task import bundle_path
from trainers.common import failure_classes as fc

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
    "COMPLETED": ("ended", None), "FAILED": ("ended", fc.CRASH), "SPECIAL_EXIT": ("ended", fc.CRASH),
    "TIMEOUT": ("ended", fc.TIMEOUT), "DEADLINE": ("ended", fc.TIMEOUT),
    "CANCELLED": ("ended", fc.CANCELLED), "REVOKED": ("ended", fc.CANCELLED),
    "OUT_OF_MEMORY": ("ended", fc.OUT_OF_MEMORY), "NODE_FAIL": ("ended", fc.NODE_FAIL),
    "BOOT_FAIL": ("ended", fc.NODE_FAIL), "PREEMPTED": ("ended", fc.PREEMPTED),
}
#: Ends Slurm imposed from outside the job: its word beats the job's own result file, which
#: at best says the trainer got a signal.
IMPOSED = ("TIMEOUT", "DEADLINE", "CANCELLED", "REVOKED", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
           "PREEMPTED")
#: Our word for an array task accounting still shows as pending but the queue no longer holds:
#: it left the queue without starting (cancelled before it ran).
LEFT_QUEUE = "LEFT_QUEUE"
#: Our word for a job that waited `unplaceable_after_min` for a reason that never clears: the
#: backend cancels it and it ends `unplaceable`.
UNPLACEABLE = "UNPLACEABLE"
#: Minutes a job may wait for a reason that never clears before `status` cancels it (the
#: cluster config's `unplaceable_after_min`, else $ORCHESTRATOR_UNPLACEABLE_AFTER_MIN).
UNPLACEABLE_AFTER_MIN = 10.0
#: How long the cluster's facts read for `status` stay fresh (nodes come back from drain).
FACTS_MAX_AGE_S = 60.0


@dataclass(frozen=True)
class Record:
    """One line of sacct or squeue: a job, an array task, or a still-pending array range."""

    job: str                      # "123", "123_4", or the range's base "123"
    state: str                    # first word of the state ("CANCELLED by 0" -> CANCELLED)
    detail: Optional[str] = None  # node list (started) or pending reason (squeue)
    tasks: Optional[frozenset[int]] = None  # a pending range's task indices
    throttle: Optional[int] = None          # a range's `%N` limit
    reason: Optional[str] = None            # why it waits (squeue), or last waited (sacct)
    request: Optional[Request] = None       # what it asked for (sacct; squeue without memory)
    submitted: Optional[str] = None         # when it was submitted (squeue %V)
    time_limit: Optional[int] = None        # minutes (sacct)


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


def _text(value: str) -> Optional[str]:
    """A column's value; None for Slurm's ways of writing nothing."""
    value = value.strip()
    return None if value in ("", "None assigned", "(null)", "None", "N/A", "Unknown") else value


def _record(job: str, state: str, detail: str, **extra: Any) -> Optional[Record]:
    ranged = _ARRAY.match(job)
    if ranged:
        return Record(ranged.group(1), state_word(state), _text(detail), expand_range(ranged.group(2)),
                      int(ranged.group(3)) if ranged.group(3) else None, **extra)
    if not re.fullmatch(r"\d+(_\d+)?", job):
        return None  # a step (123.batch), a het component (123+0): not an allocation
    return Record(job, state_word(state), _text(detail), **extra)


#: What `observe` asks sacct and squeue for (the parsers also read the first three/four alone).
SACCT_FORMAT = "JobID,State,NodeList,Reason,Partition,ReqTRES,TimelimitRaw"
SQUEUE_FORMAT = "%i|%T|%r|%N|%V|%P|%C|%b|%l"


def parse_sacct(text: str) -> list[Record]:
    """`sacct -X -n -P --format=JobID,State,NodeList[,Reason,Partition,ReqTRES,TimelimitRaw]`
    output -> records (bad lines skipped)."""
    out = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 2:
            continue
        extra: dict[str, Any] = {}
        if len(parts) >= 7:
            extra = {"reason": _text(parts[3]), "time_limit": int(parts[6]) if parts[6].strip().isdigit() else None,
                     "request": request_from_tres(parts[4].strip(), parts[5].strip(), parts[6].strip())}
        record = _record(parts[0].strip(), parts[1], parts[2] if len(parts) > 2 else "", **extra)
        if record is not None:
            out.append(record)
    return out


def parse_squeue(text: str) -> list[Record]:
    """`squeue -h -r -o %i|%T|%r|%N[|%V|%P|%C|%b|%l]` output -> records; the detail is the reason
    while it waits, the node once it runs. The request it shows (partition, CPUs, GRES, time; not
    memory, which %m gives per CPU or per node alike) serves until accounting has the job."""
    out = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 4:
            continue
        queued = STATES.get(state_word(parts[1]), ("unknown", None))[0] == "queued"
        request = request_from_squeue(*parts[5:9]) if len(parts) >= 9 else None
        record = _record(parts[0].strip(), parts[1], parts[2] if queued else parts[3],
                         reason=_text(parts[2]) if queued else None, request=request,
                         submitted=_text(parts[4]) if len(parts) > 4 else None)
        if record is not None:
            out.append(record)
    return out


def _seen(record: Record) -> SchedulerView:
    phase, klass = STATES.get(record.state, ("unknown", None))
    detail = record.detail
    if phase == "queued" and record.throttle is not None and not detail:
        detail = f"array limit %{record.throttle}"
    if record.state in ("TIMEOUT", "DEADLINE") and record.time_limit is not None:
        detail = f"time limit {record.time_limit} min" + (f", on {detail}" if detail else "")
    return SchedulerView(phase, record.state, detail, klass, imposed=phase == "ended" and record.state in IMPOSED)


def _when(text: Optional[str]) -> Optional[float]:
    """squeue's `%V` (`2026-11-23T15:43:19`, local time) -> a timestamp; None if unreadable."""
    try:
        return time.mktime(time.strptime(text or "", "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def _waiting(seen: SchedulerView, record: Record, request: Optional[Request], cluster: Optional[Cluster],
             now: Optional[float], after_s: Optional[float]) -> SchedulerView:
    """A waiting job, with why it can never start where it cannot; once it has waited `after_s`
    since its submission, our verdict UNPLACEABLE (the backend then cancels it)."""
    why = hopeless(record.reason, request, cluster)
    if not why:
        return seen
    since = _when(record.submitted)
    if after_s is not None and now is not None and since is not None and now - since >= after_s:
        return SchedulerView("ended", UNPLACEABLE, f"waited {(now - since) / 60:.0f} min ({record.reason}) and could never "
                    f"start: {why}; cancelled", fc.UNPLACEABLE, imposed=True, never=why)
    then = f"; ended as unplaceable {after_s / 60:g} min after its submission (or scancel it)" if after_s is not None else ""
    return SchedulerView(seen.phase, seen.state, seen.detail, never=why + then)


def _gave_up(seen: SchedulerView, record: Record, request: Optional[Request], cluster: Optional[Cluster]) -> SchedulerView:
    """A job cancelled before it ever had a node, while waiting for a reason that never clears,
    is unplaceable, not cancelled: rerunnable once its request is fixed."""
    if seen.error_class != fc.CANCELLED or record.detail is not None:
        return seen
    why = hopeless(record.reason, request, cluster)
    if not why:
        return seen
    return SchedulerView("ended", seen.state, f"cancelled while it waited ({record.reason}); it could never start: {why}",
                fc.UNPLACEABLE, imposed=seen.imposed)


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


def verdicts(wanted: Iterable[str], sacct: Optional[list[Record]], squeue: Optional[list[Record]],
             cluster: Optional[Cluster] = None, now: Optional[float] = None,
             unplaceable_after_s: Optional[float] = None) -> dict[str, SchedulerView]:
    """What Slurm says of each wanted job, from sacct's and squeue's records (None: that command
    did not answer). A job neither can tell about is left out; `unknown` needs squeue's answer.
    Raises SchedulerUnavailable when neither answered.

    With the cluster's facts, a job waiting for a reason that never clears says so (`never`),
    and becomes UNPLACEABLE `unplaceable_after_s` after its submission (as of `now`); one
    cancelled while it waited so ends `unplaceable`."""
    if sacct is None and squeue is None:
        raise SchedulerUnavailable("neither sacct nor squeue answered")
    acct_ids, acct_ranges = _lookup(sacct or [])
    queue_ids, queue_ranges = _lookup(squeue or [])
    out: dict[str, SchedulerView] = {}
    for job_id in wanted:
        queued_now = _find(job_id, queue_ids, queue_ranges) if squeue is not None else None
        accounted = _find(job_id, acct_ids, acct_ranges) if sacct is not None else None
        base, _, index = job_id.partition("_")
        if accounted is None and queued_now is None and squeue is not None and index.isdigit() and acct_ranges.get(base):
            # accounting drops a task cancelled while it waited from its array's pending range and
            # keeps no record of it (Slurm 22.05): the range stands for it
            accounted = acct_ranges[base][0]
        request = accounted.request if accounted is not None and accounted.request else (
            queued_now.request if queued_now is not None else None)
        if queued_now is not None:  # the controller's word on what waits or runs now
            seen = _seen(queued_now)
            if seen.phase == "queued":
                seen = _waiting(seen, queued_now, request, cluster, now, unplaceable_after_s)
            if seen.phase != "unknown":
                out[job_id] = seen
                continue
        if accounted is not None:
            seen = _seen(accounted)
            if seen.phase == "queued" and squeue is not None:
                # accounting keeps a never-started array task pending after it left the queue
                seen = SchedulerView("ended", LEFT_QUEUE, "left the queue before it started", fc.CANCELLED)
            elif seen.phase == "queued":  # (no squeue: no submission time, so no deadline)
                seen = _waiting(seen, accounted, request, cluster, None, None)
            if seen.phase == "ended":
                out[job_id] = _gave_up(seen, accounted, request, cluster)
            elif squeue is None:
                out[job_id] = seen
            # running per accounting but no longer in the queue: it is ending; ask again later
            continue
        if squeue is not None:  # (with accounting off, the queue is all Slurm knows)
            out[job_id] = SchedulerView("unknown", "")
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


class SlurmBackend(Backend):
    name = "slurm"

    def __init__(self, cluster: dict[str, Any]) -> None:
        super().__init__(cluster)
        #: (when read, the cluster's facts or why they could not be read): once per sweep
        self._facts: Optional[tuple[float, Any]] = None

    @property
    def grace_s(self) -> float:
        """Accounting may not list a job this long after sbatch returned (120 s, or
        $ORCHESTRATOR_LOST_GRACE_S): a job unknown to Slurm is not called lost before."""
        try:
            return float(os.environ.get("ORCHESTRATOR_LOST_GRACE_S", 120.0))
        except ValueError:
            return 120.0

    @property
    def unplaceable_after_s(self) -> float:
        """How long after its submission a job waiting for a reason that never clears is
        cancelled and ended `unplaceable`: $ORCHESTRATOR_UNPLACEABLE_AFTER_MIN where the person
        asking sets it, else the sweep's `cluster.unplaceable_after_min`, else 10 min."""
        value = os.environ.get("ORCHESTRATOR_UNPLACEABLE_AFTER_MIN")
        if value is None:
            value = self.cluster.get("unplaceable_after_min")
        if value is None:
            value = UNPLACEABLE_AFTER_MIN
        try:
            return 60.0 * float(value)
        except (TypeError, ValueError):
            return 60.0 * UNPLACEABLE_AFTER_MIN

    def facts(self, max_age_s: Optional[float] = None) -> Cluster:
        """The cluster's partitions, nodes and limits (`scontrol`), read once per instance (again
        when older than max_age_s). Raises SchedulerUnavailable when they could not be read."""
        if self._facts is None or (max_age_s is not None and time.time() - self._facts[0] > max_age_s):
            try:
                texts = [run_command(["scontrol", "-a", "show", what, "-o"]) for what in ("partition", "node")]
                self._facts = (time.time(), cluster_from(*texts, run_command(["scontrol", "show", "config"])))
            except SchedulerUnavailable as exc:
                self._facts = (time.time(), str(exc))
        if isinstance(self._facts[1], str):
            raise SchedulerUnavailable(self._facts[1])
        return self._facts[1]

    def refuse(self, config: dict[str, Any]) -> Optional[str]:
        if not self.cluster.get("check_requests", True):
            return None
        why = refusal(self.request(config), self.facts())
        if why is None:
            return None
        return (f"{why}; fit it to the cluster (hardware.cpus, hardware.mem_gb, gpus, hardware.time_min, "
                f"or another hardware) and type the sweep again")

    def max_time_min(self, config: dict[str, Any]) -> Optional[int]:
        """The MaxTime of the cell's partition (the shortest of a list, p100,v100: the job must fit
        whichever starts it; the default partition where it names none)."""
        try:
            facts = self.facts()
        except SchedulerUnavailable:
            return None
        names = (self.request(config).partition or facts.default_partition or "").split(",")
        limits = [facts.partitions[n].max_time_min for n in names if n in facts.partitions]
        limits = [m for m in limits if m is not None]
        return min(limits) if limits else None

    def array_limit(self) -> Optional[int]:
        """`cluster.max_array_size`, else the cluster's MaxArraySize, else Slurm's default."""
        if self.cluster.get("max_array_size"):
            return int(self.cluster["max_array_size"])
        try:
            return self.facts().max_array_size
        except SchedulerUnavailable:
            return DEFAULT_MAX_ARRAY_SIZE

    def executor(self, folder: Path) -> Any:
        if shutil.which("sbatch") is None:
            raise RuntimeError("cluster=slurm but `sbatch` is not on PATH here; run from a Slurm login "
                               "node (or load its module), or use cluster=local")
        # max_num_timeout=0: a cell that runs out of time is a result (class timeout), not
        # something to requeue behind the user's back.
        return executor_class()(folder=folder, max_num_timeout=0, python=self.cluster.get("python") or None)

    def request(self, config: dict[str, Any]) -> Request:
        """What a cell asks of one node (sbatch.request): its submitit parameters and the
        placement check are both derived from it."""
        return sbatch.request(config, self.cluster)

    def resources(self, config: dict[str, Any]) -> dict[str, Any]:
        return sbatch.submitit_params(self.request(config), self.cluster)

    def submit(self, executor: Any, fn: Any, specs: list[Any], params: dict[str, Any], name: str) -> list[str]:
        return super().submit(executor, fn, specs, {"job_name": name, **params}, name)

    follows = True

    def follow_up(self, executor: Any, fn: Any, spec: Any, after: list[str], partition: Optional[str],
                  name: str, time_min: int, mem_mb: int) -> str:
        """sbatch `--dependency=afterany:<each array>` (an array's base id waits for all its
        tasks) with `--kill-on-invalid-dep=yes` (a dependency Slurm can no longer satisfy ends
        the job instead of leaving it pending for ever); one CPU, never `--exclusive`."""
        job = Request(partition=partition, cpus=1, mem_mb=mem_mb, time_min=time_min)
        params = sbatch.submitit_params(job, {**self.cluster, "exclusive": False})
        # computed here, not configuration: added after submitit_params' check of what configuration gave
        params["additional_parameters"] = {**params.get("additional_parameters", {}),
                                           "dependency": "afterany:" + ":".join(sorted({array_base(j) for j in after})),
                                           "kill-on-invalid-dep": "yes"}
        return self.submit(executor, fn, [spec], params, name)[0]

    def observe(self, job_ids: Iterable[str]) -> dict[str, SchedulerView]:
        wanted = sorted(set(job_ids))
        if not wanted:
            return {}
        bases = ",".join(sorted({array_base(j) for j in wanted}))
        errors = []
        try:  # -X: allocations only, not steps
            sacct = parse_sacct(run_command(["sacct", "-X", "-n", "-P", f"--format={SACCT_FORMAT}", "-j", bases]))
        except SchedulerUnavailable as exc:
            sacct, _ = None, errors.append(str(exc))
        try:
            squeue = parse_squeue(run_command(["squeue", "-h", "-r", "-o", SQUEUE_FORMAT, "-j", bases]))
        except SchedulerUnavailable as exc:
            squeue, _ = None, errors.append(str(exc))
        if sacct is None and squeue is None:
            raise SchedulerUnavailable("; ".join(errors))
        self.last_error = "; ".join(errors)  # one of the two answered: jobs it cannot tell about are left out
        cluster = None
        if any(doubtful(r.reason) for r in (sacct or []) + (squeue or []) if r.state in ("PENDING", "CANCELLED")):
            try:  # without the facts, only reasons that never clear by themselves are judged
                cluster = self.facts(max_age_s=FACTS_MAX_AGE_S)
            except SchedulerUnavailable:
                pass
        seen = verdicts(wanted, sacct, squeue, cluster, time.time(), self.unplaceable_after_s)
        doomed = sorted(j for j, s in seen.items() if s.state == UNPLACEABLE)
        if doomed:
            try:
                self.cancel(doomed)
            except SchedulerUnavailable as exc:  # still waiting, then: say so, try again next poll
                for j in doomed:
                    seen[j] = SchedulerView("queued", "PENDING", None, never=f"{seen[j].never}; cancelling it failed ({exc})")
        return seen

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
        return f"{found}_{index}"  # every submission is an array (see slurm_executor.py)

    def abandon(self, name: str, folder: Path) -> None:
        bundle_path(folder, name).unlink(missing_ok=True)

    def cancel(self, job_ids: Iterable[str]) -> None:
        ids = sorted(set(job_ids))
        if ids:
            run_command(["scancel", *ids])
