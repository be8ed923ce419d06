"""Dataset readers (MNIST IDX, CIFAR-10 binary, synthetic) and writers for the file formats.
ImageNet's JPEG tree has its own reader and loader, trainers/common/imagenet.py, and CIFAR-100's
pickles and SVHN's MAT files theirs, trainers/common/cifar100_svhn.py (`load` hands them on).

Each reader reads a training split and, for accuracy mode, a test split (MNIST's t10k-* files,
CIFAR-10's test_batch.bin). `digits` is scikit-learn's handwritten digits as `orchestrator data
digits` stores them: MNIST IDX files, read by the MNIST reader (so no trainer needs scikit-learn).
Generated files carry a GENERATED marker, which accuracy mode reports.

Every framework reads the same bytes the same way, so a difference in throughput is the
framework's and not its input pipeline's. Images are kept as uint8 NCHW in memory (the
full CIFAR-10 training set is 150 MB that way, 600 MB as float32) and turned into float32
in [0, 1] only for the few batches the pool needs (`Dataset.batch`).

The writers produce valid files in the two formats. Tests use them, and so does anyone
who needs a small dataset on a machine that cannot download the real one:

    python -m trainers.common.data mnist data/mnist --n 1000
    python -m trainers.common.data cifar10 data/cifar10 --n 1000
"""
import argparse
import gzip
import os
import struct
import sys
import zlib

import numpy as np

from trainers.common import cifar100_svhn, imagenet
from trainers.common.errors import DataError, Unsupported
from trainers.common.generated import GENERATED, GENERATED_NOTE, mark_generated
from trainers.common.inputs import DATASETS, SYNTHETIC_ONLY, TEXT, resize_nearest, to_float
from trainers.common.text_data import Examples, TokenIds, read_imdb, read_ptb, synthetic_imdb

MNIST_IMAGES = "train-images-idx3-ubyte"
MNIST_LABELS = "train-labels-idx1-ubyte"
# the held-out split, as MNIST names it (accuracy mode evaluates on it)
MNIST_TEST_IMAGES = "t10k-images-idx3-ubyte"
MNIST_TEST_LABELS = "t10k-labels-idx1-ubyte"
MNIST_FILES = {"train": (MNIST_IMAGES, MNIST_LABELS),
               "test": (MNIST_TEST_IMAGES, MNIST_TEST_LABELS)}
CIFAR10_DIR = "cifar-10-batches-bin"
CIFAR10_BATCHES = ["data_batch_%d.bin" % i for i in range(1, 6)]
CIFAR10_TEST = "test_batch.bin"
SPLITS = ("train", "test")
# `orchestrator data digits` writes this beside the IDX files: where the images came from
DIGITS_SOURCE = "SOURCE"
CIFAR10_RECORD = 1 + 3 * 32 * 32
#: the text data sets' readers (trainers/common/text_data.py)
TEXT_READERS = {"ptb": read_ptb, "imdb": read_imdb}
#: the text shapes whose random data is not a word stream: a class per sequence (text_data.py)
SYNTHETIC_TEXT = {"imdb": synthetic_imdb}
_IDX_UBYTE = 0x08


class Dataset(Examples):
    """Images as uint8 NCHW, labels as int64, and the number of classes."""

    def __init__(self, name, images, labels, classes):
        if images.ndim != 4 or len(images) != len(labels):
            raise ValueError("images must be NCHW with one label per image")
        self.name = name
        self.images = images
        self.labels = labels.astype(np.int64)
        self.classes = classes

    def batch(self, indices, size=None):
        """float32 images in [0, 1] (resized to size=(H, W) if given) and int64 labels."""
        images = self.images[indices]
        if size is not None:
            images = resize_nearest(images, size[0], size[1])
        return to_float(images), self.labels[indices]


# ---------------------------------------------------------------------------- readers

def load(dataset, data_dir, split="train", seq_len=None):
    """Read a dataset's files from `data_dir` (mnist, cifar10, digits, cifar100, svhn): its training split, or
    with split="test" its held-out one (MNIST's t10k files, CIFAR-10's test_batch.bin). For
    imagenet, the ILSVRC tree's split as an imagenet.ImageFolder, whose images are decoded when
    a batch is asked for (a run's steps take them from imagenet.Loader's worker processes). The
    text data sets (ptb, imdb: text_data.py) as `seq_len` token ids (default: the shape's)."""
    if split not in SPLITS:
        raise ValueError("split is train or test, not %r" % (split,))
    if dataset in TEXT_READERS:
        return TEXT_READERS[dataset](data_dir, split, seq_len or DATASETS[dataset].shape[0], DATASETS[dataset].classes)
    if dataset == "mnist":
        return read_mnist(data_dir, split)
    if dataset == "digits":
        return read_digits(data_dir, split)
    if dataset == "cifar10":
        return read_cifar10(data_dir, split)
    if dataset in cifar100_svhn.READERS:  # CIFAR-100's pickles, SVHN's .mat files
        return Dataset(dataset, *cifar100_svhn.READERS[dataset](data_dir, split))
    if dataset == "imagenet":  # the ILSVRC tree, decoded per batch (trainers/common/imagenet.py)
        return imagenet.read(data_dir, split)
    if dataset in SYNTHETIC_ONLY:
        raise Unsupported("%s is random data with no files; use --dataset synthetic --like %s" % (dataset, dataset))
    raise Unsupported("no reader for dataset %r" % (dataset,))


def read_mnist(data_dir, split="train", name="mnist"):
    """MNIST's training (or test) set from the IDX files (plain or .gz) in `data_dir`."""
    images_name, labels_name = MNIST_FILES[split]
    images_path = _find_mnist(data_dir, images_name, name)
    labels_path = _find_mnist(data_dir, labels_name, name)
    images = _parse_idx(_read_bytes(images_path), images_path, 3)
    labels = _parse_idx(_read_bytes(labels_path), labels_path, 1)
    if images.shape[1:] != (28, 28):
        raise DataError("%s holds %dx%d images; %s images are 28x28"
                        % (images_path, images.shape[1], images.shape[2], name))
    if len(images) != len(labels):
        raise DataError("%s holds %d images but %s holds %d labels"
                        % (images_path, len(images), labels_path, len(labels)))
    _check_labels(labels, 10, labels_path)
    return Dataset(name, images.reshape(-1, 1, 28, 28), labels, 10)


def read_digits(data_dir, split="train"):
    """scikit-learn's handwritten digits as `orchestrator data digits` stores them: MNIST IDX
    files (28x28, ten classes) of a fixed train/test split, read by the MNIST reader."""
    return read_mnist(data_dir, split, name="digits")


def read_cifar10(data_dir, split="train"):
    """CIFAR-10's training set from the binary batches (data_batch_1.bin ...), or with
    split="test" its test_batch.bin."""
    if split == "test":
        path = os.path.join(data_dir, CIFAR10_TEST)
        if not os.path.isfile(path):
            path = os.path.join(data_dir, CIFAR10_DIR, CIFAR10_TEST)
        if not os.path.isfile(path):
            raise DataError("CIFAR-10 test file %s not found in %s (nor in %s/%s); accuracy mode "
                            "evaluates on it: put the binary version's test_batch.bin there"
                            % (CIFAR10_TEST, data_dir, data_dir, CIFAR10_DIR))
        return _cifar10_records([path])
    folder = data_dir
    if not os.path.isfile(os.path.join(folder, CIFAR10_BATCHES[0])):
        nested = os.path.join(data_dir, CIFAR10_DIR)
        if os.path.isfile(os.path.join(nested, CIFAR10_BATCHES[0])):
            folder = nested
        else:
            raise DataError(
                "CIFAR-10 file %s not found in %s (nor in %s); put the binary version's "
                "batches there (cifar-10-binary.tar.gz from "
                "https://www.cs.toronto.edu/~kriz/cifar.html), write a small one with "
                "`python -m trainers.common.data cifar10 %s`, or run with "
                "--dataset synthetic --like cifar10"
                % (CIFAR10_BATCHES[0], data_dir, nested, data_dir))
    paths = []
    for name in CIFAR10_BATCHES:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            break
        paths.append(path)
    return _cifar10_records(paths)


def _cifar10_records(paths):
    images, labels = [], []
    for path in paths:
        raw = _read_bytes(path)
        if not raw or len(raw) % CIFAR10_RECORD:
            raise DataError(
                "%s is truncated or not a CIFAR-10 binary batch: %d bytes is not a whole "
                "number of %d-byte records" % (path, len(raw), CIFAR10_RECORD))
        records = np.frombuffer(raw, dtype=np.uint8).reshape(-1, CIFAR10_RECORD)
        _check_labels(records[:, 0], 10, path)
        labels.append(records[:, 0])
        images.append(records[:, 1:].reshape(-1, 3, 32, 32))
    return Dataset("cifar10", np.concatenate(images), np.concatenate(labels), 10)


def synthetic(like, n, seed, seq_len=None):
    """`n` random images and labels shaped like dataset `like`, or for a text shape `n` random
    sequences of `seq_len` token ids (default: the shape's) and their next tokens; `seed` is an
    int or a sequence of ints (e.g. (seed, rank), so that ranks draw different batches)."""
    if like not in DATASETS:
        raise Unsupported("synthetic data can be shaped like %s, not %r"
                          % (", ".join(DATASETS), like))
    spec = DATASETS[like]
    rng = np.random.RandomState(seed)
    if like in SYNTHETIC_TEXT:
        return SYNTHETIC_TEXT[like](rng, n, seq_len or spec.shape[0], spec.classes)
    if like in TEXT:
        stream = rng.randint(0, spec.classes, size=(n, (seq_len or spec.shape[0]) + 1))
        return TokenIds("synthetic", stream[:, :-1], stream[:, 1:], spec.classes)  # label: the next token
    images = rng.randint(0, 256, size=(n,) + spec.shape).astype(np.uint8)
    labels = rng.randint(0, spec.classes, size=n)
    return Dataset("synthetic", images, labels, spec.classes)


def generated_note(data_dir):
    """What the GENERATED marker in `data_dir` (or its CIFAR-10 folder) says, or None for files
    that are not this module's generated ones."""
    for folder in (data_dir, os.path.join(data_dir or "", CIFAR10_DIR)):
        path = os.path.join(folder or "", GENERATED)
        if folder and os.path.isfile(path):
            with open(path) as f:
                return f.read().strip() or GENERATED_NOTE
    return None


def _find_mnist(data_dir, name, dataset="mnist"):
    for candidate in (name, name + ".gz"):
        path = os.path.join(data_dir, candidate)
        if os.path.isfile(path):
            return path
    if dataset == "digits":
        raise DataError(
            "digits file %s not found in %s; write the data set there with `orchestrator data "
            "digits` (scikit-learn's digits, no network needed)" % (name, data_dir))
    raise DataError(
        "MNIST file %s (or %s.gz) not found in %s; put the training files from "
        "http://yann.lecun.com/exdb/mnist/ there, write a small set with "
        "`python -m trainers.common.data mnist %s`, or run with "
        "--dataset synthetic --like mnist" % (name, name, data_dir, data_dir))


def _read_bytes(path):
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return f.read()
        with open(path, "rb") as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError("cannot read %s: %s (truncated or corrupt file?)" % (path, exc))


def _parse_idx(raw, path, ndim):
    """An IDX array of unsigned bytes with `ndim` dimensions, checked against its header."""
    header = 4 + 4 * ndim
    magic = bytes(bytearray([0, 0, _IDX_UBYTE, ndim]))
    if raw[:4] != magic:
        raise DataError("%s is not an IDX file of %d-dimensional unsigned bytes: it "
                        "starts %r, not %r" % (path, ndim, raw[:4], magic))
    if len(raw) < header:
        raise DataError("%s is truncated: %d bytes, shorter than its %d-byte header"
                        % (path, len(raw), header))
    dims = struct.unpack(">" + "I" * ndim, raw[4:header])
    expected = header + int(np.prod(dims))
    if len(raw) != expected:
        raise DataError("%s is %s: its header promises %s (%d bytes) but the file has %d"
                        % (path, "truncated" if len(raw) < expected else "corrupt",
                           "x".join(str(d) for d in dims), expected, len(raw)))
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def _check_labels(labels, classes, path):
    if len(labels) and int(labels.max()) >= classes:
        raise DataError("%s is corrupt: label %d is outside 0..%d"
                        % (path, int(labels.max()), classes - 1))


# ---------------------------------------------------------------------------- writers

def write_mnist(data_dir, n=1000, seed=0, gz=False):
    """Write `n` random 28x28 images and labels as MNIST training IDX files; return paths."""
    rng = np.random.RandomState(seed)
    images = rng.randint(0, 256, size=(n, 28, 28)).astype(np.uint8)
    labels = rng.randint(0, 10, size=n).astype(np.uint8)
    paths = write_idx(data_dir, images, labels, "train", gz)
    mark_generated(data_dir, GENERATED_NOTE)
    return paths


def write_mnist_test(data_dir, n=200, seed=1):
    """Write `n` random images and labels as MNIST's test IDX files (t10k-*); return paths."""
    rng = np.random.RandomState(seed)
    paths = write_idx(data_dir, rng.randint(0, 256, size=(n, 28, 28)),
                      rng.randint(0, 10, size=n), "test")
    mark_generated(data_dir, GENERATED_NOTE)
    return paths


def write_cifar10_test(data_dir, n=200, seed=1):
    """Write `n` random records as CIFAR-10's test_batch.bin; return [its path]."""
    rng = np.random.RandomState(seed)
    records = rng.randint(0, 256, size=(n, CIFAR10_RECORD)).astype(np.uint8)
    records[:, 0] = rng.randint(0, 10, size=n)
    _makedirs(data_dir)
    path = os.path.join(data_dir, CIFAR10_TEST)
    with open(path, "wb") as f:
        f.write(records.tobytes())
    mark_generated(data_dir, GENERATED_NOTE)
    return [path]


def write_idx(data_dir, images, labels, split="train", gz=False):
    """Write uint8 images (N x 28 x 28) and labels as one split's MNIST IDX files (train-... or
    t10k-...) in `data_dir`; return their paths."""
    images = np.ascontiguousarray(images, dtype=np.uint8)
    labels = np.ascontiguousarray(labels, dtype=np.uint8)
    _makedirs(data_dir)
    paths = []
    for name, array in zip(MNIST_FILES[split], (images, labels)):
        blob = struct.pack(">BBBB", 0, 0, _IDX_UBYTE, array.ndim)
        blob += struct.pack(">" + "I" * array.ndim, *array.shape) + array.tobytes()
        path = os.path.join(data_dir, name + (".gz" if gz else ""))
        opener = gzip.open if gz else open
        with opener(path, "wb") as f:
            f.write(blob)
        paths.append(path)
    return paths


def write_cifar10(data_dir, n=1000, seed=0, files=1):
    """Write `n` random records as CIFAR-10 binary batches data_batch_1.bin ... (split
    over `files` files, at most 5); return the paths."""
    if not 1 <= files <= len(CIFAR10_BATCHES):
        raise ValueError("CIFAR-10 has 1 to 5 training batch files")
    rng = np.random.RandomState(seed)
    records = rng.randint(0, 256, size=(n, CIFAR10_RECORD)).astype(np.uint8)
    records[:, 0] = rng.randint(0, 10, size=n)
    _makedirs(data_dir)
    paths = []
    for name, part in zip(CIFAR10_BATCHES, np.array_split(records, files)):
        path = os.path.join(data_dir, name)
        with open(path, "wb") as f:
            f.write(part.tobytes())
        paths.append(path)
    with open(os.path.join(data_dir, "batches.meta.txt"), "w") as f:
        f.write("airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n")
    mark_generated(data_dir, GENERATED_NOTE)
    return paths


def _makedirs(path):
    if not os.path.isdir(path):
        os.makedirs(path)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m trainers.common.data",
        description="Write a small random dataset in MNIST IDX or CIFAR-10 binary format.")
    parser.add_argument("dataset", choices=["mnist", "cifar10"])
    parser.add_argument("dir")
    parser.add_argument("--n", type=int, default=1000, help="number of images")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gz", action="store_true", help="gzip the MNIST files")
    args = parser.parse_args(argv)
    if args.dataset == "mnist":
        paths = write_mnist(args.dir, args.n, args.seed, gz=args.gz)
    else:
        paths = write_cifar10(args.dir, args.n, args.seed)
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
