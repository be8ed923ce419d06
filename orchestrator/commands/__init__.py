"""The CLI's subcommands, one module each (`orchestrator <command> ...`).

Each module of this package is one command: it declares its arguments (`add_arguments`) and
does its work as a function of plain values that `run(args, out)` calls, printing through
commands/render.py; `data` and `images` take their own argument lists (`main(argv)`, their
arguments parsed there). NAMES below is the one list of them: orchestrator.cli builds the parser
from it and __main__ tells the CLI's argv from Hydra's by it. This package's modules import what
a command needs when it runs, so that `--help` imports neither SQLAlchemy nor rich.
"""
from __future__ import annotations

from typing import Optional, Sequence

#: The subcommands, in the order `--help` lists them: each is the module of that name here.
NAMES = ("status", "collect", "results", "rerun", "report", "compare", "db", "data", "images")
#: The options every subcommand takes, before or after its name: option -> (metavar, help).
COMMON_OPTIONS = {
    "--db": ("URL", "results database (default: $ORCHESTRATOR_DB or sqlite:///results.db)"),
    "--runs": ("DIR", "run directories (default: $ORCHESTRATOR_RUNS or ./runs)"),
}


def command_at(argv: Sequence[str]) -> Optional[int]:
    """Where the subcommand (or -h/--help) is in `argv` (without the program), after any common
    options and their values; None where there is none (then the argv is Hydra's)."""
    i = 0
    while i < len(argv) and argv[i].partition("=")[0] in COMMON_OPTIONS:
        i += 1 if "=" in argv[i] else 2
    return i if i < len(argv) and argv[i] in (*NAMES, "-h", "--help") else None
