"""The orchestrator's subcommands: `status`, `collect`, `results` and `rerun`.

`python -m orchestrator -m ...` launches sweeps through Hydra; these four subcommands look after
what the sweeps left: where the runs stand (`status`), landing finished runs' result files in
the database (`collect`), the measurements themselves (`results`, a table or CSV from the
`results` view, or per cell over its repeats with `--summary`), and submitting failed repeats
again (`rerun`). They print plain text quickly and answer bad input with a message that says
what to do, never a traceback.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from sqlalchemy import String, func, select
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from . import cell as cell_module
from . import db, runstate
from .collector import collect
from .safety import ConfigError

PROG = "python -m orchestrator"
LAUNCH_HINT = f"run a sweep first: {PROG} -m framework=torch model=lenet dataset=mnist"

#: A failed run's message is cut to this many characters in `status`.
MESSAGE_WIDTH = 120


#: Names a user may type for a framework, as the config tree's `tf` alias does.
FRAMEWORK_ALIASES = {"tf": "tensorflow"}


class CliError(Exception):
    """A problem with what the user asked for; its message says what to do instead."""


def default_runs() -> str:
    return os.environ.get("ORCHESTRATOR_RUNS", "runs")


def build_parser() -> argparse.ArgumentParser:
    # --db and --runs are accepted before or after the subcommand; SUPPRESS keeps a value
    # given before it from being reset by the subcommand's own (absent) option.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=argparse.SUPPRESS, metavar="URL",
                        help="results database (default: $ORCHESTRATOR_DB or sqlite:///results.db)")
    common.add_argument("--runs", default=argparse.SUPPRESS, metavar="DIR",
                        help="run directories (default: $ORCHESTRATOR_RUNS or ./runs)")

    parser = argparse.ArgumentParser(prog=PROG, parents=[common],
                                     description="Inspect and collect benchmark sweeps.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{status,collect,results,rerun}")

    p = sub.add_parser("status", parents=[common], help="where each sweep's runs stand, and what failed")
    p.add_argument("--sweep", metavar="ID", help="one sweep (an id, a unique prefix, or 'latest')")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("collect", parents=[common], help="land finished runs' result.json files in the DB")
    p.set_defaults(func=cmd_collect)

    p = sub.add_parser("results", parents=[common], help="the measurements, as a table or CSV")
    p.add_argument("--sweep", metavar="ID", help="one sweep (an id, a unique prefix, or 'latest')")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="keep rows whose column KEY equals VALUE (VALUE may be a,b for either); repeatable")
    p.add_argument("--state", metavar="STATE", help="keep runs in this state (or states, comma-separated)")
    p.add_argument("--csv", action="store_true", help="print every column of the results view as CSV")
    p.add_argument("--summary", action="store_true",
                   help="one row per cell over its repeats: n, median images/s, CV, min/max, noisy flag")
    p.add_argument("--noisy-cv", type=float, default=None, metavar="PCT",
                   help=f"with --summary: flag a cell noisy above this CV in %% "
                        f"(default $ORCHESTRATOR_NOISY_CV or {db.NOISY_CV * 100:g})")
    p.set_defaults(func=cmd_results)

    p = sub.add_parser("rerun", parents=[common], help="submit failed cells again (their recorded config)")
    p.add_argument("--failed", action="store_true", required=True,
                   help="the repeats whose latest attempt failed, was lost or cancelled")
    p.add_argument("--sweep", metavar="ID", help="only runs of this sweep (an id, a unique prefix, or 'latest')")
    p.add_argument("--class", dest="classes", metavar="A,B",
                   help="only these failure classes (timeout, out_of_memory, crash, lost, cancelled, ...)")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="only cells whose setting KEY equals VALUE (e.g. framework=tensorflow); repeatable")
    p.add_argument("--time", type=int, metavar="MIN", help="give the reruns this time limit (minutes)")
    p.add_argument("--mem", type=int, metavar="GB", help="give the reruns this much memory (GB)")
    p.add_argument("--dry-run", action="store_true", help="list what would be resubmitted; submit nothing")
    p.set_defaults(func=cmd_rerun)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs one subcommand; returns the exit status (0 ok, 1 a problem reported, 2 bad usage)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse has already printed
        return exc.code if isinstance(exc.code, int) else 2
    args.db = getattr(args, "db", None) or db.default_url()
    args.runs = getattr(args, "runs", None) or default_runs()
    try:
        return args.func(args, _console())
    except CliError as exc:
        message = str(exc)
    except ConfigError as exc:  # a recorded config `rerun` resubmits, refused by today's checks
        message = str(exc)
    except db.NoDatabase as exc:
        message = f"{exc}; {LAUNCH_HINT} (or point --db / ORCHESTRATOR_DB at an existing database)"
    except db.SchemaError as exc:
        message = str(exc)
    except (ArgumentError, ImportError) as exc:
        message = f"cannot use database URL {_shown(args.db)!r}: {exc}"
    except SQLAlchemyError as exc:
        message = f"database error ({_shown(args.db)}): {getattr(exc, 'orig', None) or exc}"
    print(message, file=sys.stderr)
    return 1


def _console() -> Console:
    """Rich output on stdout: the terminal's width there, else wide enough not to cut rows."""
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 200
    return console


# --- status -----------------------------------------------------------------------------------

def cmd_status(args: argparse.Namespace, out: Console) -> int:
    Session = db.open_db(args.db, create=False)  # a read never creates a database
    with Session() as session:
        sweeps = _pick_sweeps(session, args.sweep)
        _reconcile(session, sweeps[0].id if args.sweep else None, out)
        ids = [s.id for s in sweeps]
        current = db.latest_runs()
        counts: dict[str, dict[str, int]] = {}
        for sweep_id, state, n in session.execute(
                select(current.c.sweep_id, current.c.state, func.count())
                .where(current.c.sweep_id.in_(ids)).group_by(current.c.sweep_id, current.c.state)):
            counts.setdefault(sweep_id, {})[state] = n
        linked = dict(session.execute(
            select(db.SweepCell.sweep_id, func.count()).where(db.SweepCell.sweep_id.in_(ids))
            .group_by(db.SweepCell.sweep_id)).all())
        all_runs = dict(session.execute(
            select(db.Run.sweep_id, func.count()).where(db.Run.sweep_id.in_(ids)).group_by(db.Run.sweep_id)).all())

        states = [s for s in runstate.STATES if any(s in c for c in counts.values())]
        table = Table(title="Runs by state (latest attempt of each repeat; retried: earlier attempts)",
                      title_justify="left")
        for name in ("sweep", "created", "cells", *states, "retried"):
            table.add_column(name, justify="left" if name in ("sweep", "created") else "right")
        for sweep in sweeps:
            c = counts.get(sweep.id, {})
            retried = all_runs.get(sweep.id, 0) - sum(c.values())
            cells = max(sweep.n_cells or 0, linked.get(sweep.id, 0))
            table.add_row(sweep.id, _when(sweep.created_at), str(cells),
                          *(str(c.get(s, "")) for s in states), str(retried or ""))
        out.print(table)

        waiting = session.execute(  # the scheduler's words for why queued runs wait
            select(current.c.state, current.c.state_detail, func.count())
            .where(current.c.sweep_id.in_(ids), current.c.state.in_(runstate.IN_FLIGHT),
                   current.c.state_detail.is_not(None))
            .group_by(current.c.state, current.c.state_detail)).all()
        for state, detail, n in waiting:
            out.print(f"{n} {state}: {detail}", markup=False)

        failed = session.execute(
            select(current.c.uid, current.c.state, current.c.error_class, current.c.error_message,
                   current.c.log_path, db.Cell.framework, db.Cell.model, db.Cell.dataset)
            .join(db.Cell, db.Cell.id == current.c.cell_id)
            .where(current.c.sweep_id.in_(ids), current.c.state.in_((runstate.FAILED, runstate.LOST)))
            .order_by(db.Cell.framework, db.Cell.model, db.Cell.dataset, current.c.uid)).all()
    if failed:
        out.print(f"\nFailed or lost runs ({len(failed)}):", markup=False)
        for row in failed:
            out.print(f"  {row.state:<6} {row.framework}/{row.model}/{row.dataset}  {row.uid}",
                      markup=False, soft_wrap=True)
            why = row.error_class or "no error recorded"
            if row.error_message:
                why += f": {_one_line(row.error_message)}"
            out.print(f"         {why}", markup=False, soft_wrap=True)
            out.print(f"         log: {row.log_path or '(none recorded)'}", markup=False, soft_wrap=True)
    return 0


def _reconcile(session: Session, sweep_id: Optional[str], out: Console) -> None:
    """Brings open runs' states up to date (orchestrator.tracking); says which scheduler did not
    answer, in which case its runs keep their states."""
    from . import tracking

    for message in tracking.reconcile(session, sweep_id).messages():
        out.print(f"[yellow]{message}[/]")


# --- collect ----------------------------------------------------------------------------------

def cmd_collect(args: argparse.Namespace, out: Console) -> int:
    runs = Path(args.runs)
    if not runs.is_dir():
        raise CliError(f"no runs directory {runs} here; {LAUNCH_HINT} (or pass --runs DIR)")
    factory = db.open_db(args.db)
    with factory() as session:  # first the runs' fate: a requeued job's old failure must wait
        _reconcile(session, None, out)
    report = collect(factory, runs)
    out.print(str(report), markup=False)
    for path, reason in report.broken:
        out.print(f"  broken: {path}: {reason}", markup=False, soft_wrap=True)
    if report.broken:
        out.print("  (broken files are left in place; fix or remove them and collect again)", markup=False)
    return 1 if report.broken else 0


# --- results ----------------------------------------------------------------------------------

def cmd_results(args: argparse.Namespace, out: Console) -> int:
    view = db.results_view
    where = [view.c[key].in_(values) for key, values in _parse_where(args.where).items()]
    if args.state:
        states = [s.strip() for s in args.state.split(",") if s.strip()]
        unknown = [s for s in states if s not in runstate.STATES]
        if unknown:
            raise CliError(f"--state {','.join(unknown)}: not a run state; use one of {', '.join(runstate.STATES)}")
        where.append(view.c.state.in_(states))
    threshold = _noisy_cv(args) if args.summary else db.NOISY_CV
    Session = db.open_db(args.db, create=False)  # a read never creates a database
    with Session() as session:
        sweeps = _pick_sweeps(session, args.sweep)  # an empty database is an error, not an empty table
        if args.sweep:
            where.append(view.c.sweep.in_([s.id for s in sweeps]))
        if args.summary:
            query = db.summary_select(where, threshold)
            query = query.order_by(*(query.selected_columns[c] for c in db.SUMMARY_CELL))
        else:
            query = select(view).where(*where).order_by(
                view.c.framework, view.c.model, view.c.dataset, view.c.hardware, view.c.gpus,
                view.c.batch_size, view.c.precision, view.c.sweep, view.c.repeat, view.c.attempt)
        rows = session.execute(query).mappings().all()
    if args.summary:
        return _print_summary(rows, threshold, args.csv, out)
    if not rows:
        raise CliError("no runs match these filters; drop a --where/--state/--sweep filter, or see `status`")
    if args.csv:
        return _write_csv(rows, db.RESULTS_COLUMNS)
    out.print(_results_table(rows))
    return 0


def _write_csv(rows: Sequence[Any], columns: Sequence[str]) -> int:
    """Rows as CSV on stdout, a header first, missing values empty."""
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row[c] is None else row[c] for c in columns])
    return 0


def _noisy_cv(args: argparse.Namespace) -> float:
    """The noise threshold as a fraction: --noisy-cv, else $ORCHESTRATOR_NOISY_CV, else db.NOISY_CV (both in %)."""
    value = args.noisy_cv
    if value is None and os.environ.get("ORCHESTRATOR_NOISY_CV"):
        try:
            value = float(os.environ["ORCHESTRATOR_NOISY_CV"])
        except ValueError:
            raise CliError(f"ORCHESTRATOR_NOISY_CV={os.environ['ORCHESTRATOR_NOISY_CV']!r} is not a number (percent)") from None
    if value is None:
        return db.NOISY_CV
    if value < 0:
        raise CliError(f"--noisy-cv {value:g}: a CV threshold is a percentage >= 0")
    return value / 100.0


def _print_summary(cells: Sequence[Any], threshold: float, as_csv: bool, out: Console) -> int:
    """The `cell_summary` rows db.summary_select gave for the filters and threshold."""
    if not cells:
        raise CliError("no latest attempt with a throughput matches these filters; "
                       "drop a --where/--state/--sweep filter, or see `status`")
    if as_csv:
        return _write_csv(cells, db.SUMMARY_COLUMNS)
    noisy = sum(1 for c in cells if c["noisy"])
    table = Table(title=f"{len(cells)} cells over their repeats (noisy: CV > {threshold * 100:g}%)",
                  title_justify="left", box=box.SIMPLE_HEAD)
    numeric = ("gpus", "batch", "n", "median img/s", "CV %", "min", "max", "GPU W", "J/img")
    for name in ("framework/model/dataset", "hardware", "gpus", "batch", "prec", "n", "median img/s",
                 "CV %", "min", "max", "GPU W", "J/img", "noise"):
        table.add_column(name, justify="right" if name in numeric else "left", no_wrap=True)
    for c in cells:
        table.add_row(*(Text(str(v)) for v in (
            f"{c['framework']}/{c['model']}/{c['dataset']}", c["hardware"], c["gpus"], c["batch_size"],
            c["precision"], c["n"], _num(c["images_per_sec_median"], 1),
            "-" if c["images_per_sec_cv"] is None else f"{c['images_per_sec_cv'] * 100:.1f}",
            _num(c["images_per_sec_min"], 1), _num(c["images_per_sec_max"], 1),
            _num(c["gpu_power_avg_w"], 0), _num(c["energy_per_image_j"], 3),
            "NOISY" if c["noisy"] else ("" if c["noisy"] is not None else "1 run"))))
    out.print(table)
    if noisy:
        out.print(f"{noisy} noisy cell(s): their repeats differ by more than {threshold * 100:g}% "
                  f"(coefficient of variation); rerun them with more repeats or on a quieter node", markup=False)
    return 0


def _parse_where(items: list[str]) -> dict[str, list[Any]]:
    """`key=value` filters; the same key twice (or `key=a,b`) means either value."""
    where: dict[str, list[Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CliError(f"--where {item!r}: expected KEY=VALUE, e.g. --where framework=torch")
        if key not in db.RESULTS_COLUMNS:
            raise CliError(f"--where {item!r}: no column {key!r}; columns are {', '.join(db.RESULTS_COLUMNS)}")
        for part in value.split(","):
            part = part.strip()
            if not isinstance(db.results_view.c[key].type, String):
                try:
                    part = float(part)
                except ValueError:
                    raise CliError(f"--where {item!r}: {key} is a number, {part!r} is not") from None
            where.setdefault(key, []).append(part)
    return where


def _results_table(rows: Sequence[Any]) -> Table:
    sweeps = {r["sweep"] for r in rows}
    title = f"{len(rows)} runs" + (f" of sweep {next(iter(sweeps))}" if len(sweeps) == 1 else
                                   f" from {len(sweeps)} sweeps")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    gpu = any(r["gpu_power_avg_w"] is not None for r in rows)  # GPU columns only where measured
    numeric = ("gpus", "batch", "rep", "images/s", "cpu %", "RSS MB", "GPU MB", "GPU W", "J/img")
    for name in ("framework/model/dataset", "hardware", "gpus", "batch", "prec", "rep", "state",
                 "images/s", "cpu %", "RSS MB", *(("GPU MB", "GPU W", "J/img") if gpu else ()), "node"):
        table.add_column(name, justify="right" if name in numeric else "left", no_wrap=True)
    for r in rows:
        repeat = f"{r['repeat']}" + (f".{r['attempt']}" if r["attempt"] and r["attempt"] > 1 else "")
        state = r["state"] + (f" ({r['error_class']})" if r["error_class"] else "")
        gpu_cells = (_num(r["gpu_mem_peak_mb"], 0), _num(r["gpu_power_avg_w"], 0),
                     _num(r["energy_per_image_j"], 3)) if gpu else ()
        table.add_row(*(Text(str(v)) for v in (
            f"{r['framework']}/{r['model']}/{r['dataset']}", r["hardware"], r["gpus"], r["batch_size"],
            r["precision"], repeat, state, _rate(r["images_per_sec"], r["images_per_sec_std"]),
            _num(r["cpu_percent"], 0), _num(r["peak_rss_mb"], 0), *gpu_cells, r["node"] or "")))
    return table


# --- shared -----------------------------------------------------------------------------------

def _shown(url: str) -> str:
    """A database URL fit to print: its password, if any, masked."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def _pick_sweeps(session: Session, wanted: Optional[str]) -> list[db.Sweep]:
    """The sweeps a command shows, newest first: all of them, 'latest', an id or a unique prefix."""
    sweeps = list(session.scalars(select(db.Sweep).order_by(db.Sweep.created_at.desc(), db.Sweep.id)))
    if not sweeps or session.scalar(select(func.count()).select_from(db.Run)) == 0:
        raise CliError(f"the database {_shown(str(session.get_bind().url))} holds no runs yet; {LAUNCH_HINT}")
    if wanted is None:
        return sweeps
    if wanted == "latest":
        return sweeps[:1]
    exact = [s for s in sweeps if s.id == wanted]
    matches = exact or [s for s in sweeps if s.id.startswith(wanted)]
    if len(matches) == 1:
        return matches
    known = ", ".join(s.id for s in sweeps[:5]) + (" ..." if len(sweeps) > 5 else "")
    if matches:
        raise CliError(f"--sweep {wanted}: matches {len(matches)} sweeps; give more of the id (newest: {known})")
    raise CliError(f"--sweep {wanted}: no such sweep; use 'latest' or one of {known}")


def _when(t: Optional[float]) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else ""


def _one_line(message: str, width: int = MESSAGE_WIDTH) -> str:
    flat = " ".join(message.split())
    return flat if len(flat) <= width else flat[:width - 1] + "…"


def _rate(value: Optional[float], std: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" + (f" ± {std:,.1f}" if std is not None else "")


def _num(value: Optional[float], digits: int) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


# --- rerun ------------------------------------------------------------------------------------

def cmd_rerun(args: argparse.Namespace, out: Console) -> int:
    from orchestrator import rerun

    factory = db.open_db(args.db, create=False)
    with factory() as session:
        _reconcile(session, None, out)
        sweep = _pick_sweeps(session, args.sweep)[0].id if args.sweep else None
        where: dict[str, list[Any]] = {}
        for item in args.where:
            key, sep, value = item.partition("=")
            if not sep or key not in cell_module.SETTINGS:
                raise CliError(f"--where {item!r}: expected SETTING=VALUE with SETTING one of "
                               f"{', '.join(cell_module.SETTINGS)}")
            where.setdefault(key, []).extend(FRAMEWORK_ALIASES.get(v, v) for v in value.split(","))
        classes = [c.strip() for c in args.classes.split(",")] if args.classes else None
        picks, problems = rerun.pick(session, sweep, classes, where, args.time, args.mem)
        for problem in problems:
            out.print(f"[yellow]cannot rerun[/] {problem}")
        if not picks:
            out.print("nothing to rerun: no failed, lost or cancelled repeat matches"
                      + (" (and none without a successful run)" if not args.classes else ""))
            return 0
        verb = "would resubmit" if args.dry_run else "resubmitting"
        out.print(f"{verb} {len(picks)} repeat(s):")
        for p in picks:
            out.print(f"  {p.cell.label}  repeat {p.last.repeat} attempt {p.attempt}  "
                      f"(last: {p.last.state} {p.last.error_class or ''}, sweep {p.last.sweep_id})")
        if args.dry_run:
            return 0
        failures = 0
        for report in rerun.submit(session, picks):
            for cell, job_id, n in report.submitted:
                out.print(f"  submitted {cell.label} as job {job_id}")
            for cell, message in report.failed:
                failures += 1
                out.print(f"  [red]not submitted[/] {cell.label}: {_one_line(message)}")
            for _, reason in report.refused:  # e.g. more than the cluster's nodes hold, even now
                failures += 1
                out.print(f"  [red]refused[/] {_one_line(reason, 400)}", soft_wrap=True)
        return 1 if failures else 0
