"""`status`: where each sweep's runs stand (their latest attempts, by state), the first failures
of each error class, and how to list them all (`--failed`).

The command typed most often, while a sweep runs: it reads with SQL text (orchestrator.store.queries)
through sqlite3 alone where it can (common.reading), so that it answers in half a second over
100,000 runs, and prints a summary whose length does not grow with the runs.
"""
from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any, Optional

from orchestrator.store import queries
from orchestrator import runstate
from orchestrator.sweep import time_limits
from orchestrator.commands.common import (
    PROG,
    CliError,
    Database,
    add_sweep,
    add_user,
    pick_sweeps,
    reading,
    reconcile,
    whose,
)
from orchestrator.commands.render import one_line, when
from orchestrator.store.sql_adapters import Rows
from trainers.common import failure_classes

if TYPE_CHECKING:
    from rich.console import Console

HELP = "where each sweep's runs stand, and what failed"
#: `status` shows this many failed runs of each error class per sweep (`--failed`: all of them).
EXAMPLES = 3
#: The states `status` lists as failures (latest attempts), and the class of one without any.
FAILURES = (runstate.FAILED, runstate.LOST)
NO_CLASS = failure_classes.NO_CLASS


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_sweep(p)
    p.add_argument("--failed", action="store_true",
                   help="list every failed or lost run (latest attempts), not the summary")
    p.add_argument("--class", dest="classes", metavar="A,B",
                   help=f"with --failed: only these error classes ({', '.join(failure_classes.NAMES)})")
    add_user(p, "with --failed: list")


def run(args: argparse.Namespace, out: Console) -> int:
    classes = [c.strip() for c in args.classes.split(",") if c.strip()] if args.classes else None
    if classes and not args.failed:
        raise CliError(f"--class picks what --failed lists: {PROG} status --failed --class {args.classes}")
    if (args.user or args.all_users) and not args.failed:
        raise CliError(f"--user and --all-users pick what --failed lists: {PROG} status --failed --all-users")
    return status(args.db, out, args.sweep, args.failed, classes, whose(args) if args.failed else (None, ""),
                  args.runs)


def status(database: Database, out: Console, sweep: Optional[str] = None, failed: bool = False,
           classes: Optional[list[str]] = None, user: tuple[Optional[str], str] = (None, ""),
           runs: Optional[str] = None) -> int:
    """The runs of the sweeps (`sweep`: one), brought up to date first (the run directories under
    `runs` read): counted by state with the first failures of each class, or (`failed`) every
    failed one of `classes` of `user` (commands.common.whose's)."""
    with reading(database) as rows:
        sweeps = pick_sweeps(rows, sweep)
        reconcile(rows, sweeps[0].id if sweep else None, out, runs)
        ids = [s.id for s in sweeps] if sweep else None
        if failed:
            return _list_failures(rows, ids, classes, user)
        counts = queries.latest_counts(rows, ids)
        _print_counts(rows, sweeps, counts, out)
        shown = FAILURES + runstate.IN_FLIGHT
        # the sweeps named even when all are asked for: the index is then read by (sweep, state) pairs
        groups = (queries.latest_groups(rows, [s.id for s in sweeps], shown)
                  if any(c.state in shown for c in counts) else [])
        waiting: dict[tuple[str, str], int] = {}  # the scheduler's words for why queued runs wait
        for g in groups:
            if g.state in runstate.IN_FLIGHT and g.state_detail is not None:
                waiting[g.state, g.state_detail] = waiting.get((g.state, g.state_detail), 0) + g.n
        for (state, detail), n in sorted(waiting.items()):
            out.print(f"{n} {state}: {detail}", markup=False)
        if any(c.state == runstate.RUNNING for c in counts):
            _print_time_left(rows, ids)
        _print_failure_examples(rows, sweeps, counts, groups)
    return 0


def _print_counts(rows: Rows, sweeps: list[Any], counts: list[Any], out: Console) -> None:
    """The table: per sweep, its cells and its runs by state (latest attempts), and earlier ones."""
    # lazy: rich's tables and console only where something is drawn with them
    from rich.table import Table
    from rich.text import Text  # a sweep id from the database is text, never markup

    by_sweep: dict[str, dict[str, int]] = {}
    for c in counts:
        by_state = by_sweep.setdefault(c.sweep_id, {})
        by_state[c.state] = by_state.get(c.state, 0) + c.n
    # cells linked counted only where the launcher recorded no count (sweeps the collector made)
    linked, earlier = queries.sweep_sizes(rows, [s.id for s in sweeps], [s.id for s in sweeps if not s.n_cells])
    states = [s for s in runstate.STATES if any(s in c for c in by_sweep.values())]
    table = Table(title="Runs by state (latest attempt of each repeat; retried: earlier attempts)",
                  title_justify="left")
    for name in ("sweep", "created", "cells", *states, "retried"):
        table.add_column(name, justify="left" if name in ("sweep", "created") else "right")
    for sweep in sweeps:
        c = by_sweep.get(sweep.id, {})
        retried = earlier.get(sweep.id, 0)
        cells = max(sweep.n_cells or 0, linked.get(sweep.id, 0))
        table.add_row(Text(sweep.id), when(sweep.created_at), str(cells),
                      *(str(c.get(s, "")) for s in states), str(retried or ""))
    out.print(table)


def _print_time_left(rows: Rows, sweep_ids: Optional[list[str]]) -> None:
    """The running jobs with the least time left of their limit (the config their sweep recorded;
    counted from the job's first run's start), the first EXAMPLES of them and how many more."""
    configs = queries.running_configs(rows, sweep_ids, runstate.RUNNING)
    now, jobs = time.time(), []
    for job in queries.running_jobs(rows, sweep_ids, runstate.RUNNING):
        config = configs.get((job.sweep_id, job.cell_id))
        limit = time_limits.recorded(config) if isinstance(config, dict) else None
        left = limit.minutes * 60.0 - (now - job.started_at) if limit and job.started_at else None
        jobs.append((left if left is not None else float("inf"), job, limit))
    jobs.sort(key=lambda j: j[0])
    print(f"\nRunning jobs, time left of their limit (least first; the first {EXAMPLES}):")
    for left, job, limit in jobs[:EXAMPLES]:
        if limit is None:
            says = "no time limit recorded"
        elif job.started_at is None:
            says = f"limit {limit.minutes} min ({limit.source}); its start is not recorded yet"
        elif left < 0:
            says = f"over its limit of {limit.minutes} min by {_duration(-left)}: its scheduler ends it"
        else:
            says = f"{_duration(left)} left of {limit.minutes} min ({limit.source})"
        print(f"  {job.framework}/{job.model}/{job.dataset}  sweep {job.sweep_id}  job {job.job_id or '(foreground)'}: "
              f"{says}")
    if len(jobs) > EXAMPLES:
        print(f"  ... {len(jobs) - EXAMPLES:,} more")


def _duration(seconds: float) -> str:
    """Seconds under two minutes, else whole minutes."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _print_failure_examples(rows: Rows, sweeps: list[Any], counts: list[Any], groups: list[Any]) -> None:
    """Per sweep, newest first: its failed and lost runs by error class, the first EXAMPLES of
    each with its message and log; then how to list them all."""
    totals: dict[tuple[str, str], int] = {}  # (sweep, class) -> failed or lost runs
    for c in counts:
        if c.state in FAILURES:
            key = (c.sweep_id, c.error_class or NO_CLASS)
            totals[key] = totals.get(key, 0) + c.n
    if not totals:
        return
    first: dict[tuple[str, str], list[int]] = {}  # (sweep, class) -> its first runs' ids
    for g in queries.first_runs(rows, {(g.sweep_id, g.state, g.error_class) for g in groups if g.state in FAILURES},
                                EXAMPLES):
        first.setdefault((g.sweep_id, g.error_class or NO_CLASS), []).append(g.id)
    first = {key: sorted(ids)[:EXAMPLES] for key, ids in first.items()}
    runs = queries.failures_by_id(rows, sorted(i for ids in first.values() for i in ids))
    for sweep in sweeps:
        classes = sorted((klass, n) for (s, klass), n in totals.items() if s == sweep.id)
        if not classes:
            continue
        print(f"\nFailed or lost runs of sweep {sweep.id} ({sum(n for _, n in classes):,}; "
              f"the first {EXAMPLES} of each class):")
        for klass, n in classes:
            way_out = failure_classes.way_out(klass)
            print(f"  {klass} ({n:,})" + (f": {way_out}" if way_out else ""))
            for run_id in first.get((sweep.id, klass), []):
                _print_failure(runs[run_id], indent="    ")
            if n > EXAMPLES:
                only = f" --class {klass}" if klass != NO_CLASS else ""
                print(f"    ... {n - EXAMPLES:,} more: {PROG} status --failed --sweep {sweep.id}{only}")
    print(f"\nEvery one: {PROG} status --failed [--sweep ID] [--class A,B]; "
          f"as CSV: {PROG} results --state failed,lost --csv")


def _list_failures(rows: Rows, sweep_ids: Optional[list[str]], classes: Optional[list[str]],
                   user: tuple[Optional[str], str]) -> int:
    """`status --failed`: every failed or lost run (latest attempts) of `user` (None: everyone's), streamed."""
    which = f" of class {', '.join(classes)}" if classes else ""
    print(f"Failed or lost runs{which} (latest attempts), {user[1] or 'every user'}:")
    n = 0
    for row in queries.latest_failures(rows, sweep_ids, FAILURES, classes, user[0]):
        _print_failure(row, indent="  ")
        n += 1
    print(f"{n} run(s)")
    if user[0] is not None:  # runs recorded before submitters were: nobody's, so shown to nobody by default
        unknown = sum(1 for _ in queries.latest_failures(rows, sweep_ids, FAILURES, classes, unknown_user=True))
        if unknown:
            print(f"{unknown} run(s) of unknown submitter not shown: --all-users takes them")
    return 0


def _print_failure(row: Any, indent: str) -> None:
    """A failed run in two lines: state, cell, run and log; class and message."""
    why = row.error_class or NO_CLASS
    if row.error_message:
        why += f": {one_line(row.error_message)}"
    print(f"{indent}{row.state:<6} {row.framework}/{row.model}/{row.dataset}  {row.uid}  "
          f"log: {row.log_path or '(none recorded)'}")
    print(f"{indent}       {why}")
