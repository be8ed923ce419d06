"""`orchestrator data`: put dataset files where the `dataset` configs look for them.

No network is assumed (clusters' compute nodes rarely have one), so this command writes files in
the datasets' real formats — MNIST's IDX files, CIFAR-10's binary batches — with generated
content, through the same writers the tests use. The trainers read them with their real
readers. Throughput and memory do not depend on pixel values, but accuracy does: a site that
wants accuracy puts the real files in the same place (`<data>/mnist`, `<data>/cifar10`).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

GENERATORS = ("mnist", "cifar10")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="orchestrator data", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    gen = sub.add_parser("generate", help="write generated MNIST / CIFAR-10 files in their real formats")
    gen.add_argument("datasets", nargs="+", choices=GENERATORS)
    gen.add_argument("--dir", default=os.environ.get("ORCHESTRATOR_DATA", "data"),
                     help="the data root (config paths.data; default: $ORCHESTRATOR_DATA or ./data)")
    gen.add_argument("-n", "--images", type=int, default=2048, help="images per dataset (default 2048)")
    gen.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from trainers.common import data

    writers = {"mnist": data.write_mnist, "cifar10": data.write_cifar10}
    for name in args.datasets:
        target = Path(args.dir) / name
        writers[name](str(target), args.images, args.seed)
        print(f"wrote {args.images} generated {name} images in its file format to {target}")
    return 0
