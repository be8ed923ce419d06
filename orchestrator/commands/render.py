"""How the commands print: values fitted to a cell of a table or one line, CSV, the console."""
from __future__ import annotations

import csv
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional, Sequence

if TYPE_CHECKING:  # imported when a command prints
    from rich.console import Console

#: A failed run's message is cut to this many characters in `status`.
MESSAGE_WIDTH = 120


def console() -> Console:
    """Rich output on stdout: the terminal's width there, else wide enough not to cut rows."""
    # lazy: rich's tables and console only where something is drawn with them
    from rich.console import Console

    out = Console(highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = 200
    return out


def when(t: Optional[float]) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else ""


def one_line(message: str, width: int = MESSAGE_WIDTH) -> str:
    flat = " ".join(message.split())
    return flat if len(flat) <= width else flat[:width - 1] + "…"


def rate(value: Optional[float], std: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" + (f" ± {std:,.1f}" if std is not None else "")


def num(value: Optional[float], digits: int) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def write_csv(batches: Iterable[Sequence[Sequence[Any]]], columns: Sequence[str]) -> int:
    """Rows, in batches (an iterable of lists of tuples in the order of `columns`), as CSV on
    stdout, a header first, missing values empty (csv writes None so): each batch as it comes, in
    csv's C loop, so that a million rows stream at the database's pace, not at a Python loop's
    (a batch, not a row, per step: a generator's step per row cost a tenth of the time)."""
    from orchestrator.store.csv_lines import DIALECT  # lazy: it needs SQLAlchemy, `status` starts without

    writer = csv.writer(sys.stdout, **DIALECT)
    writer.writerow(columns)
    for rows in batches:
        writer.writerows(rows)
    return 0


def first_then_rest(first: Any, rest: Iterable[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def print_more(out: Console, more: int) -> None:
    """How many rows a table left out, and how to see them."""
    if more:
        out.print(f"{more:,} more not shown: --limit N shows the first N, --all every one "
                  f"(--csv prints them all as CSV)", markup=False)
