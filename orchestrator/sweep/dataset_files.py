"""`orchestrator data`: put dataset files where the `dataset` configs look for them.

No network is assumed (clusters' compute nodes rarely have one), so `generate` writes files in
the datasets' real formats — MNIST's IDX files, CIFAR-10's binary batches, CIFAR-100's Python
pickles, SVHN's MAT files (written with scipy.io.savemat), an ILSVRC folder tree
of JPEGs (`train/<wnid>/*.JPEG`, `val/<wnid>/*.JPEG`, written with Pillow), Penn Treebank's
`ptb.train.txt`/`ptb.valid.txt`/`ptb.test.txt`, Keras's `imdb.npz` — with generated
content, through the same writers the tests use. The trainers read them with their real
readers. Throughput and memory do not depend on pixel values, but accuracy does: a site that
wants accuracy puts the real files in the same place (`<data>/mnist`, `<data>/cifar10`,
`<data>/cifar100`, `<data>/svhn`, `<data>/ptb`, `<data>/imdb`).

`digits` writes a real data set that needs no network: scikit-learn's 1,797 handwritten digits
(8x8, 0..16), split once into a fixed training and test set (stratified, seeded: 1,438 and 359
images), upsampled to MNIST's 28x28 (bilinear, 0..255) and stored as MNIST IDX files
(`train-*` and `t10k-*`) in `<data>/digits`, so every trainer, Python 3.6 ones included, reads
them with its MNIST reader and none needs scikit-learn.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

GENERATORS = ("mnist", "cifar10", "cifar100", "svhn", "imagenet", "ptb", "imdb")
#: the text data sets' generators (trainers/common/text_data.py) and what `-n` counts for each
TEXT_GENERATORS = {"ptb": ("write_ptb", "train sentences (and a fifth as many in valid and test)"),
                   "imdb": ("write_imdb", "reviews in each of train and test")}
#: The datasets whose files a sweep writes itself where they are missing, at submission: real data
#: that needs no network (scikit-learn's digits), as trainers make synthetic data in memory.
MADE_ON_FIRST_USE = ("digits",)
#: imagenet: how many classes (wnid folders) the generated tree has, and its images' size.
IMAGENET_CLASSES = 10
IMAGENET_SIZE = "500x375"
#: The share of each digit's images held out for testing, and the split's seed.
DIGITS_TEST_FRACTION = 0.2
DIGITS_SEED = 0
DIGITS_SIZE = 28


def missing_files(dataset: dict) -> str | None:
    """Why a cell's dataset (its composed `dataset` config) cannot be read, with the command that
    writes its files; None where its folder is there, it reads no files (synthetic), or a sweep
    makes it at submission (MADE_ON_FIRST_USE). Asked at expansion, on the login node: the data
    root is the cluster's shared file system, where the jobs read it."""
    name, folder = dataset.get("name"), dataset.get("dir")
    if not folder or name in MADE_ON_FIRST_USE or Path(folder).expanduser().is_dir():
        return None
    root = Path(folder).expanduser().parent
    make = (f"`orchestrator data generate {name} --dir {root}` writes generated files in its format "
            f"(throughput only: accuracy on them means nothing)" if name in GENERATORS
            else "`orchestrator data` lists what it can write")
    return (f"dataset={name} reads {folder}, which does not exist: put the real files there, or {make}; "
            f"or use dataset=synthetic dataset.like={name}")


def made_on_first_use(folders: set[str]) -> list[str]:
    """Writes each MADE_ON_FIRST_USE dataset folder that is missing (digits: scikit-learn's, no
    network), into a private folder renamed into place, so two sweeps starting at once both find
    it whole; the notes to print, one per folder written."""
    notes = []
    for folder in sorted(folders):
        target = Path(folder).expanduser()
        if target.is_dir():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        private = target.parent / f".{target.name}.{os.getpid()}.partial"
        counts = write_digits(private)
        try:
            private.rename(target)
        except OSError:  # another sweep made it first: theirs is whole, ours goes
            shutil.rmtree(private, ignore_errors=True)
            continue
        notes.append(f"wrote scikit-learn's digits to {target} on first use: {counts['train']} training and "
                     f"{counts['test']} test images (`orchestrator data digits` writes them ahead)")
    return notes


def write_text(name: str, target: Path, count: int, seed: int) -> None:
    """A text data set's generated files in their real format (ptb: Mikolov's ptb.*.txt, imdb: Keras's
    imdb.npz) in `target`, with the GENERATED marker."""
    # lazy: numpy and the trainers' writers only when a dataset is written, not for `data --help`
    from trainers.common import text_data

    writer, what = TEXT_GENERATORS[name]
    paths = getattr(text_data, writer)(str(target), count, seed)
    print(f"wrote {count} generated {what} to {', '.join(paths)}; accuracy on them means nothing "
          f"({target / 'GENERATED'})")


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
