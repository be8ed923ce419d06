"""`python -m orchestrator` / `orchestrator`: subcommands for the DB, Hydra for everything else.

    python -m orchestrator -m framework=torch model=lenet,alexnet   # a sweep (Hydra)
    orchestrator status | collect | results | rerun | db | data | images   # the CLI (orchestrator/commands/)
    orchestrator --help                                                    # the CLI's, with the config groups

The CLI's path imports neither Hydra nor what a sweep needs, so that it starts at once.
"""
from __future__ import annotations

import sys

from orchestrator.commands import command_at


def is_cli(argv: list[str]) -> bool:
    """Whether `argv` (without the program) is for the CLI: a subcommand (commands.NAMES), perhaps
    after --db/--runs options, or -h/--help; anything else is Hydra's."""
    return command_at(argv) is not None


def main() -> int:
    if is_cli(sys.argv[1:]):
        # lazy: each subcommand imports only what it runs (Hydra's app costs the others its start)
        from orchestrator import cli

        return cli.main(sys.argv[1:])
    # lazy: each subcommand imports only what it runs (Hydra's app costs the others its start)
    from orchestrator.hydra_app import main as hydra_main

    hydra_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
