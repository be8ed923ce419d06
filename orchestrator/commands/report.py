"""`report`: a sweep's tables, figures and HTML page, written into a directory
(orchestrator.report.build)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.commands.common import add_noisy_cv, add_sweep, noisy_cv, pick_sweeps
from orchestrator.store.sql_adapters import Rows

if TYPE_CHECKING:
    from rich.console import Console

HELP = "a sweep's tables, figures and HTML page, into a directory"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_sweep(p, help="a sweep (an id, a unique prefix, or 'latest'); repeatable; default: every sweep",
              action="append")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="where to write index.html, tables/<metric>.csv and .md, figures/<name>.svg and .png")
    add_noisy_cv(p, "mark a cell noisy")


def run(args: argparse.Namespace, out: Console) -> int:
    # lazy: SQLAlchemy (~0.3 s) only in the commands that need it: `status` and --help start without it
    from orchestrator.store import db
    from orchestrator.report.build import write_report

    threshold = noisy_cv(args.noisy_cv)
    factory = db.open_db(args.db, create=False)
    with factory() as session:
        rows = Rows.of(session)
        picked = [s for wanted in args.sweep for s in pick_sweeps(rows, wanted)] if args.sweep else pick_sweeps(rows, None)
        ids = list(dict.fromkeys(s.id for s in picked))
        report = write_report(session, ids, Path(args.out), threshold)
    out.print(f"report of {len(ids)} sweep(s), {report.cells} cells: {report.index}", markup=False, soft_wrap=True)
    out.print(f"  {len(report.tables)} table files in {report.out / 'tables'}, {len(report.figures)} figure files in "
              f"{report.out / 'figures'}", markup=False, soft_wrap=True)
    for why in report.skipped:
        out.print(f"  not drawn: {why}", markup=False, soft_wrap=True)
    return 0
