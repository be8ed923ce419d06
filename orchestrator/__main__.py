"""`python -m orchestrator` / `orchestrator`: subcommands for the DB, Hydra for everything else.

    python -m orchestrator -m framework=torch model=lenet,alexnet   # a sweep (Hydra)
    orchestrator status | collect | results | rerun | data                 # the CLI (orchestrator/cli.py)
"""
from __future__ import annotations

import sys

SUBCOMMANDS = ("status", "collect", "results", "rerun", "data")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "data":
        from orchestrator import data

        return data.main(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
        from orchestrator import cli

        return cli.main(sys.argv[1:])
    from orchestrator.app import main as hydra_main

    hydra_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
