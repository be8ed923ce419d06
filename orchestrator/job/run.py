"""The job: what runs where a cell is scheduled (a Slurm node, or this machine).

For each repeat of its cell, the job makes the run directory, writes the resolved config,
starts the monitor, runs the trainer in its framework's environment with the event stream and
logs going to files, stops the monitor, computes the metrics over the trainer's measured window,
and writes `result.json` atomically (temporary file, then rename). A job never touches the
database: many jobs run at once on many nodes, and SQLite on a shared filesystem must have one
writer, the collector on the login node.

What the trainer's run says once it ended (its error, the nodes' records and combined figures)
is read by job_result.py.

`run_cell` is the function submitit pickles; it takes a `JobSpec`, a plain picklable record of
everything the job needs, so the job never reads back the sweep's config or the DB.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import yaml
from submitit.core.utils import UncompletedJobError

from orchestrator.job import job_result, node_group
from orchestrator import private_files, runstate, setting_registry
from orchestrator.job.job_result import TrainerRun
from orchestrator.job.monitor import Monitor, default_samplers
from orchestrator.results.resultfile import RESULT_NAME, RESULT_SCHEMA
from orchestrator.envs import builds
from orchestrator.envs.runtime import make_runtime
from orchestrator.envs.venv_runtime import REPO, EnvironmentNotReady
from trainers.common import failure_classes as fc



@dataclass
class RunSpec:
    """One run of a cell: which repeat, which attempt, and where it writes."""

    uid: str
    repeat: int
    attempt: int
    run_dir: str


@dataclass
class JobSpec:
    """Everything a job needs, resolved on the login node."""

    sweep_id: str
    cell_id: str
    settings: dict[str, Any]
    config: dict[str, Any]
    runs: list[RunSpec]
    runtime: dict[str, Any]          # kind, cache, images, binary
    data_dir: str | None = None
    monitor_period_s: float = 0.1
    executor: str = "local"
    lock: str | None = None          # a node-wide lock file: one timed cell at a time
    time_limit_s: float | None = None  # for all repeats, counted once the job holds the node
    extra: dict[str, Any] = field(default_factory=dict)


def run_cell(spec: JobSpec) -> list[str]:
    """Runs every repeat of one cell; returns the paths of the result files written (none on a
    node other than the first of a cell across nodes: node_group.py)."""
    with _exclusive(spec.lock):
        deadline = time.monotonic() + spec.time_limit_s if spec.time_limit_s else None
        if _nodes(spec) > 1 and os.environ.get("SLURM_NODEID", "0") != "0":
            for run in spec.runs:
                run_on_other_node(spec, run, deadline)
            return []
        return [str(run_once(spec, run, deadline)) for run in spec.runs]


def _nodes(spec: JobSpec) -> int:
    return int(spec.settings["nodes"])


@contextlib.contextmanager
def _exclusive(lock_path: str | None) -> Iterator[None]:
    """Waits for the node-wide lock, so local jobs measure one at a time (as --exclusive)."""
    if not lock_path:
        yield
        return
    Path(lock_path).parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel even if the job is killed
        yield


def trainer_args(settings: dict[str, Any], data_dir: str | None,
                 config: dict[str, Any] | None = None) -> list[str]:
    """The trainer protocol's command line for a cell's settings (docs/protocol.md): the flags
    setting_registry gives them. A setting a cell's settings lack (one made before the setting
    existed) is read from the cell's config."""
    known = {**{k: v for k, v in (config or {}).items() if k in setting_registry.BY_NAME}, **settings}
    args = setting_registry.trainer_flags(known)
    return args + ["--data-dir", str(data_dir)] if data_dir else args


def _job_id() -> str | None:
    try:
        import submitit  # optional: a job's id only under submitit (a foreground run has none)

        return str(submitit.JobEnvironment().job_id)
    except Exception:  # not under submitit: a foreground run
        return None


class TimeLimit(Exception):
    """The cell's time limit ran out while its trainer was running."""


class PeerFailed(Exception):
    """Another node of the cell reported a failure while this node's trainer was running."""


#: the way out of every time-limit failure, whichever clock ran out
MORE_TIME = fc.way_out(fc.TIMEOUT)


def _limit(spec: JobSpec) -> str:
    """The cell's time limit as a failure names it: ` (1 min)`; nothing where it has none."""
    return f" ({spec.time_limit_s / 60:g} min)" if spec.time_limit_s else ""


def run_once(spec: JobSpec, run: RunSpec, deadline: float | None = None) -> Path:
    """One run: trainer + monitor, then metrics over the measured window, then result.json."""
    run_dir = Path(run.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    # 0600: the config holds paths.db, a database URL with its password (private_files.py)
    private_files.write_text(run_dir / "config.yaml", yaml.safe_dump(spec.config, sort_keys=False))
    paths = _paths(run_dir)
    result: dict[str, Any] = {
        "schema": RESULT_SCHEMA, "run_uid": run.uid, "sweep_id": spec.sweep_id,
        "cell_id": spec.cell_id, "repeat": run.repeat, "attempt": run.attempt,
        "cell": spec.settings, "node": node_group.node_name(), "job_id": _job_id(),
        "executor": spec.executor, "started_at": time.time(), "paths": paths,
        "runtime": {"kind": spec.runtime.get("kind")},
    }
    _write_json(run_dir / "job.json", {k: result[k] for k in ("run_uid", "node", "job_id", "started_at")}
                | {"pid": os.getpid()})
    try:
        result.update(_measure(spec, run_dir, paths, deadline, run))
    except TimeLimit as exc:
        result.update(state=runstate.FAILED, error={"class": fc.TIMEOUT, "message": str(exc)})
    except EnvironmentNotReady as exc:
        result.update(state=runstate.FAILED, error={"class": exc.error_class, "message": str(exc)})
    except UncompletedJobError as exc:  # submitit's handler of Slurm's end-of-time signal
        result.update(state=runstate.FAILED, error={"class": fc.TIMEOUT, "message": (
            f"the scheduler signalled the end of the job's time limit{_limit(spec)} before the trainer "
            f"finished ({exc}); {MORE_TIME}")})
    except Exception as exc:  # the job's own failure must still leave a result behind
        result.update(state=runstate.FAILED, error={"class": fc.CRASH,
                                                    "message": f"job: {type(exc).__name__}: {exc}"})
    if _nodes(spec) > 1 and result.get("error") and node_group.read_node(run_dir, 0) is None:
        # failed before its trainer ran: the other nodes must not wait for it at the rendezvous
        node_group.write_node(run_dir, 0, node_group.node_name(), {"error": result["error"]})
    result["ended_at"] = time.time()
    path = run_dir / RESULT_NAME
    _write_json(path, result)
    return path


def _paths(run_dir: Path) -> dict[str, str]:
    """Where a node's job writes the trainer's events and log, the samples and the set-up log."""
    return {"run_dir": str(run_dir), "events": str(run_dir / "events.jsonl"),
            "stderr": str(run_dir / "trainer.log"), "samples": str(run_dir / "samples.jsonl"),
            "setup": str(run_dir / "setup.log")}


def _run_trainer(spec: JobSpec, run: RunSpec, paths: dict[str, str], deadline: float | None,
                 place: node_group.Place | None) -> TrainerRun:
    """This node's trainer beside this node's monitor, until it ends, the cell's time runs out
    (TimeLimit) or another node of the cell reports a failure (PeerFailed)."""
    framework = spec.config.get("framework") or {}  # `env` and `trainer` let a site add a trainer
    runtime = make_runtime(spec.runtime["kind"], framework.get("env") or spec.settings["framework"],
                           cache=spec.runtime.get("cache"), images=spec.runtime.get("images"),
                           binary=spec.runtime.get("binary", "apptainer"), trainer=framework.get("trainer"),
                           build=spec.settings["build"], modules=(spec.config.get("cluster") or {}).get("modules"),
                           threads=spec.settings.get("threads"))
    with open(paths["setup"], "a") as setup_log:
        def log(line: str) -> None:
            setup_log.write(line + "\n")
            setup_log.flush()
            print(line, flush=True)  # the job's own log shows the progress line too

        runtime.ensure(log)
    argv, env = runtime.command(trainer_args(spec.settings, spec.data_dir, spec.config), gpus=spec.settings["gpus"],
                                binds=[spec.data_dir] if spec.data_dir else [], run_dir=paths["run_dir"])
    env = {**os.environ, **builds.thread_env(spec.settings.get("build"), spec.settings.get("threads")), **env,
           **(place.trainer_env(run.repeat) if place else {})}
    gpus = int(spec.settings["gpus"])
    idle_s = _idle_seconds(spec, gpus)
    monitor = Monitor(default_samplers(gpus, env), spec.monitor_period_s, Path(paths["samples"]))
    monitor.measure_idle(idle_s)  # the GPUs' idle power, before the trainer loads them
    with open(paths["events"], "wb") as out, open(paths["stderr"], "wb") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env,
                                cwd=str(REPO), stdin=subprocess.DEVNULL)
        monitor.start(proc.pid)
        try:
            returncode = _wait(proc, spec, deadline, place, Path(run.run_dir))
        finally:
            if proc.poll() is None:  # the job itself was interrupted: leave no orphan trainer
                proc.kill()
                proc.wait()
            samples = monitor.stop()
    return TrainerRun(returncode, samples, monitor, runtime, argv, env, idle_s)


def _wait(proc: subprocess.Popen, spec: JobSpec, deadline: float | None, place: node_group.Place | None,
          run_dir: Path) -> int:
    """The trainer's exit status; on a cell across nodes, the other nodes' reports are read
    twice a second meanwhile, so that a failure on one stops every node at once."""
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return proc.wait(timeout=min(left, 0.5) if place else (None if left is None else max(1.0, left)))
        except subprocess.TimeoutExpired:
            if deadline is not None and time.monotonic() >= deadline - (0.0 if place else 1.0):
                raise TimeLimit(f"the trainer was still running when the cell's time limit "
                                f"({spec.time_limit_s:.0f} s) ran out; {MORE_TIME}") from None
            peer = node_group.failed_peer(place, run_dir) if place else None
            if peer:
                raise PeerFailed(f"stopped because node {peer['node']} reported {peer['error']['class']}") from None


def run_on_other_node(spec: JobSpec, run: RunSpec, deadline: float | None) -> None:
    """A node other than the first of a cell across nodes: its trainer and monitor, then its
    node.json (how it ended, where its files are) for the first node to read."""
    run_dir = Path(run.run_dir)
    rank = int(os.environ.get("SLURM_NODEID", "1"))
    node_dir = node_group.node_dir(run_dir, rank)
    node_dir.mkdir(parents=True, exist_ok=True)
    paths = _paths(node_dir)
    record: dict[str, Any] = {"paths": paths}
    name = node_group.node_name()
    try:
        place = node_group.from_slurm(_nodes(spec))
        name = place.name if place else name
        try:
            ran = _run_trainer(spec, run, paths, deadline, place)
        except (TimeLimit, PeerFailed) as exc:
            klass = fc.TIMEOUT if isinstance(exc, TimeLimit) else fc.RANK_FAILED
            record.update(error={"class": klass, "message": str(exc)}, returncode=None)
        else:
            events, _ = job_result.read_events(Path(paths["events"]))
            record.update(returncode=ran.returncode, monitor=ran.monitor.describe(),
                          error=job_result.own_error(events, ran.returncode, paths))
    except Exception as exc:  # the node's own failure must still reach the first node
        record["error"] = {"class": fc.CRASH, "message": f"job: {type(exc).__name__}: {exc}"}
    node_group.write_node(run_dir, rank, name, record)


def _measure(spec: JobSpec, run_dir: Path, paths: dict[str, str], deadline: float | None,
             run: RunSpec) -> dict[str, Any]:
    place = node_group.from_slurm(_nodes(spec))
    try:
        ran = _run_trainer(spec, run, paths, deadline, place)
    except PeerFailed as exc:
        own = {"class": fc.RANK_FAILED, "message": str(exc)}
        if place:
            node_group.write_node(run_dir, place.rank, place.name, {"error": own})
        return {"state": runstate.FAILED, "error": job_result.across_nodes(place, run_dir, own, deadline)[0]}
    except TimeLimit:
        if place:
            node_group.write_node(run_dir, place.rank, place.name, {"error": {"class": fc.TIMEOUT,
                                                                              "message": "time limit"}})
        raise
    returncode = ran.returncode
    if returncode == -signal.SIGUSR2:  # submitit asks Slurm for USR2 to every process near the end
        raise TimeLimit(f"the scheduler signalled the end of the job's time limit{_limit(spec)} (SIGUSR2) "
                        f"before the trainer finished; {MORE_TIME}")
    events, bad_lines = job_result.read_events(Path(paths["events"]))
    outcome = job_result.described(ran, events, spec.settings, exclusive=bool(spec.lock) or bool(
        (spec.config.get("cluster") or {}).get("exclusive")))
    error = job_result.own_error(events, returncode, paths, bad_lines)
    peers: dict[int, Any] = {}
    if place:
        node_group.write_node(run_dir, place.rank, place.name, {"error": error, "returncode": returncode,
                                                                "paths": paths})
        error, peers = job_result.across_nodes(place, run_dir, error, deadline)
        outcome["nodes"] = job_result.node_records(place, run_dir, paths, outcome["monitor"], returncode, peers)
    if error:
        outcome.update(state=runstate.FAILED, error=error)
        return outcome
    return _measured(spec, ran, run_dir, events, place, peers, outcome)


def _measured(spec: JobSpec, ran: TrainerRun, run_dir: Path, events: list[dict[str, Any]],
              place: node_group.Place | None, peers: dict[int, Any], outcome: dict[str, Any]) -> dict[str, Any]:
    """The outcome of a trainer that ended well: its metrics (combined across nodes), its ranks'
    checksums, and a failure where the figures are not of what it claims."""
    from orchestrator.job import metrics  # numpy: imported where a job measures, not where a sweep is submitted

    measured = metrics.compute(events, ran.samples, spec.config.get("hardware") or {})
    if measured.window is None:  # a trainer that ends cleanly must still have measured something
        outcome.update(state=runstate.FAILED, error={"class": fc.CRASH, "message": measured.reason})
        return outcome
    values = dict(measured)
    ranks, rank_note = job_result.ranks(events, peers)
    if place:
        values, energy_nodes = job_result.combined(place, run_dir, events, values, measured.energy, peers,
                                                   outcome["nodes"])
    if place or len(ranks) > 1:
        outcome["ranks"] = ranks
    failed = job_result.measured_but_wrong(ranks, measured)
    outcome.update(state=runstate.FAILED if failed else runstate.DONE, error=failed, window=measured.window,
                   metrics=values, notes="; ".join(n for n in (measured.reason, rank_note) if n) or None)
    if measured.energy:
        outcome["energy"] = {**measured.energy, "period_s": spec.monitor_period_s, "idle_s": ran.idle_s}
        if place:
            outcome["energy"].update(nodes=energy_nodes, combined=(
                f"summed over {place.nodes} nodes, each node's samples over node 0's measured window"))
    return outcome


def _idle_seconds(spec: JobSpec, gpus: int) -> float:
    """How long the GPUs' idle power is sampled before the trainer starts (monitor.idle_s; 0 for CPU)."""
    if gpus <= 0:
        return 0.0
    value = (spec.config.get("monitor") or {}).get("idle_s", 5.0)
    return max(0.0, float(value or 0.0))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomic write: a reader sees the old file or the whole new one, never half of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
