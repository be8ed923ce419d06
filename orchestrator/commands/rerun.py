"""`rerun --failed`: submit again the caller's repeats whose latest attempt failed, was lost or
cancelled: the cell their sweep recorded, on the caller's own site configuration
(orchestrator.launch.rerun picks and submits them; orchestrator/launch/rerun_config.py says why)."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.commands.common import CliError, add_sweep, add_user, pick_sweeps, reconcile, whose
from orchestrator.commands.render import one_line
from orchestrator.store.sql_adapters import Rows
from orchestrator.setting_registry import NAMES as SETTINGS
from trainers.common import failure_classes

if TYPE_CHECKING:
    from rich.console import Console

HELP = "submit failed cells again (their recorded config)"
#: Names a user may type for a framework, as the config tree's `tf` alias does.
FRAMEWORK_ALIASES = {"tf": "tensorflow"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--failed", action="store_true", required=True,
                   help="the repeats whose latest attempt failed, was lost or cancelled")
    add_sweep(p, help="only runs of this sweep (an id, a unique prefix, or 'latest')")
    p.add_argument("--class", dest="classes", metavar="A,B",
                   help=f"only these failure classes ({', '.join(failure_classes.NAMES)}; without it, "
                        f"all but {', '.join(sorted(set(failure_classes.NAMES) - set(failure_classes.RETRIED)))})")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="only cells whose setting KEY equals VALUE (e.g. framework=tensorflow); repeatable")
    p.add_argument("--time", type=int, metavar="MIN", help="give the reruns this time limit (minutes; without "
                   "it, a timed-out repeat gets twice its last limit, up to its partition's MaxTime)")
    p.add_argument("--mem", type=int, metavar="GB", help="give the reruns this much memory (GB)")
    p.add_argument("--dry-run", action="store_true", help="list what would be resubmitted; submit nothing")
    add_user(p, "rerun")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="your site's options, as a sweep takes them (cluster=NAME, cluster.setup=[...], paths.data=, "
                        "apptainer.images=, +framework.env=, hydra.searchpath=[...]): a rerun runs on your own "
                        "configuration, never on the one recorded in the database (docs/shared-results.md)")
    p.add_argument("--follow-up", action="store_true",
                   help="what retry.timeout=N's follow-up job runs (docs/slurm.md): collect first, then only the "
                        "timed-out repeats with a retry left in their sweep (fewer than N), each with twice its limit")


def run(args: argparse.Namespace, out: Console) -> int:
    # lazy: SQLAlchemy (~0.3 s) only in the commands that need it: `status` and --help start without it
    from orchestrator.store import db
    from orchestrator.launch import rerun
    from orchestrator.commands.collect import collect
    from orchestrator.launch.rerun_config import Site
    from rich.markup import escape

    if args.follow_up and (args.classes or args.time):
        raise CliError("--follow-up picks timed-out repeats and gives each twice its limit; drop --class and --time")
    site = Site(_overrides(args), args.db, args.runs)  # a bad override: its one line, before anything else
    if args.follow_up and collect(args.db, Path(args.runs), out):
        out.print("[yellow]some result files are broken (above); the rest were collected[/]")
    factory = db.open_db(args.db, create=False)
    with factory() as session:
        reconcile(Rows.of(session), None, out, args.runs)
        sweep = pick_sweeps(Rows.of(session), args.sweep)[0].id if args.sweep else None
        where = _where(args.where)
        classes = [c.strip() for c in args.classes.split(",")] if args.classes else None
        user, said = whose(args)
        out.print(f"{'would rerun' if args.dry_run else 'rerunning'} {said}", markup=False)
        picks, problems = rerun.pick(session, site, sweep, classes, where, args.time, args.mem, args.follow_up, user)
        for problem in problems:
            out.print(f"[yellow]cannot rerun[/] {escape(problem)}")  # it holds users and ids from the database
        if not picks and args.follow_up:
            out.print("nothing to retry: no timed-out repeat" + (f" of sweep {sweep}" if sweep else "")
                      + " has a retry left")
            return 0
        if not picks:
            out.print("nothing to rerun: no failed, lost or cancelled repeat matches"
                      + (" (and none without a successful run)" if not args.classes else ""))
            return 0
        verb = "would resubmit" if args.dry_run else "resubmitting"
        out.print(f"{verb} {len(picks)} repeat(s):")
        for p in picks:
            hardware = p.cell.config["hardware"]
            limit = f", limit {hardware['time_min']} min ({hardware['time_source']})" if hardware.get("time_source") else ""
            out.print(f"  {p.cell.label}  repeat {p.last.repeat} attempt {p.attempt}  (last: {p.last.state} "
                      f"{p.last.error_class or ''}, sweep {p.last.sweep_id}, run {p.last.uid}{limit})", markup=False)
        if args.dry_run:
            return 0
        return _print_reports(rerun.submit(session, picks), out)


def _overrides(args: argparse.Namespace) -> list[str]:
    """The site options typed; a follow-up job's also the launch's (from its pickle, orchestrator/launch/retry.py):
    it reruns on the site configuration its sweep was launched with."""
    # lazy: as in run(), Hydra's and SQLAlchemy's modules only where a rerun is asked for
    from orchestrator.launch import retry
    from orchestrator.launch.rerun_config import site_only

    text = os.environ.get(retry.OVERRIDES_ENV) or "[]" if args.follow_up else "[]"
    try:
        carried = json.loads(text)
    except ValueError:
        carried = None
    if not isinstance(carried, list) or not all(isinstance(item, str) for item in carried):
        raise CliError(f"{retry.OVERRIDES_ENV}={text[:200]!r} is not a JSON list of override strings; the follow-up "
                       f"job sets it from its pickle: unset it, or rerun with `orchestrator rerun --failed`")
    return [*site_only(carried), *args.overrides]


def _where(items: list[str]) -> dict[str, list[Any]]:
    """--where KEY=VALUE[,VALUE] (repeatable), by setting."""
    where: dict[str, list[Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in SETTINGS:
            raise CliError(f"--where {item!r}: expected SETTING=VALUE with SETTING one of "
                           f"{', '.join(SETTINGS)}")
        where.setdefault(key, []).extend(FRAMEWORK_ALIASES.get(v, v) for v in value.split(","))
    return where


def _print_reports(reports: list[Any], out: Console) -> int:
    """What each sweep's resubmission did; 1 where a repeat was not submitted or was refused."""
    from rich.markup import escape  # lazy, as in run(): a scheduler's message is text, never markup

    failures = 0
    for report in reports:
        for cell, job_id, n in report.submitted:
            out.print(f"  submitted {cell.label} as job {job_id}", markup=False)
        for cell, message in report.failed:
            failures += 1
            out.print(f"  [red]not submitted[/] {escape(cell.label)}: {escape(one_line(message))}")
        for _, reason in report.refused:  # e.g. more than the cluster's nodes hold, even now
            failures += 1
            out.print(f"  [red]refused[/] {escape(one_line(reason, 400))}", soft_wrap=True)
        for note in report.notes:
            out.print(f"  {note}", markup=False, soft_wrap=True)
    return 1 if failures else 0
