"""`collect`: land finished runs' result.json files in the database (orchestrator.results.collector),
after bringing open runs' states up to date."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from orchestrator.commands.common import LAUNCH_HINT, CliError, Database, opened, reconcile
from orchestrator.store.sql_adapters import Rows

if TYPE_CHECKING:
    from rich.console import Console

HELP = "land finished runs' result.json files in the DB"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", type=int, default=None, metavar="N",
                   help="result files per transaction (default 500; 1 to 10000)")
    p.add_argument("--all", dest="everything", action="store_true",
                   help="look into every sweep's folder, also those whose runs are all collected")


def run(args: argparse.Namespace, out: Console) -> int:
    return collect(args.db, Path(args.runs), out, args.batch, args.everything)


def collect(database: Database, runs: Path, out: Console, batch: Optional[int] = None,
            everything: bool = False) -> int:
    """Collects the result files under `runs` into the database (a URL: made if missing);
    exit status 1 where a file is broken."""
    # lazy: SQLAlchemy (~0.3 s) only in the commands that need it: `status` and --help start without it
    from orchestrator.results.collector import BATCH_SIZE
    from orchestrator.results.collector import collect as collect_files

    if not runs.is_dir():
        raise CliError(f"no runs directory {runs} here; {LAUNCH_HINT} (or pass --runs DIR)")
    if batch is not None and not 1 <= batch <= 10_000:
        raise CliError(f"--batch {batch}: result files per transaction, 1 to 10000 (default {BATCH_SIZE})")
    factory = opened(database, create=True)
    with factory() as session:  # first the runs' fate: a requeued job's old failure must wait
        reconcile(Rows.of(session), None, out, str(runs))
    report = collect_files(factory, runs, batch_size=batch or BATCH_SIZE, everything=everything)
    out.print(str(report), markup=False)
    if report.hint():
        out.print(report.hint(), markup=False, soft_wrap=True)
    for path, reason in report.broken:
        out.print(f"  broken: {path}: {reason}", markup=False, soft_wrap=True)
    if report.broken:
        out.print("  (broken files are left in place; fix or remove them and collect again)", markup=False)
    return 1 if report.broken else 0
