"""`db copy SRC DST`: the results database itself, copied into another (orchestrator.store.db_copy)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from orchestrator.commands.common import CliError, shown

if TYPE_CHECKING:
    from rich.console import Console

HELP = "the results database itself: `db copy SRC DST`"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="db_command", required=True, metavar="{copy}")
    q = sub.add_parser("copy", help="every sweep, cell, run and metric of SRC that DST lacks, into DST",
                       description="Copies every sweep, cell, run, metric and refusal of SRC that DST lacks "
                                   "(rows matched by their ids and run uids: twice adds nothing). DST is made "
                                   "when missing, refused at another schema revision.")
    q.add_argument("src", metavar="SRC", help="a database URL (sqlite:///results.db, postgresql://user@host/name)")
    q.add_argument("dst", metavar="DST", help="a database URL")


def run(args: argparse.Namespace, out: Console) -> int:
    # lazy: SQLAlchemy (~0.3 s) only in the commands that need it: `status` and --help start without it
    from orchestrator.store import db
    from orchestrator.store.db_copy import CopyRefused, copy

    if args.src == args.dst:
        raise CliError(f"db copy: SRC and DST are one database ({shown(args.src)}); name another DST")
    try:
        report = copy(args.src, args.dst)
    except CopyRefused as exc:
        raise CliError(f"db copy into {shown(args.dst)}: {exc}") from None
    except db.NoDatabase as exc:
        raise CliError(f"db copy from {shown(args.src)}: {exc}; nothing was copied") from None
    except db.Unusable as exc:  # which of the two it is, by its URL
        raise CliError(f"db copy: cannot use {exc.url}: {exc}; nothing was copied") from None
    out.print(f"{shown(args.src)} -> {shown(args.dst)}: {report}", markup=False, soft_wrap=True)
    return 0
