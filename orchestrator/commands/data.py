"""`data`: dataset files where the `dataset` configs look for them (orchestrator.sweep.dataset_files writes them)."""
from __future__ import annotations

import argparse
import functools
import os
from pathlib import Path

from orchestrator.sweep import dataset_files

HELP = "write dataset files (generate mnist|cifar10|cifar100|svhn|imagenet|ptb|imdb, or scikit-learn's digits): data --help"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="orchestrator data", description=dataset_files.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    gen = sub.add_parser("generate", help="write generated MNIST / CIFAR-10 / CIFAR-100 / SVHN files / an ILSVRC "
                                          "JPEG tree / Penn Treebank's ptb.*.txt / Keras's imdb.npz in their real formats")
    gen.add_argument("datasets", nargs="+", choices=dataset_files.GENERATORS)
    gen.add_argument("--dir", default=os.environ.get("ORCHESTRATOR_DATA", "data"),
                     help="the data root (config paths.data; default: $ORCHESTRATOR_DATA or ./data)")
    gen.add_argument("-n", "--images", type=int, default=2048,
                     help="images per dataset (default 2048; ptb: train sentences, imdb: reviews per split)")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--classes", type=int, default=dataset_files.IMAGENET_CLASSES,
                     help=f"imagenet: class folders (default {dataset_files.IMAGENET_CLASSES})")
    gen.add_argument("--size", default=dataset_files.IMAGENET_SIZE,
                     help=f"imagenet: the JPEGs' WIDTHxHEIGHT (default {dataset_files.IMAGENET_SIZE}, about ImageNet's mean)")
    dig = sub.add_parser("digits", help="write scikit-learn's real handwritten digits (train/test split, "
                                        "28x28) as MNIST IDX files")
    dig.add_argument("--dir", default=os.environ.get("ORCHESTRATOR_DATA", "data"),
                     help="the data root (config paths.data; default: $ORCHESTRATOR_DATA or ./data)")
    args = parser.parse_args(argv)
    if args.action == "digits":
        target = Path(args.dir) / "digits"
        counts = dataset_files.write_digits(target)
        print(f"wrote scikit-learn's digits to {target}: {counts['train']} training and {counts['test']} "
              f"test images, 28x28, as MNIST IDX files")
        return 0

    # lazy: numpy and the writers only when a dataset is written
    from trainers.common import data as files
    from trainers.common.cifar100_svhn import WRITERS

    writers = {"mnist": files.write_mnist, "cifar10": files.write_cifar10, **WRITERS}
    test_writers = {"mnist": files.write_mnist_test, "cifar10": files.write_cifar10_test,
                    **{name: functools.partial(write, split="test") for name, write in WRITERS.items()}}
    for name in args.datasets:
        if name in dataset_files.TEXT_GENERATORS:
            dataset_files.write_text(name, Path(args.dir) / name, args.images, args.seed)
            continue
        if name == "imagenet":
            dataset_files.write_imagenet(Path(args.dir) / name, args.images, args.classes, args.size, args.seed)
            continue
        target = Path(args.dir) / name
        writers[name](str(target), args.images, args.seed)
        test = max(1, args.images // 5)
        test_writers[name](str(target), test, args.seed + 1)  # a test split, for accuracy mode's path
        print(f"wrote {args.images} generated {name} images (and a test split of {test}) in its file format "
              f"to {target}; accuracy on them means nothing ({target / files.GENERATED})")
    return 0
