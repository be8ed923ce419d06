"""`python -m orchestrator` / `orchestrator`: subcommands for the DB, Hydra for everything else.

    python -m orchestrator -m framework=torch model=lenet,alexnet   # a sweep (Hydra)
    orchestrator status | collect | results | rerun | db | data | images   # the CLI (orchestrator/cli.py)
    orchestrator --help                                                    # the CLI's, with the config groups

The CLI's path imports neither Hydra nor what a sweep needs, so that it starts at once.
"""
from __future__ import annotations

import sys

SUBCOMMANDS = ("status", "collect", "results", "rerun", "report", "compare", "db", "data", "images")
#: The CLI's options that may come before its subcommand, each with a value.
CLI_OPTIONS = ("--db", "--runs")


def is_cli(argv: list[str]) -> bool:
    """Whether `argv` (without the program) is for the CLI: a subcommand, perhaps after --db/--runs
    options, or -h/--help; anything else is Hydra's."""
    i = 0
    while i < len(argv) and argv[i].partition("=")[0] in CLI_OPTIONS:
        i += 1 if "=" in argv[i] else 2
    return i < len(argv) and argv[i] in (*SUBCOMMANDS, "-h", "--help")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "data":
        # lazy: each subcommand imports only what it runs (Hydra's app costs the others its start)
        from orchestrator import data

        return data.main(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "images":
        # lazy: each subcommand imports only what it runs (Hydra's app costs the others its start)
        from orchestrator import image_commands

        return image_commands.main(sys.argv[2:])
    if is_cli(sys.argv[1:]):
        # lazy: each subcommand imports only what it runs (Hydra's app costs the others its start)
        from orchestrator import cli

        return cli.main(sys.argv[1:])
    # lazy: each subcommand imports only what it runs (Hydra's app costs the others its start)
    from orchestrator.app import main as hydra_main

    hydra_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
