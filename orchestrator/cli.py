"""`orchestrator <command>`: the parser built from the command modules, and the dispatch.

`python -m orchestrator -m ...` launches sweeps through Hydra; the subcommands (one module each,
orchestrator/commands/: `status`, `collect`, `results`, `rerun`, `report`, `compare`, `db`,
`data`, `images`) look after what the sweeps left. They print plain text quickly and answer bad
input with a message that says what to do, never a traceback (commands.common.answer).

Each command imports what it needs when it runs: `--help` and a usage error import neither
SQLAlchemy nor rich, and only `rerun` reads the config code.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Optional, Sequence

from orchestrator.commands import COMMON_OPTIONS, NAMES, command_at
from orchestrator.commands.common import PROG, answer, default_runs
from orchestrator.commands.render import console
from orchestrator.store.sql_adapters import default_url


def command(name: str) -> ModuleType:
    """The module of subcommand `name` (orchestrator/commands/<name>.py)."""
    return importlib.import_module(f"orchestrator.commands.{name}")


def _config_groups() -> str:
    """The config groups a sweep chooses from, as Hydra's --help lists them (read from conf/,
    without Hydra)."""
    conf = Path(__file__).resolve().parent.parent / "conf"
    groups = sorted(p for p in conf.iterdir() if p.is_dir()) if conf.is_dir() else []
    lines = [f"  {g.name}: {', '.join(sorted(f.stem for f in g.glob('*.yaml')))}" for g in groups
             if any(g.glob("*.yaml"))]
    return "config groups (group=choice):\n" + "\n".join(lines) if lines else ""


def build_parser() -> argparse.ArgumentParser:
    """The CLI's parser: a subparser per commands.NAMES, each with the arguments its module
    declares (`data` and `images` parse their own: listed here for --help)."""
    # --db and --runs are accepted before or after the subcommand; SUPPRESS keeps a value
    # given before it from being reset by the subcommand's own (absent) option.
    common = argparse.ArgumentParser(add_help=False)
    for option, (metavar, help) in COMMON_OPTIONS.items():
        common.add_argument(option, default=argparse.SUPPRESS, metavar=metavar, help=help)

    parser = argparse.ArgumentParser(
        prog=PROG, parents=[common], formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Inspect and collect benchmark sweeps.",
        epilog=f"A sweep is launched through Hydra:\n  {PROG} -m framework=torch model=lenet,alexnet "
               f"dataset=synthetic,mnist\n{_config_groups()}\n"
               f"({PROG} --cfg job [overrides] prints the composed config; `data` writes datasets: "
               f"{PROG} data --help)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in NAMES:
        module = command(name)
        if not hasattr(module, "add_arguments"):  # parses its own arguments (main(argv))
            sub.add_parser(name, help=module.HELP, add_help=False)
            continue
        p = sub.add_parser(name, parents=[common], help=module.HELP, description=getattr(module, "DESCRIPTION", None))
        module.add_arguments(p)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs one subcommand; returns the exit status (0 ok, 1 a problem reported, 2 bad usage)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    at = command_at(argv)
    if at is not None and argv[at] in NAMES:
        module = command(argv[at])
        if not hasattr(module, "add_arguments"):  # `data`, `images`: their own arguments
            return module.main(argv[at + 1:])
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse has already printed
        return exc.code if isinstance(exc.code, int) else 2
    args.db = getattr(args, "db", None) or default_url()
    args.runs = getattr(args, "runs", None) or default_runs()
    return answer(lambda: command(args.command).run(args, console()), args.db)
