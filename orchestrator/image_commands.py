"""`orchestrator images build|list|def`: the command line over images.py (image trees built
from the recipes) and apptainer.py (Apptainer definitions from the same recipes).

Its own module because it is above both: apptainer.py reads images.py's recipe and layout, so
images.py cannot hold a command that reaches apptainer.py.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from orchestrator.apptainer import BASES, DefinitionError, generate
from orchestrator.images import ImageStore, Recipe
from orchestrator.venv_runtime import EnvironmentNotReady, available_recipes


def main(argv: Sequence[str]) -> int:
    """`orchestrator images build FW[,FW...]|all [--force]` / `orchestrator images list` /
    `orchestrator images def FW [--base cpu|cuda12|cuda11|cuda10] [-o FILE]`."""
    parser = argparse.ArgumentParser(prog="orchestrator images",
                                     description="Container images built from containers/<framework>/ "
                                                 "(cached under $ORCHESTRATOR_CACHE/images by recipe hash).")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help="build (or reuse) the images of these frameworks")
    p.add_argument("frameworks", help="comma-separated frameworks, or all")
    p.add_argument("--force", action="store_true", help="build again even if an image of this recipe exists")
    sub.add_parser("list", help="the images of the current recipes: digest, size, build time")
    p = sub.add_parser("def", help="print (or write) the Apptainer definition of a framework's recipe on a base "
                                   "(orchestrator/apptainer.py); the CPU image needs none: apptainer build "
                                   "<fw>.sif <image dir>")
    p.add_argument("framework")
    p.add_argument("--base", default="cpu", help="the base image: " + "; ".join(
        f"{b.name}: {b.system}, {b.serves()}" for b in BASES.values()) + " (default cpu)")
    p.add_argument("-o", "--output", help="write the definition to this file instead of printing it")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    names = available_recipes()
    if args.command == "def":
        return _definition(args, names)
    store = ImageStore()
    if args.command == "list":
        for fw in names:
            m = store.manifest(Recipe(fw))
            print(f"{fw:12s} " + (f"image:{m['digest'][:23]}  {m['size_bytes'] / 1e6:6.0f} MB  built in "
                                  f"{m['build_s']:.0f} s  {m['dir']}" if m else "not built (orchestrator images build "
                                                                               f"{fw})"))
        return 0
    wanted = names if args.frameworks == "all" else [f.strip() for f in args.frameworks.split(",") if f.strip()]
    unknown = [f for f in wanted if f not in names]
    if unknown:
        print(f"no recipe for {', '.join(unknown)} (containers/ has: {', '.join(names)})", file=sys.stderr)
        return 2
    status = 0
    for fw in wanted:
        try:
            store.ensure(Recipe(fw), force=args.force)
            store.prune(Recipe(fw))
        except EnvironmentNotReady as exc:
            print(f"[images] {fw}: FAILED ({exc.error_class}): {exc}", file=sys.stderr)
            status = 1
    return status


def _definition(args, names: Sequence[str]) -> int:
    """`images def`: the recipe's Apptainer definition on a base, printed or written to -o."""
    if args.framework not in names:
        print(f"no recipe for {args.framework}; containers/ has: {', '.join(names)}", file=sys.stderr)
        return 2
    try:
        text = generate(args.framework, args.base)
    except DefinitionError as exc:
        print(f"[images] {exc}", file=sys.stderr)
        return 2
    if args.output:
        Path(args.output).write_text(text)
        print(f"[images] {args.framework}: {args.base} definition written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
