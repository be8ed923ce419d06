"""The Slurm backend: submitit's Slurm executor, job arrays per resource signature, and
`sacct`/`squeue` read by pure parsers.

A cell's hardware and `gpus` become one structured request, and its submitit parameters
(`--partition`, typed GPUs, `--cpus-per-task`, `--mem`, `--time`, `--exclusive`, the cluster's
own sbatch options) are derived from that (backends/sbatch.py, which also holds the policy on
sbatch options from configuration). Cells with the same request go out as one job array.

Following jobs: one `sacct -X` call per poll for every open job (accounting keeps ended jobs),
and one `squeue -r` call, the authority on what still waits or runs (it carries the pending
reason; accounting lags a fresh submission and keeps a never-started array as one PENDING
range). The text both print is parsed by pure functions (slurm_states.py: `parse_sacct`,
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
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Iterable, Optional

from orchestrator.backends import sbatch
from orchestrator.backends.base import Backend, SchedulerUnavailable, SchedulerView
from orchestrator.backends.slurm_cluster import DEFAULT_MAX_ARRAY_SIZE, Cluster, Request, cluster_from, doubtful, refusal
from orchestrator.backends.slurm_executor import executor_class
from orchestrator.backends.slurm_states import (SACCT_FORMAT, SQUEUE_FORMAT, UNPLACEABLE, array_base, parse_sacct,
                                                parse_squeue, verdicts)
from orchestrator.backends.slurm_task import bundle_path

#: How long one sacct/squeue call may take before the scheduler counts as not answering.
COMMAND_TIMEOUT_S = 30.0

#: Minutes a job may wait for a reason that never clears before `status` cancels it (the
#: cluster config's `unplaceable_after_min`, else $ORCHESTRATOR_UNPLACEABLE_AFTER_MIN).
UNPLACEABLE_AFTER_MIN = 10.0
#: How long the cluster's facts read for `status` stay fresh (nodes come back from drain).
FACTS_MAX_AGE_S = 60.0


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
    """Slurm: every capability (backends/base.py) — it places requests, finds its submissions
    by name, and holds a follow-up job until others end."""

    name = "slurm"

    def __init__(self, cluster: dict[str, Any]) -> None:
        super().__init__(cluster)
        #: (when read, the cluster's facts or why they could not be read): once per sweep
        self._facts: Optional[tuple[float, Any]] = None
        #: The submitit parameters of each request met (a sweep's 10,000 cells ask a few requests)
        self._params: dict[Request, dict[str, Any]] = {}

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
        """`cluster.max_array_size`, else the cluster's MaxArraySize, else Slurm's default. The facts
        are read here wherever requests are checked (`refuse` then reads them from memory): a
        launch asks this before it takes the database's write lock, which a slow `scontrol`
        would otherwise hold for every other command."""
        try:
            facts = self.facts() if self.cluster.get("check_requests", True) or not self.cluster.get(
                "max_array_size") else None
        except SchedulerUnavailable:
            facts = None
        if self.cluster.get("max_array_size"):
            return int(self.cluster["max_array_size"])
        return facts.max_array_size if facts else DEFAULT_MAX_ARRAY_SIZE

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
        """submitit parameters of a cell's request, derived (and checked) once per request and
        handed out as a copy each time: the caller may change its own."""
        job = self.request(config)
        if job not in self._params:
            self._params[job] = sbatch.submitit_params(job, self.cluster)
        return {key: type(value)(value) if isinstance(value, (dict, list)) else value
                for key, value in self._params[job].items()}  # its own additional_parameters and setup

    def submit_named(self, executor: Any, fn: Any, specs: list[Any], params: dict[str, Any], name: str) -> list[str]:
        """One array under the job name `name`, by which `find` finds it again (its job ids:
        slurm_executor's submit_array, no submitit Job objects)."""
        executor.update_parameters(**{"job_name": name, **params})
        return executor.submit_array(fn, specs)

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
        return self.submit_named(executor, fn, [spec], params, name)[0]

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
