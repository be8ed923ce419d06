"""The orchestrator's subcommands: `status`, `collect`, `results` and `rerun`.

`python -m orchestrator -m ...` launches sweeps through Hydra; these four subcommands look after
what the sweeps left: where the runs stand (`status`), landing finished runs' result files in
the database (`collect`), the measurements themselves (`results`, a table or CSV from the
`results` view, or per cell over its repeats with `--summary`), and submitting failed repeats
again (`rerun`). They print plain text quickly and answer bad input with a message that says
what to do, never a traceback.

Each command imports what it needs when it runs: `--help` and a usage error import neither
SQLAlchemy nor rich, and only `rerun` reads the config code. Reads stay short at any size:
`status` is a summary (counts, the first failures of each class, how to list all), `results`
shows its first `LIMIT` rows unless asked for more, and `--csv` streams every row.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from . import queries, runstate
from .rows import Rows

if TYPE_CHECKING:  # imported by the commands that use them, when they run
    from rich.console import Console
    from rich.table import Table
from .safety import ConfigError

PROG = "python -m orchestrator"
LAUNCH_HINT = f"run a sweep first: {PROG} -m framework=torch model=lenet dataset=mnist"

#: A failed run's message is cut to this many characters in `status`.
MESSAGE_WIDTH = 120
#: `status` shows this many failed runs of each error class per sweep (`--failed`: all of them).
EXAMPLES = 3
#: `results` and `results --summary` show this many rows unless `--limit N` or `--all`.
LIMIT = 50
#: db.NOISY_CV in percent, for the help text (which must not import the database code; a test
#: holds the two equal).
NOISY_CV_PERCENT = 5.0
#: The states `status` lists as failures (latest attempts), and the class of one without any.
FAILURES = (runstate.FAILED, runstate.LOST)
NO_CLASS = "no error recorded"


#: Names a user may type for a framework, as the config tree's `tf` alias does.
FRAMEWORK_ALIASES = {"tf": "tensorflow"}
#: Short names `--where` takes for `results` columns (`user` alone is a word SQL keeps for itself:
#: PostgreSQL answers `SELECT user` with the session's role, so the column is submit_user).
WHERE_ALIASES = {"user": "submit_user", "host": "submit_host"}


class CliError(Exception):
    """A problem with what the user asked for; its message says what to do instead."""


def default_runs() -> str:
    return os.environ.get("ORCHESTRATOR_RUNS", "runs")


def _config_groups() -> str:
    """The config groups a sweep chooses from, as Hydra's --help lists them (read from conf/,
    without Hydra)."""
    conf = Path(__file__).resolve().parent.parent / "conf"
    groups = sorted(p for p in conf.iterdir() if p.is_dir()) if conf.is_dir() else []
    lines = [f"  {g.name}: {', '.join(sorted(f.stem for f in g.glob('*.yaml')))}" for g in groups
             if any(g.glob("*.yaml"))]
    return "config groups (group=choice):\n" + "\n".join(lines) if lines else ""


def build_parser() -> argparse.ArgumentParser:
    # --db and --runs are accepted before or after the subcommand; SUPPRESS keeps a value
    # given before it from being reset by the subcommand's own (absent) option.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=argparse.SUPPRESS, metavar="URL",
                        help="results database (default: $ORCHESTRATOR_DB or sqlite:///results.db)")
    common.add_argument("--runs", default=argparse.SUPPRESS, metavar="DIR",
                        help="run directories (default: $ORCHESTRATOR_RUNS or ./runs)")

    parser = argparse.ArgumentParser(
        prog=PROG, parents=[common], formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Inspect and collect benchmark sweeps.",
        epilog=f"A sweep is launched through Hydra:\n  {PROG} -m framework=torch model=lenet,alexnet "
               f"dataset=synthetic,mnist\n{_config_groups()}\n"
               f"({PROG} --cfg job [overrides] prints the composed config; `data` writes datasets: "
               f"{PROG} data --help)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{status,collect,results,rerun,report,compare,db}")

    p = sub.add_parser("status", parents=[common], help="where each sweep's runs stand, and what failed")
    p.add_argument("--sweep", metavar="ID", help="one sweep (an id, a unique prefix, or 'latest')")
    p.add_argument("--failed", action="store_true",
                   help="list every failed or lost run (latest attempts), not the summary")
    p.add_argument("--class", dest="classes", metavar="A,B",
                   help="with --failed: only these error classes (out_of_memory, timeout, crash, lost, ...)")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("collect", parents=[common], help="land finished runs' result.json files in the DB")
    p.add_argument("--batch", type=int, default=None, metavar="N",
                   help="result files per transaction (default 500; 1 to 10000)")
    p.set_defaults(func=cmd_collect)

    p = sub.add_parser("results", parents=[common], help="the measurements, as a table or CSV")
    p.add_argument("--sweep", metavar="ID", help="one sweep (an id, a unique prefix, or 'latest')")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="keep rows whose column KEY equals VALUE (VALUE may be a,b for either); repeatable")
    p.add_argument("--state", metavar="STATE", help="keep runs in this state (or states, comma-separated)")
    p.add_argument("--csv", action="store_true",
                   help="every column of the results view as CSV, every row (unless --limit), streamed")
    p.add_argument("--summary", action="store_true",
                   help="one row per cell over its repeats: n, median images/s, CV, min/max, noisy flag")
    p.add_argument("--noisy-cv", type=float, default=None, metavar="PCT",
                   help=f"with --summary: flag a cell noisy above this CV in %% "
                        f"(default $ORCHESTRATOR_NOISY_CV or {NOISY_CV_PERCENT:g})")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--limit", type=int, default=None, metavar="N",
                       help=f"show the first N rows (default {LIMIT}; CSV: all)")
    shown.add_argument("--all", action="store_true", help="show every row")
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

    p = sub.add_parser("report", parents=[common], help="a sweep's tables, figures and HTML page, into a directory")
    p.add_argument("--sweep", action="append", metavar="ID",
                   help="a sweep (an id, a unique prefix, or 'latest'); repeatable; default: every sweep")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="where to write index.html, tables/<metric>.csv and .md, figures/<name>.svg and .png")
    p.add_argument("--noisy-cv", type=float, default=None, metavar="PCT",
                   help=f"mark a cell noisy above this CV in %% (default $ORCHESTRATOR_NOISY_CV or {NOISY_CV_PERCENT:g})")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("db", parents=[common], help="the results database itself: `db copy SRC DST`")
    db_sub = p.add_subparsers(dest="db_command", required=True, metavar="{copy}")
    q = db_sub.add_parser("copy", help="every sweep, cell, run and metric of SRC that DST lacks, into DST",
                          description="Copies every sweep, cell, run, metric and refusal of SRC that DST lacks "
                                      "(rows matched by their ids and run uids: twice adds nothing). DST is made "
                                      "when missing, refused at another schema revision.")
    q.add_argument("src", metavar="SRC", help="a database URL (sqlite:///results.db, postgresql://user@host/name)")
    q.add_argument("dst", metavar="DST", help="a database URL")
    q.set_defaults(func=cmd_db_copy)

    p = sub.add_parser("compare", parents=[common],
                       help="per-cell ratios of a new sweep against a base; exit 1 on a regression beyond noise",
                       description="Exit status: 0 no regression, 1 a cell slower than --threshold beyond its "
                                   "repeats' noise, 2 bad usage.")
    p.add_argument("--base", required=True, metavar="SWEEP|CSV",
                   help="a sweep (id, prefix, 'latest'), a report's table CSV, or a report's directory")
    p.add_argument("--new", required=True, metavar="SWEEP|CSV", help="the same kinds as --base")
    p.add_argument("--threshold", type=float, default=5.0, metavar="PCT",
                   help="a cell slower than this (percent), beyond noise, is a regression (default 5)")
    p.add_argument("--metric", default=None, metavar="NAME",
                   help="the metric compared (default: images_per_sec, or the CSV's)")
    p.set_defaults(func=cmd_compare)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs one subcommand; returns the exit status (0 ok, 1 a problem reported, 2 bad usage)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse has already printed
        return exc.code if isinstance(exc.code, int) else 2
    from .rows import default_url

    args.db = getattr(args, "db", None) or default_url()
    args.runs = getattr(args, "runs", None) or default_runs()
    try:
        return args.func(args, _console())
    except CliError as exc:
        message = str(exc)
    except BrokenPipeError:  # `status --failed | head` stopped reading: nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (nor at exit)
        return 1
    except ConfigError as exc:  # a recorded config `rerun` resubmits, refused by today's checks
        message = str(exc)
    except Exception as exc:  # noqa: BLE001 - the database's errors; anything else is re-raised
        said = _database_error(exc, args.db)
        if said is None:
            raise
        message = said
    print(message, file=sys.stderr)
    return 1


def _database_error(exc: Exception, url: str) -> Optional[str]:
    """What to say of a database error (None: it is not one). SQLAlchemy's and db's errors are
    looked for only where the command imported them (`status` on a current SQLite file reads it
    with sqlite3 alone: orchestrator.rows)."""
    import sqlite3

    said = exc if isinstance(exc, sqlite3.Error) else None  # the driver's error, said as it is
    if "orchestrator.db" in sys.modules:
        from sqlalchemy.exc import ArgumentError, SQLAlchemyError

        from . import db

        if isinstance(exc, db.NoDatabase):
            return f"{exc}; {LAUNCH_HINT} (or point --db / ORCHESTRATOR_DB at an existing database)"
        if isinstance(exc, db.SchemaError):
            return str(exc)
        if isinstance(exc, (ArgumentError, ImportError)):
            return f"cannot use database URL {_shown(url)!r}: {exc}"
        if isinstance(exc, SQLAlchemyError):  # any driver's (sqlite3, psycopg ...) under SQLAlchemy's
            said = getattr(exc, "orig", None) or exc
    if said is None:
        return None
    from .rows import sqlite_file
    from .sqlite_sharing import damaged, damaged_way_out

    path = sqlite_file(url)
    if path is not None and damaged(str(said)):
        return damaged_way_out(path)
    return f"database error ({_shown(url)}): {' '.join(str(said).split())}"  # one line (psycopg's have several)


def _console() -> Console:
    """Rich output on stdout: the terminal's width there, else wide enough not to cut rows."""
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 200
    return console


# --- status -----------------------------------------------------------------------------------

def cmd_status(args: argparse.Namespace, out: Console) -> int:
    classes = [c.strip() for c in args.classes.split(",") if c.strip()] if args.classes else None
    if classes and not args.failed:
        raise CliError(f"--class picks what --failed lists: {PROG} status --failed --class {args.classes}")
    with _reading(args.db) as rows:
        sweeps = _pick_sweeps(rows, args.sweep)
        _reconcile(rows, sweeps[0].id if args.sweep else None, out)
        ids = [s.id for s in sweeps] if args.sweep else None
        if args.failed:
            return _list_failures(rows, ids, classes)
        counts = queries.latest_counts(rows, ids)
        _print_counts(rows, sweeps, counts, out)
        shown = FAILURES + runstate.IN_FLIGHT
        examples = (queries.latest_examples(rows, ids, shown, EXAMPLES)
                    if any(c.state in shown for c in counts) else [])
        waiting: dict[tuple[str, str], int] = {}  # the scheduler's words for why queued runs wait
        for g in examples:
            if g.rn == 1 and g.state in runstate.IN_FLIGHT and g.state_detail is not None:
                waiting[g.state, g.state_detail] = waiting.get((g.state, g.state_detail), 0) + g.n
        for (state, detail), n in sorted(waiting.items()):
            out.print(f"{n} {state}: {detail}", markup=False)
        _print_failure_examples(rows, sweeps, counts, examples)
    return 0


@contextmanager
def _reading(url: str) -> Iterator[Rows]:
    """The database at `url`, for a command that reads it with SQL text (orchestrator.rows):
    through sqlite3 alone when it is a SQLite file at the current revision (`status` without
    SQLAlchemy's import), else through db.open_db, which upgrades an old one and explains a
    missing or unusable one (a read never creates a database)."""
    from .rows import connect

    direct = connect(url)
    if direct is not None:
        with direct:
            yield direct
        return
    from . import db

    with db.open_db(url, create=False)() as session:
        yield Rows.of(session)


def _print_counts(rows: Rows, sweeps: list[Any], counts: list[Any], out: Console) -> None:
    """The table: per sweep, its cells and its runs by state (latest attempts), and earlier ones."""
    from rich.table import Table

    by_sweep: dict[str, dict[str, int]] = {}
    for c in counts:
        by_state = by_sweep.setdefault(c.sweep_id, {})
        by_state[c.state] = by_state.get(c.state, 0) + c.n
    linked, all_runs = queries.sweep_sizes(rows, [s.id for s in sweeps])
    states = [s for s in runstate.STATES if any(s in c for c in by_sweep.values())]
    table = Table(title="Runs by state (latest attempt of each repeat; retried: earlier attempts)",
                  title_justify="left")
    for name in ("sweep", "created", "cells", *states, "retried"):
        table.add_column(name, justify="left" if name in ("sweep", "created") else "right")
    for sweep in sweeps:
        c = by_sweep.get(sweep.id, {})
        retried = all_runs.get(sweep.id, 0) - sum(c.values())
        cells = max(sweep.n_cells or 0, linked.get(sweep.id, 0))
        table.add_row(sweep.id, _when(sweep.created_at), str(cells),
                      *(str(c.get(s, "")) for s in states), str(retried or ""))
    out.print(table)


def _print_failure_examples(rows: Rows, sweeps: list[Any], counts: list[Any], examples: list[Any]) -> None:
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
    for g in examples:
        if g.state in FAILURES:
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
            print(f"  {klass} ({n:,})")
            for run_id in first.get((sweep.id, klass), []):
                _print_failure(runs[run_id], indent="    ")
            if n > EXAMPLES:
                only = f" --class {klass}" if klass != NO_CLASS else ""
                print(f"    ... {n - EXAMPLES:,} more: {PROG} status --failed --sweep {sweep.id}{only}")
    print(f"\nEvery one: {PROG} status --failed [--sweep ID] [--class A,B]; "
          f"as CSV: {PROG} results --state failed,lost --csv")


def _list_failures(rows: Rows, sweep_ids: Optional[list[str]], classes: Optional[list[str]]) -> int:
    """`status --failed`: every failed or lost run (latest attempts), streamed."""
    which = f" of class {', '.join(classes)}" if classes else ""
    print(f"Failed or lost runs{which} (latest attempts):")
    n = 0
    for row in queries.latest_failures(rows, sweep_ids, FAILURES, classes):
        _print_failure(row, indent="  ")
        n += 1
    print(f"{n} run(s)")
    return 0


def _print_failure(row: Any, indent: str) -> None:
    """A failed run in two lines: state, cell, run and log; class and message."""
    why = row.error_class or NO_CLASS
    if row.error_message:
        why += f": {_one_line(row.error_message)}"
    print(f"{indent}{row.state:<6} {row.framework}/{row.model}/{row.dataset}  {row.uid}  "
          f"log: {row.log_path or '(none recorded)'}")
    print(f"{indent}       {why}")


def _reconcile(rows: Rows, sweep_id: Optional[str], out: Console) -> None:
    """Brings open runs' states up to date (orchestrator.tracking); says which scheduler did not
    answer, in which case its runs keep their states."""
    from . import tracking

    for message in tracking.reconcile(rows, sweep_id).messages():
        out.print(f"[yellow]{message}[/]")


# --- collect ----------------------------------------------------------------------------------

def cmd_collect(args: argparse.Namespace, out: Console) -> int:
    from . import db
    from .collector import BATCH_SIZE, collect

    runs = Path(args.runs)
    if not runs.is_dir():
        raise CliError(f"no runs directory {runs} here; {LAUNCH_HINT} (or pass --runs DIR)")
    if args.batch is not None and not 1 <= args.batch <= 10_000:
        raise CliError(f"--batch {args.batch}: result files per transaction, 1 to 10000 (default {BATCH_SIZE})")
    factory = db.open_db(args.db)
    with factory() as session:  # first the runs' fate: a requeued job's old failure must wait
        _reconcile(Rows.of(session), None, out)
    report = collect(factory, runs, batch_size=args.batch or BATCH_SIZE)
    out.print(str(report), markup=False)
    for path, reason in report.broken:
        out.print(f"  broken: {path}: {reason}", markup=False, soft_wrap=True)
    if report.broken:
        out.print("  (broken files are left in place; fix or remove them and collect again)", markup=False)
    return 1 if report.broken else 0


# --- results ----------------------------------------------------------------------------------

#: The order `results` lists runs in.
RESULTS_ORDER = ("framework", "model", "dataset", "hardware", "gpus", "batch_size", "precision", "sweep",
                 "repeat", "attempt", "run")  # (the run's uid last: one order, whichever select reads it)


def cmd_results(args: argparse.Namespace, out: Console) -> int:
    from sqlalchemy import func, select

    from . import db

    view = db.results_view
    filters = _parse_where(args.where)  # {results column: values}, one condition each
    if args.state:
        states = [s.strip() for s in args.state.split(",") if s.strip()]
        unknown = [s for s in states if s not in runstate.STATES]
        if unknown:
            raise CliError(f"--state {','.join(unknown)}: not a run state; use one of {', '.join(runstate.STATES)}")
        filters.setdefault("state", []).extend(states)  # (with --where state=x: either)
    if args.limit is not None and args.limit < 1:
        raise CliError(f"--limit {args.limit}: show at least one row, or every one with --all")
    # a table shows its first LIMIT rows; CSV, meant for other programs, every one unless asked
    limit = None if args.all or (args.csv and args.limit is None) else (args.limit or LIMIT)
    threshold = _noisy_cv(args) if args.summary else db.NOISY_CV
    Session = db.open_db(args.db, create=False)  # a read never creates a database
    with Session() as session:
        sweeps = _pick_sweeps(Rows.of(session), args.sweep)  # an empty database is an error, not an empty table
        if args.sweep:
            filters["sweep"] = [s.id for s in sweeps]
        if args.summary:
            rows = db.summary_select(filters, threshold).subquery("cells")
            # the cell's id last: cells alike in every shown setting (seeds) in one order on every database
            columns, order = db.SUMMARY_COLUMNS, (*db.SUMMARY_CELL, "cell")
            empty = "no latest attempt with a throughput matches these filters"
        else:
            rows = select(view).where(*(view.c[key].in_(values) for key, values in filters.items())).subquery("runs")
            columns, order = db.RESULTS_COLUMNS, RESULTS_ORDER
            empty = "no runs match these filters"
        paged = None if args.summary or args.csv else db.results_page(filters, RESULTS_ORDER, limit)
        if paged is not None:  # the page's runs first, their metrics after: not every run's
            shown = session.execute(paged[0]).mappings().all()
            if not shown:
                raise CliError(f"{empty}; drop a --where/--state/--sweep filter, or see `status`")
            total = session.scalar(paged[1])
            _print_results(out, shown, total, args.sweep)
            return 0
        totals = () if args.csv else (  # how many there are in all, from the same pass
            func.count().over().label("total"), *((func.sum(rows.c.noisy).over().label("noisy_total"),)
                                                  if args.summary else ()))
        query = select(rows, *totals).order_by(*(rows.c[c] for c in order)).limit(limit)
        result = iter(session.execute(query, execution_options={"yield_per": 1000}).mappings())
        first = next(result, None)
        if first is None:
            raise CliError(f"{empty}; drop a --where/--state/--sweep filter, or see `status`")
        if args.csv:  # streamed: never all rows in memory
            return _write_csv(_chain(first, result), columns)
        shown = [first, *result]
    if args.summary:
        _print_summary(shown, first["total"], first["noisy_total"] or 0, threshold, out)
        _print_more(out, first["total"] - len(shown))
    else:
        _print_results(out, shown, first["total"], args.sweep)
    return 0


def _print_results(out: Console, shown: Sequence[Any], total: int, sweep: Optional[str]) -> None:
    out.print(_results_table(shown, total, sweep))
    _print_more(out, total - len(shown))


def _print_more(out: Console, more: int) -> None:
    if more:
        out.print(f"{more:,} more not shown: --limit N shows the first N, --all every one "
                  f"(--csv prints them all as CSV)", markup=False)


def _chain(first: Any, rest: Any) -> Any:
    yield first
    yield from rest


def _write_csv(rows: Any, columns: Sequence[str]) -> int:
    """Rows (any iterable) as CSV on stdout, a header first, missing values empty."""
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
        from . import db

        return db.NOISY_CV
    if value < 0:
        raise CliError(f"--noisy-cv {value:g}: a CV threshold is a percentage >= 0")
    return value / 100.0


def _print_summary(cells: Sequence[Any], total: int, noisy: int, threshold: float, out: Console) -> None:
    """The first `cell_summary` rows db.summary_select gave for the filters and threshold, of
    `total`, `noisy` of them noisy."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    first = f"; the first {len(cells):,}" if total > len(cells) else ""
    table = Table(title=f"{total:,} cells over their repeats (noisy: CV > {threshold * 100:g}%){first}",
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
        out.print(f"{noisy:,} noisy cell(s): their repeats differ by more than {threshold * 100:g}% "
                  f"(coefficient of variation); rerun them with more repeats or on a quieter node", markup=False)


def _parse_where(items: list[str]) -> dict[str, list[Any]]:
    """`key=value` filters; the same key twice (or `key=a,b`) means either value."""
    from sqlalchemy import String

    from . import db

    where: dict[str, list[Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = WHERE_ALIASES.get(key.strip(), key.strip())
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


def _results_table(rows: Sequence[Any], total: int, sweep: Optional[str]) -> Table:
    """The first rows of `total` runs (`sweep`: of the one sweep asked for)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    sweeps = {r["sweep"] for r in rows}
    title = f"{total:,} runs"
    if len(sweeps) == 1 and (sweep or total == len(rows)):
        title += f" of sweep {next(iter(sweeps))}"
    elif total == len(rows):
        title += f" from {len(sweeps)} sweeps"
    if total > len(rows):
        title += f"; the first {len(rows):,}"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    gpu = any(r["gpu_power_avg_w"] is not None for r in rows)  # GPU columns only where measured
    acc = any(r["top1"] is not None for r in rows)  # accuracy mode's columns only where measured
    acc_names = ("top-1", "best", "to target", "s to target", "s/epoch")
    numeric = ("gpus", "batch", "rep", "images/s", "cpu %", "RSS MB", "GPU MB", "GPU W", "J/img", *acc_names)
    for name in ("framework/model/dataset", "hardware", "gpus", "batch", "prec", "rep", "state",
                 "images/s", *(acc_names if acc else ()), "cpu %", "RSS MB",
                 *(("GPU MB", "GPU W", "J/img") if gpu else ()), "node"):
        table.add_column(name, justify="right" if name in numeric else "left", no_wrap=True)
    for r in rows:
        repeat = f"{r['repeat']}" + (f".{r['attempt']}" if r["attempt"] and r["attempt"] > 1 else "")
        state = r["state"] + (f" ({r['error_class']})" if r["error_class"] else "")
        gpu_cells = (_num(r["gpu_mem_peak_mb"], 0), _num(r["gpu_power_avg_w"], 0),
                     _num(r["energy_per_image_j"], 3)) if gpu else ()
        to_target = (f"{r['epochs_to_target']:.0f} ep" if r["epochs_to_target"] is not None
                     else "not reached" if r["top1"] is not None else "")
        acc_cells = (_num(r["top1"], 3), _num(r["top1_best"], 3), to_target, _num(r["time_to_target_s"], 1),
                     _num(r["epoch_s"], 2)) if acc else ()
        table.add_row(*(Text(str(v)) for v in (
            f"{r['framework']}/{r['model']}/{r['dataset']}", r["hardware"], r["gpus"], r["batch_size"],
            r["precision"], repeat, state, _rate(r["images_per_sec"], r["images_per_sec_std"]),
            *acc_cells, _num(r["cpu_percent"], 0), _num(r["peak_rss_mb"], 0), *gpu_cells, r["node"] or "")))
    return table


# --- shared -----------------------------------------------------------------------------------

def _shown(url: str) -> str:
    """A database URL fit to print: its password, if any, masked."""
    if "@" not in url:  # no password to mask (and no SQLAlchemy to import for `status`)
        return url
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def _pick_sweeps(rows: Rows, wanted: Optional[str]) -> list[Any]:
    """The sweeps a command shows, newest first: all of them, 'latest', an id or a unique prefix;
    their id, created_at and n_cells (never their override lists, which may be large)."""
    sweeps = queries.sweeps(rows)
    if not sweeps or not queries.has_runs(rows):
        raise CliError(f"the database {_shown(rows.url)} holds no runs yet; {LAUNCH_HINT}")
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
    from orchestrator import cell as cell_module
    from orchestrator import db, rerun

    factory = db.open_db(args.db, create=False)
    with factory() as session:
        _reconcile(Rows.of(session), None, out)
        sweep = _pick_sweeps(Rows.of(session), args.sweep)[0].id if args.sweep else None
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


# --- report and compare ---------------------------------------------------------------------------

def cmd_report(args: argparse.Namespace, out: Console) -> int:
    from . import db
    from .report.build import write_report

    threshold = _noisy_cv(args)
    factory = db.open_db(args.db, create=False)
    with factory() as session:
        if args.sweep:
            ids = list(dict.fromkeys(s.id for wanted in args.sweep for s in _pick_sweeps(Rows.of(session), wanted)))
        else:
            ids = [s.id for s in _pick_sweeps(Rows.of(session), None)]
        report = write_report(session, ids, Path(args.out), threshold)
    out.print(f"report of {len(ids)} sweep(s), {report.cells} cells: {report.index}", markup=False, soft_wrap=True)
    out.print(f"  {len(report.tables)} table files in {report.out / 'tables'}, {len(report.figures)} figure files in "
              f"{report.out / 'figures'}", markup=False, soft_wrap=True)
    for why in report.skipped:
        out.print(f"  not drawn: {why}", markup=False, soft_wrap=True)
    return 0


def cmd_db_copy(args: argparse.Namespace, out: Console) -> int:
    from . import db
    from .db_copy import CopyRefused, copy

    if args.src == args.dst:
        raise CliError(f"db copy: SRC and DST are one database ({_shown(args.src)}); name another DST")
    try:
        report = copy(args.src, args.dst)
    except CopyRefused as exc:
        raise CliError(f"db copy into {_shown(args.dst)}: {exc}") from None
    except db.NoDatabase as exc:
        raise CliError(f"db copy from {_shown(args.src)}: {exc}; nothing was copied") from None
    except db.Unusable as exc:  # which of the two it is, by its URL
        raise CliError(f"db copy: cannot use {exc.url}: {exc}; nothing was copied") from None
    out.print(f"{_shown(args.src)} -> {_shown(args.dst)}: {report}", markup=False, soft_wrap=True)
    return 0


def cmd_compare(args: argparse.Namespace, out: Console) -> int:
    """Exit 0: no regression; 1: a cell slower beyond --threshold and noise; 2: bad usage."""
    from . import db
    from .report import compare, tables

    def from_sweep(wanted: str, metric: str) -> tuple[str, list[Any]]:
        factory = db.open_db(args.db, create=False)
        with factory() as session:
            try:
                sweep = _pick_sweeps(Rows.of(session), wanted)[0]
            except CliError as exc:  # neither a file nor a sweep
                why = str(exc).removeprefix(f"--sweep {wanted}: ")
                raise compare.UsageError(f"{wanted}: no such file, and as a sweep: {why}") from None
            spec = tables.SPEC_BY_NAME.get(metric) or tables.Spec(compare.metric_def(metric), metric)
            (table,) = tables.from_db(session, [sweep.id], db.NOISY_CV, [spec])
        return f"sweep {sweep.id}", table.entries

    try:
        if args.threshold < 0:
            raise compare.UsageError(f"--threshold {args.threshold:g}: a percentage >= 0")
        if args.metric:
            compare.metric_def(args.metric)
        base = compare.load_side(args.base, args.metric, from_sweep)
        new = compare.load_side(args.new, args.metric or base.metric, from_sweep)
        if base.metric != new.metric:
            raise compare.UsageError(f"--base is {base.metric}, --new is {new.metric}: compare one metric "
                                     f"(--metric NAME)")
        result = compare.compare(base.entries, new.entries, compare.metric_def(base.metric), args.threshold)
        if not result.matched and not result.no_number:
            raise compare.UsageError(
                f"each cell of {base.name} matches several of {new.name}: give the CSV the settings that tell "
                f"them apart (threads, batch_size, precision ...)" if result.ambiguous else
                f"no cell of {base.name} matches one of {new.name}: nothing to compare")
    except (compare.UsageError, CliError, db.NoDatabase) as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return 2
    compare.print_comparison(result, base, new, out)
    return 1 if result.regressions else 0
