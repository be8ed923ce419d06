"""Submitting a sweep: record it, skip what is done, hand one job per cell to the executor.

This is the body of the project's Hydra launcher (hydra_plugins/orchestrator_launcher), kept
out of the plugin so it reads without Hydra's API around it. It does not wait for the jobs:
the sweep, its cells, its runs and their job ids are in the DB before it returns, and any later
shell follows them with `orchestrator status`. It does not care which executor it is given.
"""
from __future__ import annotations

import re
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from omegaconf import OmegaConf
from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.store import db, result_rows, schema
from orchestrator.launch import retry
from orchestrator import runstate, setting_registry
from orchestrator.sweep import config_checks, time_limits
from orchestrator.backends import Backend, SchedulerUnavailable, backend_for, sbatch
from orchestrator.backends.base import signature
from orchestrator.sweep.cell import Cell, CellError
from orchestrator.sweep.dataset_files import MADE_ON_FIRST_USE, made_on_first_use
from orchestrator.job.run import JobSpec, RunSpec, run_cell
from orchestrator.results.resultfile import run_uid
from orchestrator.envs.runtime import EnvironmentNotReady, make_runtime
from orchestrator.store.sql_adapters import Rows
from orchestrator.store.sqlite_lease import who
from trainers.common import failure_classes

#: A pending run's state_detail while its group is being handed to the executor.
SUBMITTING = "submitting as"


@dataclass
class Options:
    """The sweep-wide settings of the first composed config (paths, cluster, controls)."""

    db_url: str
    runs: Path
    data: Path
    cache: Path
    cluster: dict[str, Any]
    runtime: dict[str, Any]
    monitor_period_s: float
    repeats: int
    force: bool
    wait: bool
    dry_run: bool = False
    #: `retry.timeout`: automatic retries of a timed-out repeat (orchestrator/launch/retry.py).
    retry_timeout: int = 0
    #: The scheduler's backend, made from `cluster` (orchestrator.backends).
    backend: Backend = field(init=False, repr=False)

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "Options":
        """The sweep-wide settings, each checked: a bad one raises config_checks.ConfigError naming the
        key, the value and the way out, before anything is written."""

        paths, apptainer, monitor = cfg["paths"], cfg.get("apptainer") or {}, cfg.get("monitor") or {}
        for key in ("db", "runs", "data", "cache"):
            config_checks.one_line(f"paths.{key}", paths.get(key), f"set ORCHESTRATOR_{key.upper()} or paths.{key}= to "
                            + ("a database URL such as sqlite:///results.db" if key == "db" else "a directory"))
        sbatch.check_cluster(cfg["cluster"])  # cluster.executor: checked by backend_for (__post_init__)
        for key in ("images", "binary"):
            config_checks.one_line(f"apptainer.{key}", apptainer.get(key), f"set apptainer.{key}= to "
                            + ("a directory of <framework>.sif images" if key == "images" else "a command name"))
        for key, (least, most) in config_checks.MONITOR_BOUNDS.items():
            if key in monitor:
                config_checks.number(f"monitor.{key}", monitor[key], least, maximum=most)
        cache = Path(paths["cache"]).expanduser().absolute()
        return cls(
            db_url=paths["db"],
            runs=Path(paths["runs"]).expanduser().absolute(),
            data=Path(paths["data"]).expanduser().absolute(),
            cache=cache,
            cluster=dict(cfg["cluster"]),
            runtime={"kind": config_checks.one_of("runtime", cfg.get("runtime", "venv"), config_checks.RUNTIMES),
                     "cache": str(cache), "images": str(Path(apptainer["images"]).expanduser().absolute()),
                     "binary": apptainer["binary"]},
            monitor_period_s=float(monitor.get("period_s", 0.1)),
            repeats=config_checks.integer("repeats", cfg.get("repeats", 1), 1, config_checks.MAX_REPEATS,
                                   f"use repeats=N (the runs of each cell, 1 to {config_checks.MAX_REPEATS})"),
            force=config_checks.boolean("force", cfg.get("force", False)),
            wait=config_checks.boolean("wait", cfg.get("wait", False)),
            dry_run=config_checks.boolean("dry_run", cfg.get("dry_run", False)),
            retry_timeout=retry.timeouts(cfg),
        )

    def __post_init__(self) -> None:
        self.backend = backend_for(self.cluster)
        if self.retry_timeout and not self.backend.follows:
            raise config_checks.refuse(
                "retry.timeout", self.retry_timeout,
                f"needs a scheduler that starts a follow-up job once the sweep's jobs end (cluster=slurm); "
                f"cluster={self.cluster.get('name') or self.backend.name} has none",
                "drop retry.timeout and rerun timed-out cells with `orchestrator rerun --failed --class timeout`")


@dataclass
class SubmitReport:
    sweep_id: str
    submitted: list[tuple[Cell, str, int]] = field(default_factory=list)  # cell, job id, runs
    skipped: list[tuple[Cell, str]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)          # overrides, reason
    failed: list[tuple[Cell, str]] = field(default_factory=list)          # submission errors
    notes: list[str] = field(default_factory=list)                        # said once, e.g. "not checked"


def new_sweep_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def job_spec(cell: Cell, sweep_id: str, runs: list[schema.Run], opts: Options) -> JobSpec:
    hardware = cell.config["hardware"]
    dataset = cell.config["dataset"]
    data_dir = dataset.get("dir")
    return JobSpec(
        sweep_id=sweep_id,
        cell_id=cell.id,
        settings=cell.settings,
        config=cell.config,
        runs=[RunSpec(uid=r.uid, repeat=r.repeat, attempt=r.attempt, run_dir=r.run_dir) for r in runs],
        runtime=opts.runtime,
        data_dir=str(Path(data_dir).expanduser().absolute()) if data_dir else None,
        monitor_period_s=opts.monitor_period_s,
        executor=opts.backend.name,
        lock=opts.backend.node_lock(opts.cache),
        time_limit_s=60.0 * time_limits.configured(hardware, opts.cluster) if hardware.get("time_min") else None,
    )


#: Ids per `IN (...)` of the queries that look up a sweep's cells (SQLite allows 32,766 variables).
CHUNK = 900


#: What a retype decides by, of each run the database has of a sweep's cells (_plan_runs).
_KNOWN_RUN_COLUMNS = ("uid", "cell_id", "repeat", "attempt", "state", "state_detail", "job_id")


def _known(session: Session, cells: list[Cell]) -> tuple[set[str], dict[str, list[Any]]]:
    """What the database already has of these cells: their ids, and every run of each (the
    columns _plan_runs reads, as rows: not ORM objects, which a retype of 1,000 cells paid for)
    — a few queries for the whole sweep, not two per cell."""
    ids = sorted({cell.id for cell in cells})
    known: set[str] = set()
    runs: dict[str, list[Any]] = {}
    table = schema.Run.__table__
    for i in range(0, len(ids), CHUNK):
        chunk = ids[i:i + CHUNK]
        known.update(session.scalars(select(schema.Cell.id).where(schema.Cell.id.in_(chunk))))
        query = select(*(table.c[k] for k in _KNOWN_RUN_COLUMNS)).where(table.c.cell_id.in_(chunk))
        for run in session.execute(query):
            runs.setdefault(run.cell_id, []).append(run)
    return known, runs


def _record_cells(session: Session, sweep_id: str, cells: list[Cell], known: set[str], planned: set[str]) -> None:
    """The sweep's cells (the new ones) and its membership rows: two bulk INSERTs. A member's
    resolved config (what `rerun` resubmits, and tracking's cluster) is kept where this sweep
    runs it (`planned`): a skipped cell has no run here to need it (a retype of 1,000 done cells
    wrote 1,000 configs for nothing)."""
    now = time.time()
    new = [{"id": cell.id, "settings": kept, "created_at": now, **kept}
           for cell in cells if cell.id not in known for kept in [setting_registry.recorded(cell.settings)]]
    if new:
        session.execute(insert(schema.Cell.__table__), new)
    session.execute(insert(schema.SweepCell.__table__), [
        {"sweep_id": sweep_id, "cell_id": cell.id, "config": cell.recorded if cell.id in planned else None}
        for cell in cells])


def _plan_runs(sweep_id: str, cell: Cell, opts: Options, existing: list[Any]) -> tuple[list[schema.Run], str]:
    """The runs this sweep adds for a cell (given the runs it has), or none and the reason it is skipped."""
    wanted, reasons = [], []
    for repeat in range(opts.repeats):
        mine = [r for r in existing if r.repeat == repeat]
        done = [r for r in mine if r.state == runstate.DONE]
        flying = [r for r in mine if r.state in runstate.IN_FLIGHT]
        unsure = [r for r in mine if r.state == runstate.PENDING and r.job_id is None
                  and (r.state_detail or "").startswith(SUBMITTING)]
        if unsure:  # even force=true: a second submission could measure it twice
            reasons.append(f"repeat {repeat}: an interrupted submission ({unsure[0].state_detail}) is not "
                           f"resolved yet, since the scheduler did not answer; type the sweep again later")
        elif flying and not opts.force:
            reasons.append(f"repeat {repeat} in flight (run {flying[0].uid}, job {flying[0].job_id})")
        elif done and not opts.force:
            reasons.append(f"repeat {repeat} already done (run {done[0].uid})")
        else:
            attempt = 1 + max((r.attempt for r in mine), default=0)
            wanted.append((repeat, attempt))
    runs = [new_run(sweep_id, cell.id, repeat, attempt, opts) for repeat, attempt in wanted]
    return runs, "; ".join(reasons)


def new_run(sweep_id: str, cell_id: str, repeat: int, attempt: int, opts: Options) -> schema.Run:
    """One attempt at one repeat, pending, with its run directory (`<repeat>[.<attempt>]`): a row
    for insert_runs to write (never added to a session, so that a sweep's thousands of runs cost
    one INSERT, not the ORM's bookkeeping of each)."""
    name = str(repeat) if attempt == 1 else f"{repeat}.{attempt}"
    user, host = who()
    return schema.Run(uid=run_uid(sweep_id, cell_id, repeat, attempt), sweep_id=sweep_id, cell_id=cell_id,
                  repeat=repeat, attempt=attempt, state=runstate.PENDING, executor=opts.backend.name,
                  run_dir=str(opts.runs / sweep_id / cell_id / name), latest=True, submit_user=user,
                  submit_host=host)


#: The columns new_run sets (and rerun's submitted_at): what insert_runs writes of each run.
_NEW_RUN_COLUMNS = ("uid", "sweep_id", "cell_id", "repeat", "attempt", "state", "executor", "run_dir",
                    "submitted_at", "latest", "submit_user", "submit_host")


def insert_runs(session: Session, runs: list[schema.Run], earlier: Iterable[Any] | None = None) -> None:
    """Inserts new runs (new_run's) in one executemany, in the session's transaction, and makes
    each the latest attempt of its repeat (schema.mark_latest): the attempts they follow stop being
    the current word. `earlier`: every run the database has of these runs' cells (None: not
    known, so every repeat is marked); a new run whose repeat has none there is its only
    attempt, inserted latest already (a first submission's thousands need no UPDATE)."""
    if not runs:
        return
    session.execute(insert(schema.Run.__table__), [{k: getattr(run, k) for k in _NEW_RUN_COLUMNS} for run in runs])
    keys = [(run.cell_id, run.repeat) for run in runs]
    if earlier is not None:
        had = {(run.cell_id, run.repeat) for run in earlier}
        keys = [key for key in keys if key in had]
    schema.mark_latest(session.connection(), keys)
    # an earlier attempt no longer the latest leaves its cell's kept summary (result_rows)
    result_rows.refresh_summary(session.connection(), {cell for cell, _ in keys}, kept_only=True)


def update_runs(session: Session, changes: Iterable[tuple[schema.Run, dict[str, Any]]]) -> None:
    """Sets columns of recorded runs (insert_runs' rows, held outside the session): each run's
    values (the same columns for every run), on the objects too, for what reads them after.
    One executemany by uid, in the session's transaction (the caller commits)."""
    rows = []
    for run, values in changes:
        for key, value in values.items():
            setattr(run, key, value)
        rows.append({"b_uid": run.uid, **values})
    if rows:
        table = schema.Run.__table__
        session.execute(update(table).where(table.c.uid == bindparam("b_uid")), rows)


def check_request(backend: Backend, config: dict[str, Any], label: str) -> None:
    """A cell's request as its backend will hand it to the scheduler (on Slurm: every sbatch
    option, through sbatch.sbatch_request); a bad one refuses that cell only (CellError)."""
    try:
        backend.resources(config)
    except config_checks.ConfigError as exc:
        raise CellError(f"{label}: {exc}") from None


def submit_sweep(cells: list[Cell], opts: Options, argv: list[str] | None = None,
                 refused: list[tuple[str, str]] | None = None, foreground: bool = False,
                 progress: Callable[[str], None] = lambda line: None,
                 refused_settings: Mapping[str, Mapping[str, Any]] | None = None,
                 factory: sessionmaker | None = None) -> SubmitReport:
    """Records the sweep and submits one job per cell that still needs runs; returns at once.
    `cells` are distinct (the launcher keeps the first spelling of a cell typed twice: tf, tensorflow).

    The cells refused at expansion (`refused`: override line, reason) are recorded with the sweep
    (schema.Refusal), with what their config said of their settings (`refused_settings`, by override
    line: refusal_settings), so that a report can name them and why. `factory`: the launch's handle."""
    report = SubmitReport(sweep_id=new_sweep_id(), refused=list(refused or []))
    factory = factory or db.open_db(opts.db_url)
    with factory() as session:
        adopt_interrupted(session, opts.backend)
        user, host = who()
        session.add(schema.Sweep(id=report.sweep_id, created_at=time.time(), argv=db.recordable(argv or sys.argv),
                             overrides=[db.recordable(c.overrides) for c in cells], n_cells=len(cells),
                             submit_user=user, submit_host=host))
        session.flush()  # the sweep first: its refusals refer to it
        for overrides, reason in report.refused:
            session.add(_refusal(report.sweep_id, overrides, reason, (refused_settings or {}).get(overrides)))
        planned = []
        known, existing = _known(session, cells)
        for cell in cells:
            runs, reason = _plan_runs(report.sweep_id, cell, opts, existing.get(cell.id, []))
            if runs:
                planned.append((cell, runs))
            else:
                report.skipped.append((cell, reason))
        learned = {c.id: c for c in learn_time_limits([cell for cell, _ in planned], opts, Rows.of(session))}
        planned, cells = [(learned[c.id], runs) for c, runs in planned], [learned.get(c.id, c) for c in cells]
        _record_cells(session, report.sweep_id, cells, known, set(learned))
        report.notes += made_on_first_use({c.config["dataset"]["dir"] for c, _ in planned if c.config["dataset"]
                                           .get("name") in MADE_ON_FIRST_USE and c.config["dataset"].get("dir")})
        insert_runs(session, [run for _, runs in planned for run in runs],
                    earlier=[run for runs in existing.values() for run in runs])
        session.commit()  # the sweep and its pending runs exist before anything is submitted
        submit_runs(session, report.sweep_id, planned, opts, report, foreground, progress)
    return report


def learn_time_limits(cells: list[Cell], opts: Options, rows: Rows | None) -> list[Cell]:
    """The cells with `time_min: auto` learned (time_limits.learn: new cells) from the command's open
    database (`rows`; None: none yet), the build counted where a job builds its environment."""
    built: dict[str, bool] = {}  # by environment: its recipe read and hashed once, not once per cell

    def builds(cell: Cell) -> bool:
        env = (cell.config.get("framework") or {}).get("env") or cell.settings["framework"]
        if env not in built:
            try:
                built[env] = make_runtime(opts.runtime["kind"], env, opts.cache, Path(opts.runtime["images"]),
                                          opts.runtime["binary"]).builds_in_job()
            except EnvironmentNotReady:  # no recipe: the job fails at once, building nothing
                built[env] = False
        return built[env]

    return time_limits.learn(cells, rows, opts.backend.max_time_min, opts.cluster, builds)


def refusal_settings(cfg: Any) -> dict[str, Any]:
    """A refused cell's settings as far as its composed config resolves, None where it does not:
    where a report puts the cell's `n/a` and its reason. The defaults are setting_registry's, read
    as expansion reads them (read_settings), from a config that may not resolve or check."""
    def get(key: str) -> Any:
        try:
            value = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        except Exception:  # a key that does not resolve is as good as unknown here
            return None
        return value if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None

    settings = setting_registry.read_settings(get)
    return {name: setting_registry.stored(name, value)
            if isinstance(value, setting_registry.BY_NAME[name].json_types) else None
            for name, value in settings.items()}


def _refusal(sweep_id: str, overrides: str, reason: str, settings: Mapping[str, Any] | None) -> schema.Refusal:
    settings, kept = dict(settings or {}), " ".join(db.recordable(overrides.split(" ")))
    return schema.Refusal(sweep_id=sweep_id, overrides=kept, reason=db.hide_passwords(reason), settings=settings or None,
                      **{key: settings.get(key) for key in setting_registry.HEADLINE})


def submit_runs(session: Session, sweep_id: str, planned: list[tuple[Cell, list[schema.Run]]], opts: Options,
                report: SubmitReport, foreground: bool = False,
                progress: Callable[[str], None] = lambda line: None) -> None:
    """Hands recorded runs to the executor: one submission per resource signature (an array on Slurm).

    A signature the scheduler can never place (`Backend.refuse`: no node of its partition holds
    it) is refused, its runs failed `unplaceable` with the reason, and never submitted; one
    bigger than the scheduler's array limit goes out as several submissions.

    Before a group's submission its runs are marked with the group's job name and their index
    in it, and committed; the job ids are committed right after. A submission killed between
    the two is found again by name the next time (`adopt_interrupted`), never submitted twice."""
    if foreground:
        for cell, runs in planned:
            _mark(session, runs, runstate.RUNNING, job_id=None)
            session.commit()
            run_cell(job_spec(cell, sweep_id, runs, opts))
            report.submitted.append((cell, "foreground", len(runs)))
        return
    groups: dict[str, tuple[dict[str, Any], list[tuple[Cell, list[schema.Run]]]]] = {}
    for cell, runs in planned:
        params = opts.backend.resources(cell.config)
        groups.setdefault(signature(params), (params, []))[1].append((cell, runs))
    batches, checked, step = [], True, opts.backend.array_limit() or len(planned) or 1
    followed: list[tuple[Cell, str]] = []  # (cell, job) whose runs may still be retried
    first = retry.first_attempts(Rows.of(session), sweep_id) if opts.retry_timeout else {}  # what retries count from
    for params, group in groups.values():
        try:
            reason = opts.backend.refuse(group[0][0].config) if checked else None  # one request per group
        except SchedulerUnavailable as exc:  # silence refuses nothing: submit as asked
            checked, reason = False, None
            report.notes.append(f"requests not checked against the cluster ({exc}); submitted as asked")
        if reason:
            _mark(session, [run for _, runs in group for run in runs], runstate.FAILED, job_id=None,
                  error=(failure_classes.UNPLACEABLE, reason))
            session.commit()
            report.refused += [(" ".join(cell.overrides), f"{cell.label}: {reason}") for cell, _ in group]
            continue
        batches += [(params, group[i:i + step]) for i in range(0, len(group), step)]
    for params, members in batches:
        name = f"orch-{sweep_id}-{secrets.token_hex(3)}"
        update_runs(session, [(run, {"state_detail": f"{SUBMITTING} {name}[{index}/{len(members)}]"})
                              for index, (_, runs) in enumerate(members) for run in runs])
        session.commit()
        try:
            # one executor per array: submitit's update_parameters merges, so a parameter one array set (its
            # --time-min, GPUs) stayed on every later array that sets none (issue 35: found through sbatch)
            executor = opts.backend.executor(opts.runs / sweep_id / ".submitit")
            job_ids = opts.backend.submit(executor, run_cell, [job_spec(c, sweep_id, r, opts) for c, r in members],
                                          params, name)
        except Exception as exc:  # one group's submission failing never stops the sweep
            _mark(session, [run for _, runs in members for run in runs], runstate.FAILED, job_id=None,
                  error=("submit", f"{type(exc).__name__}: {exc}"))
            session.commit()
            report.failed += [(cell, str(exc)) for cell, _ in members]
            continue
        now = time.time()
        update_runs(session, [(run, {"state": runstate.SUBMITTED, "job_id": job_id, "submitted_at": now,
                                     "state_detail": None})
                              for (_, runs), job_id in zip(members, job_ids) for run in runs])
        for (cell, runs), job_id in zip(members, job_ids):
            report.submitted.append((cell, job_id, len(runs)))
            progress(f"submitted {cell.label} as job {job_id}")
            if any(retry.retry_left(cell.config, run.attempt, first.get((cell.id, run.repeat), 1)) for run in runs):
                followed.append((cell, job_id))
        session.commit()
    if followed:
        report.notes.append(retry.follow_up(sweep_id, [job for _, job in followed], followed[0][0].config,
                                            opts.backend, opts.db_url, opts.runs, followed[0][0].overrides))


#: A cancelled run's state_detail when its submission was given up (the name it went out under).
GIVEN_UP = "submission {name} interrupted before the job was handed over"
LANDED_LATE = "; its array {job} landed later and was cancelled"


def adopt_interrupted(session: Session, backend: Backend) -> None:
    """Runs left `pending` by a submission killed mid-way: adopt the job the scheduler has, or give up.

    The name recorded before `sbatch` is looked up in the scheduler; a job found under it is
    the run's job (task `index` of an array), so typing the sweep again does not submit it a
    second time, and its tasks take their pickles from the array's bundle (backends/slurm_task.py).
    A submission the scheduler does not have is given up: its runs are cancelled (and planned
    anew by the caller), its bundle of pickles removed so that an sbatch still on its way runs nothing,
    and an array that lands later anyway is cancelled here the next time, and recorded. While
    the scheduler does not answer, nothing is decided: the runs stay pending.
    """
    orphans = session.scalars(select(schema.Run).where(schema.Run.state == runstate.PENDING,
                                                   schema.Run.job_id.is_(None))).all()
    marked = {}
    for run in orphans:
        match = re.fullmatch(rf"{SUBMITTING} (\S+)\[(\d+)/(\d+)\]", run.state_detail or "")
        if match:
            marked[run.uid] = (match.group(1), int(match.group(2)))
    given_up = _given_up(session)
    names = {m[0] for m in marked.values()} | set(given_up)
    try:
        found = backend.find(names) if names else {}
    except SchedulerUnavailable:
        return
    now = time.time()
    abandoned: dict[str, Path] = {}
    for run in orphans:
        name, index = marked.get(run.uid, (None, 0))
        if name in found:
            run.state, run.submitted_at = runstate.SUBMITTED, now
            run.job_id = backend.task_job_id(found[name], index)
            run.state_detail = f"adopted from interrupted submission {name}"
            continue
        run.state = runstate.CANCELLED
        run.state_detail = GIVEN_UP.format(name=name) if name else "recorded, never handed to the scheduler"
        if name and run.run_dir:
            abandoned[name] = Path(run.run_dir).parents[1] / ".submitit"
    for name, folder in abandoned.items():
        backend.abandon(name, folder)
    session.commit()
    # an sbatch that was still on its way when we looked may land at any time: look once more
    # for what was just given up, and for what was given up before
    late = {name: runs for name, runs in given_up.items() if name in found}
    if abandoned:
        try:
            again = backend.find(abandoned)
        except SchedulerUnavailable:
            again = {}
        for name, job in again.items():
            found[name] = job
            late[name] = session.scalars(select(schema.Run).where(
                schema.Run.state_detail == GIVEN_UP.format(name=name))).all()
    for name, runs in late.items():
        try:
            backend.cancel([found[name]])
        except SchedulerUnavailable:
            continue
        for run in runs:
            run.state_detail += LANDED_LATE.format(job=found[name])
    session.commit()


def _given_up(session: Session) -> dict[str, list[schema.Run]]:
    """Given-up submissions whose array has not (yet) been seen landing late, by name."""
    out: dict[str, list[schema.Run]] = {}
    prefix, _, suffix = GIVEN_UP.partition("{name}")
    for run in session.scalars(select(schema.Run).where(schema.Run.state == runstate.CANCELLED,
                                                    schema.Run.state_detail.like(prefix + "%" + suffix))):
        name = run.state_detail[len(prefix):-len(suffix)]
        out.setdefault(name, []).append(run)
    return out


def _mark(session: Session, runs: list[schema.Run], state: str, job_id: str | None,
          error: tuple[str, str] | None = None) -> None:
    """Puts recorded runs in `state` (with the failure class and message of `error`); the caller commits."""
    values = {"state": state, "job_id": job_id, "submitted_at": time.time()}
    if error:
        values.update(error_class=error[0], error_message=error[1])
    update_runs(session, [(run, values) for run in runs])
