"""What Slurm says of a job, read from `sacct` and `squeue` by pure functions: each state's
phase and failure class, the records of both commands (array tasks, pending ranges and their `%`
limits), and the verdict on each job drawn from the two (`verdicts`), with the cluster's facts
where a waiting job can never start. Tested on canned output (tests/test_backends.py) beside
the tests on the real cluster; the Slurm backend (slurm.py) runs the commands.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from orchestrator.backends.base import SchedulerUnavailable, SchedulerView
from orchestrator.backends.slurm_cluster import Cluster, Request, hopeless, request_from_squeue, request_from_tres
from trainers.common import failure_classes as fc

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
    acct, queue = _lookup(sacct or []), _lookup(squeue or [])
    out: dict[str, SchedulerView] = {}
    for job_id in wanted:
        queued_now = _find(job_id, *queue) if squeue is not None else None
        accounted = _find(job_id, *acct) if sacct is not None else None
        base, _, index = job_id.partition("_")
        if accounted is None and queued_now is None and squeue is not None and index.isdigit() and acct[1].get(base):
            # accounting drops a task cancelled while it waited from its array's pending range and
            # keeps no record of it (Slurm 22.05): the range stands for it
            accounted = acct[1][base][0]
        seen = _verdict(queued_now, accounted, squeue is not None, cluster, now, unplaceable_after_s)
        if seen is not None:
            out[job_id] = seen
    return out


def _verdict(queued_now: Optional[Record], accounted: Optional[Record], queue_answered: bool,
             cluster: Optional[Cluster], now: Optional[float], after_s: Optional[float]) -> Optional[SchedulerView]:
    """One job's verdict from its queue record and its accounting record (None: no answer about it)."""
    request = accounted.request if accounted is not None and accounted.request else (
        queued_now.request if queued_now is not None else None)
    if queued_now is not None:  # the controller's word on what waits or runs now
        seen = _seen(queued_now)
        if seen.phase == "queued":
            seen = _waiting(seen, queued_now, request, cluster, now, after_s)
        if seen.phase != "unknown":
            return seen
    if accounted is not None:
        seen = _seen(accounted)
        if seen.phase == "queued" and queue_answered:
            # accounting keeps a never-started array task pending after it left the queue
            seen = SchedulerView("ended", LEFT_QUEUE, "left the queue before it started", fc.CANCELLED)
        elif seen.phase == "queued":  # (no squeue: no submission time, so no deadline)
            seen = _waiting(seen, accounted, request, cluster, None, None)
        if seen.phase == "ended":
            return _gave_up(seen, accounted, request, cluster)
        # running per accounting but no longer in the queue: it is ending; ask again later
        return None if queue_answered else seen
    # (with accounting off, the queue is all Slurm knows; sacct only, no record: too new for
    # accounting, or the controller is down: no answer)
    return SchedulerView("unknown", "") if queue_answered else None
