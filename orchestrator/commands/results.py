"""`results`: the measurements, as a table or CSV from the `results` view, or per cell over its
repeats (`--summary`, the `cell_summary` select with the filters and threshold asked).

A table shows its first LIMIT rows unless asked for more; `--csv`, meant for other programs,
streams every row. The queries are the read layer's (cell_stats.results_page and results_rows, over
the views' selects; results_rows reads each run's metrics from kept_metrics, the view's pivot kept
as it landed, so that a million-run CSV pivots nothing): this command imports SQLAlchemy anyway.
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from orchestrator import runstate, setting_registry
from orchestrator.commands.common import (
    CliError,
    Database,
    add_noisy_cv,
    add_sweep,
    noisy_cv,
    opened,
    pick_sweeps,
)
from orchestrator.commands.render import first_then_rest, num, print_more, rate, write_csv
from orchestrator.store.sql_adapters import Rows

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

HELP = "the measurements, as a table or CSV"
#: `results` and `results --summary` show this many rows unless `--limit N` or `--all`.
LIMIT = 50
#: The order `results` lists runs in (setting_registry.RESULTS_ORDER).
RESULTS_ORDER = setting_registry.RESULTS_ORDER
#: The tables' first columns, drawn for every row: each a title and the settings it shows (joined by
#: /). Any other setting gets a column of its own where it varies among the rows shown (_varying).
SETTING_COLUMNS = (("framework/model/dataset", ("framework", "model", "dataset")), ("hardware", ("hardware",)),
                   ("gpus", ("gpus",)), ("batch", ("batch_size",)), ("prec", ("precision",)))
#: The position of the batch among them: batch_size=auto shows "auto→<the fastest point's batch>" there.
BATCH_COLUMN = [title for title, _ in SETTING_COLUMNS].index("batch")
#: Short names `--where` takes for `results` columns (`user` alone is a word SQL keeps for itself:
#: PostgreSQL answers `SELECT user` with the session's role, so the column is submit_user).
WHERE_ALIASES = {"user": "submit_user", "host": "submit_host"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_sweep(p)
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="keep rows whose column KEY equals VALUE (VALUE may be a,b for either); repeatable")
    p.add_argument("--state", metavar="STATE", help="keep runs in this state (or states, comma-separated)")
    p.add_argument("--csv", action="store_true",
                   help="every column of the results view as CSV, every row (unless --limit), streamed")
    p.add_argument("--summary", action="store_true",
                   help="one row per cell over its repeats: n, median images/s, CV, min/max, noisy flag")
    add_noisy_cv(p, "with --summary: flag a cell noisy")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--limit", type=int, default=None, metavar="N",
                       help=f"show the first N rows (default {LIMIT}; CSV: all)")
    shown.add_argument("--all", action="store_true", help="show every row")


def run(args: argparse.Namespace, out: Console) -> int:
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
    threshold = noisy_cv(args.noisy_cv) if args.summary else None
    return results(args.db, out, args.sweep, filters, limit, summary=args.summary, csv=args.csv,
                   threshold=threshold)


def results(database: Database, out: Console, sweep: Optional[str] = None, filters: Optional[dict[str, list[Any]]] = None,
            limit: Optional[int] = LIMIT, summary: bool = False, csv: bool = False,
            threshold: Optional[float] = None) -> int:
    """The runs (`summary`: the cells) that match `filters` ({results column: values}) and `sweep`,
    the first `limit` (None: all) as a table, or as CSV streamed."""
    # lazy: SQLAlchemy (~0.3 s) only in the commands that need it: `status` and --help start without it
    from orchestrator.store import cell_stats, schema

    filters = dict(filters or {})
    threshold = schema.NOISY_CV if threshold is None else threshold
    empty = ("no latest attempt with a throughput matches these filters" if summary else "no runs match these filters")
    empty += "; drop a --where/--state/--sweep filter, or see `status`"
    Session = opened(database)  # a read never creates a database
    with Session() as session:
        sweeps = pick_sweeps(Rows.of(session), sweep)  # an empty database is an error, not an empty table
        if sweep:
            filters["sweep"] = [s.id for s in sweeps]
        if summary and (kept := _kept_summary(session, filters, threshold, limit, csv, out)) is not None:
            return kept  # the summary kept as runs land: a page of it, not every run ranked
        paged = None if summary or csv else cell_stats.results_page(filters, RESULTS_ORDER, limit)
        if paged is not None:  # the page's runs first, their metrics after: not every run's
            shown = session.execute(paged[0]).mappings().all()
            if not shown:
                raise CliError(empty)
            _print_results(out, shown, session.scalar(paged[1]), sweep)
            return 0
        # the cell's id last in a summary: cells alike in every shown setting (seeds) in one order everywhere
        order = (*schema.SUMMARY_CELL, "cell") if summary else RESULTS_ORDER
        if csv and not summary:  # lines the database writes, streamed: never all rows in memory
            return _write_lines(session, cell_stats.results_lines(filters, order, limit), empty)
        query = cell_stats.results_rows(filters, order, limit, threshold if summary else None, totals=not csv)
        if csv:  # streamed: never all rows in memory
            return _write_csv(session, query, schema.SUMMARY_COLUMNS, empty)
        result = iter(_streamed(session, query).mappings())
        first = next(result, None)
        if first is None:
            raise CliError(empty)
        shown = [first, *result]
    if summary:
        _print_summary(shown, first["total"], first["noisy_total"] or 0, threshold, out)
        print_more(out, first["total"] - len(shown))
    else:
        _print_results(out, shown, first["total"], sweep)
    return 0


def _streamed(session: Any, query: Any) -> Any:
    """The query's rows fetched a thousand at a time. On the session's connection: the ORM's
    loading of each row (a third of a million-row CSV's time) is for entities, and these are plain
    rows."""
    return session.connection().execute(query, execution_options={"yield_per": 1000})


def _write_csv(session: Any, query: Any, columns: Sequence[str], empty: str) -> int:
    """The query's rows as CSV (render.write_csv), streamed a thousand at a time as tuples in the
    order of `columns` (csv writes them as they are); `empty`: the error where there are none."""
    batches = iter(_streamed(session, query).partitions())
    first = next(batches, None)
    if not first:
        raise CliError(empty)
    return write_csv(first_then_rest(first, batches), columns)


def _write_lines(session: Any, query: Any, empty: str) -> int:
    """`results --csv`: the header, then the query's lines (cell_stats.results_lines) as they
    come, a thousand at a time (the first row early); `empty`: the error where there are none."""
    from orchestrator.store import csv_lines, schema  # lazy: SQLAlchemy only where needed

    batches = csv_lines.streamed(session.connection(), query, 1000)
    first = next(batches, None)
    if not first:
        raise CliError(empty)
    write_csv([], schema.RESULTS_COLUMNS)
    for rows in first_then_rest(first, batches):
        _write_batch(rows)
    return 0


def _write_batch(rows: Sequence[Sequence[Any]]) -> None:
    """A batch of the CSV's lines (rows of csv_lines.PIECES: a line, or its pieces), in one write."""
    from orchestrator.store import csv_lines  # lazy: SQLAlchemy only where needed

    sys.stdout.write(csv_lines.lines_of(rows))


def _kept_summary(session: Any, filters: Mapping[str, Sequence[Any]], threshold: float, limit: Optional[int],
                  csv: bool, out: Console) -> Optional[int]:
    """`--summary` from the kept summary (result_rows.summary_page): its first `limit` rows (CSV:
    streamed), or None where a filter needs the runs."""
    # lazy: SQLAlchemy (~0.3 s) only in the commands that need it: `status` and --help start without it
    from orchestrator.store import result_rows, schema

    paged = result_rows.summary_page(filters, threshold, limit)
    if paged is None:
        return None
    empty = "no latest attempt with a throughput matches these filters; drop a --where/--state/--sweep filter, or see `status`"
    if csv:  # streamed: never all rows in memory
        return _write_csv(session, paged[0], schema.SUMMARY_COLUMNS, empty)
    result = iter(_streamed(session, paged[0]).mappings())
    first = next(result, None)
    if first is None:
        raise CliError(empty)
    shown = [first, *result]
    total, noisy = session.execute(paged[1]).one()
    _print_summary(shown, total, noisy, threshold, out)
    print_more(out, total - len(shown))
    return 0


def _parse_where(items: list[str]) -> dict[str, list[Any]]:
    """`key=value` filters; the same key twice (or `key=a,b`) means either value."""
    # lazy: SQLAlchemy (~0.3 s) only in the commands that need it: `status` and --help start without it
    from sqlalchemy import String

    # lazy: SQLAlchemy (~0.3 s) only in the commands that need it: `status` and --help start without it
    from orchestrator.store import schema

    where: dict[str, list[Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = WHERE_ALIASES.get(key.strip(), key.strip())
        if not sep or not key:
            raise CliError(f"--where {item!r}: expected KEY=VALUE, e.g. --where framework=torch")
        if key not in schema.RESULTS_COLUMNS:
            raise CliError(f"--where {item!r}: no column {key!r}; columns are {', '.join(schema.RESULTS_COLUMNS)}")
        for part in value.split(","):
            part = part.strip()
            if not isinstance(schema.results_view.c[key].type, String):
                try:
                    part = float(part)
                except ValueError:
                    raise CliError(f"--where {item!r}: {key} is a number, {part!r} is not") from None
            where.setdefault(key, []).append(part)
    return where


def _print_results(out: Console, shown: Sequence[Mapping[str, Any]], total: int, sweep: Optional[str]) -> None:
    out.print(_results_table(shown, total, sweep))
    print_more(out, total - len(shown))


def _print_summary(cells: Sequence[Any], total: int, noisy: int, threshold: float, out: Console) -> None:
    """The first `cell_summary` rows cell_stats.summary_select gave for the filters and threshold, of
    `total`, `noisy` of them noisy."""
    # lazy: rich's tables and console only where something is drawn with them
    from rich import box
    from rich.table import Table
    from rich.text import Text

    first = f"; the first {len(cells):,}" if total > len(cells) else ""
    table = Table(title=f"{total:,} cells over their repeats (noisy: CV > {threshold * 100:g}%){first}",
                  title_justify="left", box=box.SIMPLE_HEAD)
    numeric = ("n", "median img/s", "CV %", "min", "max", "GPU W", "J/img")
    varying = _add_setting_columns(table, cells)
    for name in ("n", "median img/s", "CV %", "min", "max", "GPU W", "J/img", "noise"):
        table.add_column(name, justify="right" if name in numeric else "left", no_wrap=True)
    for c in cells:
        table.add_row(*(Text(str(v)) for v in (
            *_setting_cells(c, varying), c["n"], num(c["images_per_sec_median"], 1),
            "-" if c["images_per_sec_cv"] is None else f"{c['images_per_sec_cv'] * 100:.1f}",
            num(c["images_per_sec_min"], 1), num(c["images_per_sec_max"], 1),
            num(c["gpu_power_avg_w"], 0), num(c["energy_per_image_j"], 3),
            "NOISY" if c["noisy"] else ("" if c["noisy"] is not None else "1 run"))))
    out.print(table)
    if noisy:
        out.print(f"{noisy:,} noisy cell(s): their repeats differ by more than {threshold * 100:g}% "
                  f"(coefficient of variation); rerun them with more repeats or on a quieter node", markup=False)


def _results_table(rows: Sequence[Any], total: int, sweep: Optional[str]) -> Table:
    """The first rows of `total` runs (`sweep`: of the one sweep asked for)."""
    # lazy: rich's tables and console only where something is drawn with them
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
    mfu = any(r["mfu"] is not None for r in rows)  # where the hardware declares its peak FLOP/s
    served = any(r["latency_batches"] is not None for r in rows)  # inference's columns only where measured
    acc_names = ("top-1", "best", "to target", "s to target", "s/epoch")
    numeric = ("rep", "images/s", "mfu %", "cpu %", "RSS MB", "GPU MB", "GPU W", "J/img", *acc_names, *INFERENCE_COLUMNS)
    varying = _add_setting_columns(table, rows)
    notes = [setting_registry.input_note(r) for r in rows]  # "ran at 224x224": an ImageNet network on CIFAR-10
    if any(notes):
        table.add_column("input", no_wrap=True)
    for name in ("rep", "state",
                 "images/s", *(("mfu %",) if mfu else ()), *(acc_names if acc else ()),
                 *(INFERENCE_COLUMNS if served else ()), "cpu %", "RSS MB",
                 *(("GPU MB", "GPU W", "J/img") if gpu else ()), "node"):
        table.add_column(name, justify="right" if name in numeric else "left", no_wrap=True)
    for r, note in zip(rows, notes):
        repeat = f"{r['repeat']}" + (f".{r['attempt']}" if r["attempt"] and r["attempt"] > 1 else "")
        state = r["state"] + (f" ({r['error_class']})" if r["error_class"] else "")
        gpu_cells = (num(r["gpu_mem_peak_mb"], 0), num(r["gpu_power_avg_w"], 0),
                     num(r["energy_per_image_j"], 3)) if gpu else ()
        to_target = (f"{r['epochs_to_target']:.0f} ep" if r["epochs_to_target"] is not None
                     else "not reached" if r["top1"] is not None else "")
        acc_cells = (num(r["top1"], 3), num(r["top1_best"], 3), to_target, num(r["time_to_target_s"], 1),
                     num(r["epoch_s"], 2)) if acc else ()
        table.add_row(*(Text(str(v)) for v in (
            *_setting_cells(r, varying), *([note] if any(notes) else []), repeat, state,
            rate(r["images_per_sec"], r["images_per_sec_std"]), *((_percent(r["mfu"]),) if mfu else ()), *acc_cells,
            *(_inference_cells(r) if served else ()), num(r["cpu_percent"], 0), num(r["peak_rss_mb"], 0), *gpu_cells,
            r["node"] or "")))
    return table


#: An inference run's columns: median and 99th percentile batch latency, the first batch alone (ms), and
#: whether the run met the validity rule.
INFERENCE_COLUMNS = ("p50 ms", "p99 ms", "first ms", "rule")


def _inference_cells(row: Mapping[str, Any]) -> tuple[str, ...]:
    """An inference run's latencies in ms (n/a where its count supports no such percentile: a train run's
    all n/a) and whether it met the validity rule (docs/measurement.md)."""
    ms = tuple("n/a" if row[c] is None else f"{row[c] * 1000:.3g}" for c in ("latency_p50_s", "latency_p99_s",
                                                                           "first_batch_s"))
    return (*ms, "" if row["below_rule"] is None else "below" if row["below_rule"] else "met")


def _percent(fraction: Optional[float]) -> str:
    """A fraction as a percentage to three significant figures (a CPU's MFU against a GPU's peak is
    tiny, and still not zero); "-" for none."""
    return "-" if fraction is None else f"{fraction * 100:.3g}"


def _varying(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The settings the rows hold, beyond SETTING_COLUMNS', whose values differ among them (in the
    registry's order): after `nodes=1,2` the two runs differ in `nodes` alone, which must show."""
    drawn = {name for _, names in SETTING_COLUMNS for name in names}
    held = [name for name in setting_registry.NAMES if name not in drawn and rows and name in rows[0]]
    return [name for name in held if len({r[name] for r in rows}) > 1]


def _add_setting_columns(table: Table, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The setting columns: SETTING_COLUMNS', then one per setting that varies among `rows`; those."""
    varying = _varying(rows)
    for title, name in [(title, names[0]) for title, names in SETTING_COLUMNS] + [(name, name) for name in varying]:
        numeric = setting_registry.BY_NAME[name].kind is not str
        table.add_column(title, justify="right" if numeric else "left", no_wrap=True)
    return varying


def _setting_cells(row: Mapping[str, Any], varying: Sequence[str]) -> list[Any]:
    """A row's values in the setting columns (_add_setting_columns): "" for none."""
    joined = ["/".join(str(row[name]) for name in names) for _, names in SETTING_COLUMNS]
    if row.get("batch_search") == setting_registry.AUTO:  # its figures are the fastest point's
        joined[BATCH_COLUMN] = "auto" if row.get("auto_batch") is None else f"auto→{row['auto_batch']:g}"
    return joined + ["" if row[name] is None else row[name] for name in varying]
