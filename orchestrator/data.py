"""`orchestrator data`: put dataset files where the `dataset` configs look for them.

No network is assumed (clusters' compute nodes rarely have one), so `generate` writes files in
the datasets' real formats — MNIST's IDX files, CIFAR-10's binary batches, an ILSVRC folder tree
of JPEGs (`train/<wnid>/*.JPEG`, `val/<wnid>/*.JPEG`, written with Pillow) — with generated
content, through the same writers the tests use. The trainers read them with their real
readers. Throughput and memory do not depend on pixel values, but accuracy does: a site that
wants accuracy puts the real files in the same place (`<data>/mnist`, `<data>/cifar10`).

`digits` writes a real data set that needs no network: scikit-learn's 1,797 handwritten digits
(8x8, 0..16), split once into a fixed training and test set (stratified, seeded: 1,438 and 359
images), upsampled to MNIST's 28x28 (bilinear, 0..255) and stored as MNIST IDX files
(`train-*` and `t10k-*`) in `<data>/digits`, so every trainer, Python 3.6 ones included, reads
them with its MNIST reader and none needs scikit-learn.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

GENERATORS = ("mnist", "cifar10", "imagenet")
#: imagenet: how many classes (wnid folders) the generated tree has, and its images' size.
IMAGENET_CLASSES = 10
IMAGENET_SIZE = "500x375"
#: The share of each digit's images held out for testing, and the split's seed.
DIGITS_TEST_FRACTION = 0.2
DIGITS_SEED = 0
DIGITS_SIZE = 28


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="orchestrator data", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    gen = sub.add_parser("generate", help="write generated MNIST / CIFAR-10 files / an ILSVRC JPEG tree in "
                                          "their real formats")
    gen.add_argument("datasets", nargs="+", choices=GENERATORS)
    gen.add_argument("--dir", default=os.environ.get("ORCHESTRATOR_DATA", "data"),
                     help="the data root (config paths.data; default: $ORCHESTRATOR_DATA or ./data)")
    gen.add_argument("-n", "--images", type=int, default=2048, help="images per dataset (default 2048)")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--classes", type=int, default=IMAGENET_CLASSES,
                     help=f"imagenet: class folders (default {IMAGENET_CLASSES})")
    gen.add_argument("--size", default=IMAGENET_SIZE,
                     help=f"imagenet: the JPEGs' WIDTHxHEIGHT (default {IMAGENET_SIZE}, about ImageNet's mean)")
    dig = sub.add_parser("digits", help="write scikit-learn's real handwritten digits (train/test split, "
                                        "28x28) as MNIST IDX files")
    dig.add_argument("--dir", default=os.environ.get("ORCHESTRATOR_DATA", "data"),
                     help="the data root (config paths.data; default: $ORCHESTRATOR_DATA or ./data)")
    args = parser.parse_args(argv)
    if args.action == "digits":
        target = Path(args.dir) / "digits"
        counts = write_digits(target)
        print(f"wrote scikit-learn's digits to {target}: {counts['train']} training and {counts['test']} "
              f"test images, 28x28, as MNIST IDX files")
        return 0

    # lazy: numpy and the trainers' writers only when a dataset is written, not for `data --help`
    from trainers.common import data

    writers = {"mnist": data.write_mnist, "cifar10": data.write_cifar10}
    test_writers = {"mnist": data.write_mnist_test, "cifar10": data.write_cifar10_test}
    for name in args.datasets:
        if name == "imagenet":
            write_imagenet(Path(args.dir) / name, args.images, args.classes, args.size, args.seed)
            continue
        target = Path(args.dir) / name
        writers[name](str(target), args.images, args.seed)
        test = max(1, args.images // 5)
        test_writers[name](str(target), test, args.seed + 1)  # a test split, for accuracy mode's path
        print(f"wrote {args.images} generated {name} images (and a test split of {test}) in its file format "
              f"to {target}; accuracy on them means nothing ({target / data.GENERATED})")
    return 0


def write_imagenet(target: Path, images: int, classes: int, size: str, seed: int) -> None:
    """`images` training JPEGs over `classes` wnid folders (and a fifth as many in val/), at `size`."""
    # lazy: numpy and the trainers' writers only when a dataset is written, not for `data --help`
    from trainers.common import data, imagenet

    width, sep, height = size.partition("x")
    if not (sep and width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
        raise SystemExit(f"orchestrator data generate: --size {size!r} is not WIDTHxHEIGHT; use e.g. --size 500x375")
    if not 1 <= classes <= imagenet.CLASSES:
        raise SystemExit(f"orchestrator data generate: --classes {classes} is not 1..{imagenet.CLASSES}")
    per_class = max(1, images // classes)
    val = max(1, per_class // 5)
    count = imagenet.write_imagenet(str(target), classes, per_class, val, (int(width), int(height)), seed)
    print(f"wrote {count} generated JPEGs ({classes} classes x {per_class} in train/<wnid>/, x {val} in "
          f"val/<wnid>/, {size}) in the ILSVRC layout to {target}; accuracy on them means nothing "
          f"({target / data.GENERATED})")


def digits_split(seed: int = DIGITS_SEED) -> dict[str, tuple]:
    """scikit-learn's digits as {split: (uint8 N x 28 x 28 images, uint8 labels)}: a stratified split
    (DIGITS_TEST_FRACTION of each digit held out) drawn with `seed`, each split in a seeded order."""
    # optional: scikit-learn only for `orchestrator data digits`
    import numpy as np
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images8 = bunch.images.astype(np.float64)  # (1797, 8, 8), 0..16
    labels = bunch.target.astype(np.int64)
    rng = np.random.RandomState(seed)
    test = []
    for digit in range(10):
        members = np.flatnonzero(labels == digit)
        rng.shuffle(members)
        test.extend(members[:int(round(len(members) * DIGITS_TEST_FRACTION))].tolist())
    is_test = np.zeros(len(labels), dtype=bool)
    is_test[test] = True
    out = {}
    for split, mask in (("train", ~is_test), ("test", is_test)):
        idx = np.flatnonzero(mask)
        rng.shuffle(idx)
        out[split] = (upsample(images8[idx] * (255.0 / 16.0), DIGITS_SIZE), labels[idx].astype(np.uint8))
    return out


def upsample(images, size: int):
    """Bilinear resize of N x h x w images to size x size (pixel centres aligned, edges clamped), as
    uint8 rounded from the 0..255 input."""
    import numpy as np  # lazy: numpy and the trainers' writers only when a dataset is written, not for `data --help`

    n, h, w = images.shape

    def axis(src: int):
        pos = np.clip((np.arange(size) + 0.5) * src / size - 0.5, 0, src - 1)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, src - 1)
        return lo, hi, pos - lo

    r0, r1, fr = axis(h)
    c0, c1, fc = axis(w)
    rows = images[:, r0, :] * (1 - fr)[None, :, None] + images[:, r1, :] * fr[None, :, None]
    out = rows[:, :, c0] * (1 - fc)[None, None, :] + rows[:, :, c1] * fc[None, None, :]
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def write_digits(target: Path, seed: int = DIGITS_SEED) -> dict[str, int]:
    """Write the digits' two splits as MNIST IDX files in `target`; {split: images}."""
    import sklearn  # optional: scikit-learn only for `orchestrator data digits`

    # lazy: numpy and the trainers' writers only when a dataset is written, not for `data --help`
    from trainers.common import data

    counts = {}
    for split, (images, labels) in digits_split(seed).items():
        data.write_idx(str(target), images, labels, split)
        counts[split] = len(labels)
    (target / data.DIGITS_SOURCE).write_text(
        f"scikit-learn {sklearn.__version__} load_digits(): 1,797 real 8x8 handwritten digits; stratified "
        f"split, {DIGITS_TEST_FRACTION:g} of each digit held out (seed {seed}); bilinear to "
        f"{DIGITS_SIZE}x{DIGITS_SIZE}, 0..16 scaled to 0..255; {counts['train']} train (train-*), "
        f"{counts['test']} test (t10k-*)\n")
    return counts
