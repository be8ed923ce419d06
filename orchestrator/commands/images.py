"""`images`: container images built from the framework recipes (orchestrator.envs.images), and their
Apptainer definitions (orchestrator.envs.apptainer)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

HELP = "container images of the framework recipes (build, list, def): images --help"


def main(argv: Sequence[str]) -> int:
    """`orchestrator images build FW[,FW...]|all [--build B] [--force]` / `orchestrator images list` /
    `orchestrator images def FW [--base cpu|cuda12|cuda11|cuda10 | --build B] [-o FILE]`."""
    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    # lazy: the image and environment machinery only for `orchestrator images`
    from orchestrator.envs.venv_runtime import available_recipes

    names = available_recipes()
    if args.command == "def":
        return _definition(args, names)
    if args.command == "list":
        return _list(names)
    return _build(args, names)


def _parser() -> argparse.ArgumentParser:
    """The subcommands and their options; the bases `def` offers are apptainer.py's table."""
    # lazy: the image and environment machinery only for `orchestrator images`
    from orchestrator.envs.apptainer import BASES

    parser = argparse.ArgumentParser(prog="orchestrator images",
                                     description="Container images built from containers/<framework>/ "
                                                 "(cached under $ORCHESTRATOR_CACHE/images by recipe hash).")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help="build (or reuse) the images of these frameworks")
    p.add_argument("frameworks", help="comma-separated frameworks, or all")
    p.add_argument("--force", action="store_true", help="build again even if an image of this recipe exists")
    p.add_argument("--build", default="default", help="a build of containers/<fw>/builds.yaml: its own image "
                                                      "(default: the recipe itself)")
    sub.add_parser("list", help="the images of the current recipes and their builds: digest, size, build time")
    p = sub.add_parser("def", help="print (or write) the Apptainer definition of a framework's recipe on a base "
                                   "(orchestrator/envs/apptainer.py); the CPU image needs none: apptainer build "
                                   "<fw>.sif <image dir>")
    p.add_argument("framework")
    p.add_argument("--base", help="the base image: " + "; ".join(
        f"{b.name}: {b.system}, {b.serves()}" for b in BASES.values()) + " (default cpu)")
    p.add_argument("--build", default="default", help="a build of containers/<fw>/builds.yaml: its definition, "
                                                      "on its GPU base or cpu (its SIF: <fw>-<build>.sif)")
    p.add_argument("-o", "--output", help="write the definition to this file instead of printing it")
    return parser


def _list(names: Sequence[str]) -> int:
    """`images list`: each recipe's image (digest, size, build time, folder), or how to build it; then
    each build's (builds.yaml) that a runtime=container can run, built or not. A builds.yaml that does
    not read is said in one line (exit 1), not left out in silence."""
    # lazy: the image and environment machinery only for `orchestrator images`
    from orchestrator.envs import builds, image_recipe, images

    store, broken = images.ImageStore(), 0
    for fw in names:
        try:
            builds.declared(fw)
        except builds.BuildError as exc:  # its default image is still listed; its builds are said broken
            print(f"{fw}'s builds are not listed: {exc}", file=sys.stderr)
            broken = 1
        for build in builds.names(fw):
            if builds.refusal(fw, build, "container"):  # a GPU base's build: an Apptainer definition, no image
                continue
            recipe = image_recipe.Recipe(fw, build=build)
            m, how = store.manifest(recipe), fw if build == builds.DEFAULT else f"{fw} --build {build}"
            print(f"{recipe.name:16s} " + (f"image:{m['digest'][:23]}  {m['size_bytes'] / 1e6:6.0f} MB  built in "
                                           f"{m['build_s']:.0f} s  {m['dir']}" if m
                                           else f"not built (orchestrator images build {how})"))
    return broken


def _build(args: argparse.Namespace, names: Sequence[str]) -> int:
    """`images build`: each named framework's image built (or reused) and its older ones pruned;
    a failed build is said and the others still built (exit 1)."""
    # lazy: the image and environment machinery only for `orchestrator images`
    from orchestrator.envs import builds, image_recipe, images, venv_runtime

    wanted = names if args.frameworks == "all" else [f.strip() for f in args.frameworks.split(",") if f.strip()]
    unknown = [f for f in wanted if f not in names]
    if unknown:
        print(f"no recipe for {', '.join(unknown)} (containers/ has: {', '.join(names)})", file=sys.stderr)
        return 2
    refused = [why for fw in wanted if (why := builds.refusal(fw, args.build, "container"))]
    if refused:
        print(f"[images] {refused[0]}", file=sys.stderr)
        return 2
    store, status = images.ImageStore(), 0
    for fw in wanted:
        try:
            store.ensure(image_recipe.Recipe(fw, build=args.build), force=args.force)
            store.prune(image_recipe.Recipe(fw, build=args.build))
        except venv_runtime.EnvironmentNotReady as exc:
            print(f"[images] {fw}: FAILED ({exc.error_class}): {exc}", file=sys.stderr)
            status = 1
    return status


def _definition(args: argparse.Namespace, names: Sequence[str]) -> int:
    """`images def`: the recipe's Apptainer definition on a base, printed or written to -o."""
    # lazy: the image and environment machinery only for `orchestrator images`
    from orchestrator.envs.apptainer import generate
    from orchestrator.envs.venv_runtime import EnvironmentNotReady

    if args.framework not in names:
        print(f"no recipe for {args.framework}; containers/ has: {', '.join(names)}", file=sys.stderr)
        return 2
    try:
        text = generate(args.framework, args.base, build=args.build)
    except EnvironmentNotReady as exc:  # a DefinitionError, or a build the framework does not declare
        print(f"[images] {exc}", file=sys.stderr)
        return 2
    if args.output:
        Path(args.output).write_text(text)
        what = (args.base or "cpu") if args.build == "default" else f"build {args.build}"
        print(f"[images] {args.framework}: {what} definition written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
