"""`compare`: per-cell ratios of a new sweep (or a report's table) against a base; exit 1 on a
regression: slower beyond the minimum effect, by a test on the repeats corrected for the
number of cells (orchestrator.report.compare, verdict)."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from orchestrator.commands.common import CliError, pick_sweeps
from orchestrator.metric_registry import MIN_EFFECT_PCT
from orchestrator.store.sql_adapters import Rows

if TYPE_CHECKING:
    from rich.console import Console

HELP = "per-cell ratios of a new sweep against a base, tested over the repeats; exit 1 on a regression"
DESCRIPTION = ("Per cell: a moderated t-test on the logs of the repeats, Benjamini-Hochberg over all cells tested "
               "(FDR 0.05). Exit status: 0 no regression, 1 a cell slower by more than --threshold at adjusted "
               "p < 0.05, 2 bad usage.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base", required=True, metavar="SWEEP|CSV|KEY=VALUE",
                   help="a sweep (id, prefix, 'latest'), a report's table CSV, a report's directory, or settings "
                        "key=value[,key=value]: the cells of --sweep with them (the keys left out of the match)")
    p.add_argument("--new", required=True, metavar="SWEEP|CSV|KEY=VALUE", help="the same kinds as --base")
    p.add_argument("--sweep", default="latest", metavar="SWEEP",
                   help="the sweep a key=value side picks its cells from (default latest)")
    p.add_argument("--threshold", type=float, default=MIN_EFFECT_PCT, metavar="PCT",
                   help=f"the minimum effect: a cell changed by less (percent) is no change (default {MIN_EFFECT_PCT:g})")
    p.add_argument("--metric", default=None, metavar="NAME",
                   help="the metric compared (default: images_per_sec, or the CSV's)")


def run(args: argparse.Namespace, out: Console) -> int:
    """Exit 0: no regression; 1: a cell slower (beyond --threshold, at adjusted p < 0.05); 2: bad usage."""
    # lazy: SQLAlchemy (~0.3 s) only in the commands that need it: `status` and --help start without it
    from orchestrator.store import db, schema
    from orchestrator.report import compare, query, tables

    def from_sweep(wanted: str, metric: str) -> tuple[str, list[Any], dict]:
        factory = db.open_db(args.db, create=False)
        with factory() as session:
            try:
                sweep = pick_sweeps(Rows.of(session), wanted)[0]
            except CliError as exc:  # neither a file nor a sweep
                why = str(exc).removeprefix(f"--sweep {wanted}: ")
                raise compare.UsageError(f"{wanted}: no such file, and as a sweep: {why}") from None
            spec = tables.SPEC_BY_NAME.get(metric) or tables.Spec(compare.metric_def(metric), metric)
            (table,) = tables.from_db(session, [sweep.id], schema.NOISY_CV, [spec])
            values = query.values(session, [sweep.id], spec.metric)
        return f"sweep {sweep.id}", table.entries, values

    try:
        if args.threshold < 0:
            raise compare.UsageError(f"--threshold {args.threshold:g}: a percentage >= 0")
        if args.metric:
            compare.metric_def(args.metric)
        base = compare.load_side(args.base, args.metric, from_sweep, args.sweep)
        new = compare.load_side(args.new, args.metric or base.metric, from_sweep, args.sweep)
        if base.metric != new.metric:
            raise compare.UsageError(f"--base is {base.metric}, --new is {new.metric}: compare one metric "
                                     f"(--metric NAME)")
        result = compare.compare(base.entries, new.entries, compare.metric_def(base.metric), args.threshold,
                                 (base.values, new.values))
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
