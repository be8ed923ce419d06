"""The one launch path: the foreground run (`python -m orchestrator ...`, orchestrator/hydra_app.py)
and the sweep (`-m`, hydra_plugins/orchestrator_launcher) both hand their cells here.

Two doors had drifted apart: the foreground one skipped the missing-dataset check and the
threads-beyond-CPUs rule. Here every input check runs once for whatever was asked for — the
cell's values (CellError), its request as the scheduler gets it (check_request), its dataset's
files, the database (config_checks), the learned limits and the dry run's listing — and only the
last step differs: a foreground cell runs here and is collected at once, a sweep returns (or,
with `wait=true`, follows its jobs).
"""
from __future__ import annotations

import gc
import os
import sys
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from orchestrator.sweep import config_checks
from orchestrator.store import db
from orchestrator import launcher_output
from orchestrator.sweep.cell import Cell, CellError
from orchestrator.sweep.dataset_files import missing_files
from orchestrator.launch.rerun_config import site_only
from orchestrator.store.sql_adapters import Rows
from orchestrator.launch.submit import submit_sweep
from orchestrator.launch.submit_options import Options, check_request
from orchestrator.launch.submit_plan import learn_time_limits
from orchestrator.launch.submit_refusals import refusal_settings


@dataclass(frozen=True)
class Asked:
    """One cell as asked for: its override line (how a refusal names it), how it resolves into a
    Cell (raising CellError), and its config as composed (a refusal's settings, read from it)."""

    overrides: str
    resolve: Callable[[], Cell]
    config: Callable[[], Any]


@dataclass
class Sorted:
    """What the checks made of the cells asked for (the input of a dry run or a submission)."""

    cells: list = field(default_factory=list)
    refused: list = field(default_factory=list)  # (override line, reason)
    refused_settings: dict = field(default_factory=dict)  # override line -> a refused cell's settings
    unready: list = field(default_factory=list)  # a dry run's cells whose dataset files are not there yet
    left_out: list = field(default_factory=list)  # a threads sweep's cells beyond the node's CPUs
    options: Any = None  # Options, read from the first cell that resolves


def launch(asked: Iterable[Asked], foreground: bool = False) -> None:
    """Checks every cell, then lists (dry_run=true) or submits those that pass; a sweep-wide bad
    value (paths, cluster, the database) ends the command with its message before anything is
    written, a cell's bad value refuses that cell only."""
    argv = ["python", "-m", "orchestrator", *sys.argv[1:]]
    # a foreground launch runs its cell's job in this process: the collector stays on for it
    with config_checks.stop_on_bad_input(), nullcontext() if foreground else collector_paused():
        found = sort_cells(asked)
        if found.left_out:
            launcher_output.print_left_out(found.left_out)
        if not found.cells:
            launcher_output.print_refused(found.refused)
            raise SystemExit(f"no cell of this sweep can be placed ({len(found.refused)} refused, "
                             f"{len(found.left_out)} left out); nothing was submitted")
        opts = found.options
        one_site(found.cells, opts.retry_timeout)
        if opts.dry_run:
            factory = config_checks.check_database(opts.db_url)  # its one open (None: no database yet)
            with factory() if factory else nullcontext() as session:
                learned = learn_time_limits(found.cells, opts, Rows.of(session) if session else None)
            launcher_output.print_cells(learned, found.refused, found.refused_settings)  # what each asks for, and why
            launcher_output.print_refused(found.unready,
                                          label="[yellow]needs data[/yellow] (a submission now refuses it)")
            return
        factory = db.open_db(opts.db_url)  # once: each step after is handed this handle
        report = submit_sweep(found.cells, opts, argv=argv, refused=found.refused,
                              refused_settings=found.refused_settings, foreground=foreground, factory=factory)
    launcher_output.print_submit_report(report, opts)
    if report.submitted and foreground:
        launcher_output.collect_and_show(factory, opts.db_url, opts.runs / report.sweep_id, report.sweep_id)
    elif report.submitted and opts.wait:
        launcher_output.follow_and_collect(report.sweep_id, opts, factory)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector off while a sweep's launch makes its cells, rows and task pickles,
    and on again as it was before the jobs are followed (a foreground launch, whose job runs in
    this process, keeps it on): those are tens of thousands of long-lived objects
    without cycles, which each of its passes walked again (a tenth of a 10,000-cell submission's
    CPU); what a launch leaves is freed by reference counts, any cycle at the next pass after.
    What was alive before (the imported modules, Hydra's and SQLAlchemy's state: long-lived) is
    frozen out of every later pass (`gc.freeze`), Python's own at exit included, which walked
    it all again (0.05–0.12 s of a 10,000-cell submission); a cycle among those is never freed,
    which a launching process, short-lived or following its jobs, can afford."""
    was_on = gc.isenabled()
    gc.disable()
    if was_on:
        gc.freeze()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def one_site(cells: list[Cell], retry_timeout: int) -> None:
    """retry.timeout's follow-up job reruns the sweep on one site configuration, the first followed
    cell's site options (orchestrator/launch/retry.py): refused, before anything is written, where the
    cells' differ (`cluster.setup=[a],[b]`); one launch per site configuration has each its own."""
    if retry_timeout and len({tuple(site_only(cell.overrides)) for cell in cells}) > 1:
        raise config_checks.refuse("retry.timeout", retry_timeout, "needs one site configuration for the whole "
                                   "sweep (its follow-up job reruns on one), and these cells' site options differ",
                                   "launch one sweep per site option, or drop retry.timeout")


def sort_cells(asked: Iterable[Asked]) -> Sorted:
    """Each cell asked for, checked: kept, refused (and why), left out, or (a dry run's) waiting for
    its data; two spellings of one cell (tf, tensorflow) kept once."""
    found, seen, requests = Sorted(), set(), set()  # requests: those checked (check_request), once each
    for one in asked:
        try:
            cell = one.resolve()
            if found.options is None:
                found.options = Options.from_config(cell.config)
            check_request(found.options.backend, cell.config, cell.label, requests)
            missing = missing_files(cell.config["dataset"])
            if missing and found.options.dry_run:  # placed, but a submission would refuse it now
                found.unready.append((one.overrides, f"{cell.where}: {missing}"))
            elif missing:
                raise CellError(f"{cell.where}: {missing}")
        except CellError as exc:
            found.refused.append((one.overrides, str(exc)))
            found.refused_settings[one.overrides] = refusal_settings(one.config())
            continue
        if beyond_cpus(cell):
            found.left_out.append(cell)
        elif cell.id not in seen:
            seen.add(cell.id)
            found.cells.append(cell)
    return found


def beyond_cpus(cell: Cell) -> bool:
    """A cell of a preset that sweeps threads up to the node's CPUs (`preset.threads_up_to_cpus`,
    conf/preset/threads.yaml) with more threads than its hardware's CPUs (this machine's, for
    hardware whose `cpus` is null): left out, not refused, since the sweep asked for no such cell."""
    preset = cell.config.get("preset") or {}
    if not preset.get("threads_up_to_cpus"):
        return False
    return cell.settings["threads"] > (cell.config["hardware"].get("cpus") or os.cpu_count() or 1)
