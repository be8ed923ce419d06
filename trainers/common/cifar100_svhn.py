"""CIFAR-100 and SVHN in the formats they are published in: Elshawi et al.'s other CNN cases.

CIFAR-100 ("python version", cifar-100-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html):
three Python pickles, `train` (50,000 images), `test` (10,000) and `meta`, in <data>/cifar100 or
its `cifar-100-python/` folder as the archive unpacks. Each of train and test is a dict with
b"data" (N x 3072 uint8: a 1024-byte red plane, then green, then blue, each row-major 32x32),
b"fine_labels" and b"coarse_labels" (N ints), b"filenames" and b"batch_label"; meta holds
b"fine_label_names" (100) and b"coarse_label_names" (20). The runs use the FINE labels, 100
classes, as Elshawi et al.'s CIFAR-100 case does. The files are Python 2 pickles: they are read
with encoding="bytes" by an unpickler that builds only what they hold (dicts, lists, numbers,
strings and numpy arrays) and refuses any other global, so a file in the data folder cannot run
code in a trainer.

SVHN (the "cropped digits", http://ufldl.stanford.edu/housenumbers/): `train_32x32.mat` (73,257
images) and `test_32x32.mat` (26,032), MAT v5 files with X (32 x 32 x 3 x N uint8) and y (N x 1,
the digits 1..9, and 10 for the digit 0, which is read as 0: ten classes 0..9). Read with
scipy.io.loadmat where the environment has scipy, else with trainers/common/matfile.py.

Both are 3x32x32 images with CIFAR-10's shape: the CIFAR networks take them at their size (with
a 100- or 10-class head), LeNet at its native size, and the ImageNet networks upsampled to
224x224 (trainers/common/inputs.py). The writers (`orchestrator data generate cifar100 svhn`)
write random images and labels in the same files (SVHN's through scipy.io.savemat, so in the
orchestrator's environment), with the GENERATED marker beside them: throughput only.
"""
import os
import pickle
import zlib

import numpy as np

from trainers.common import matfile
from trainers.common.array_pickle import ArraysOnly
from trainers.common.errors import DataError
from trainers.common.generated import GENERATED_NOTE, mark_generated

CIFAR100_DIR = "cifar-100-python"
CIFAR100_FILES = {"train": "train", "test": "test"}
CIFAR100_META = "meta"
CIFAR100_CLASSES, CIFAR100_COARSE = 100, 20
SVHN_FILES = {"train": "train_32x32.mat", "test": "test_32x32.mat"}
#: the label SVHN's files give the digit 0
SVHN_ZERO = 10
_PIXELS = 3 * 32 * 32
_WAY_OUT = ("put the real files there (%s), write generated ones with `orchestrator data generate %s "
            "--dir <data>` (throughput only), or run with --dataset synthetic --like %s")


def _latin1(text, encoding="latin1"):
    """_codecs.encode as Python 3 pickles bytes at protocol 2 (latin-1 only)."""
    if encoding != "latin1":
        raise DataError("a pickled string is in %r, not latin1: not a CIFAR-100 file" % (encoding,))
    return text.encode("latin1")


#: What CIFAR's pickles may name besides numpy's arrays: bytes as Python 3 pickles them (protocol 2)
_CIFAR_GLOBALS = {("_codecs", "encode"): _latin1}
_CIFAR_REFUSAL = "%s is in the pickle, and CIFAR-100's files hold only arrays, lists and strings: not reading it"


def _unpickle(path):
    try:
        with open(path, "rb") as f:
            content = ArraysOnly(f, _CIFAR_REFUSAL, _CIFAR_GLOBALS, encoding="bytes").load()
    except DataError as exc:
        raise DataError("%s: %s" % (path, exc))
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError, KeyError,
            IndexError) as exc:
        raise DataError("cannot read %s as a CIFAR-100 pickle: %s (truncated or corrupt file?)" % (path, exc))
    if not isinstance(content, dict):
        raise DataError("%s holds a %s, not CIFAR-100's dict" % (path, type(content).__name__))
    return content


def read_cifar100(data_dir, split="train"):
    """(uint8 NCHW images, fine labels, 100) of CIFAR-100's `train` or `test` pickle."""
    path = _find(data_dir, (CIFAR100_FILES[split], os.path.join(CIFAR100_DIR, CIFAR100_FILES[split])),
                 "cifar100", "cifar-100-python.tar.gz, unpacked")
    content = _unpickle(path)
    missing = [key for key in (b"data", b"fine_labels") if key not in content]
    if missing:
        raise DataError("%s has no %s: not a CIFAR-100 file" % (path, " or ".join(map(repr, missing))))
    try:
        data = np.asarray(content[b"data"])
        labels = np.asarray(content[b"fine_labels"], dtype=np.int64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise DataError("%s: b'fine_labels' is not a list of whole numbers (%s): not a CIFAR-100 file" % (path, exc))
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != _PIXELS:
        raise DataError("%s holds %s %s data, not CIFAR-100's N x %d uint8"
                        % (path, "x".join(map(str, data.shape)), data.dtype, _PIXELS))
    _check(labels, len(data), 0, CIFAR100_CLASSES - 1, path)
    return data.reshape(-1, 3, 32, 32), labels, CIFAR100_CLASSES


def read_svhn(data_dir, split="train"):
    """(uint8 NCHW images, labels 0..9, 10) of SVHN's train_32x32.mat or test_32x32.mat."""
    path = _find(data_dir, (SVHN_FILES[split],), "svhn", "the cropped digits' .mat files")
    try:
        arrays = _loadmat(path)
    except (ValueError, TypeError, KeyError, IndexError, NotImplementedError, OSError, zlib.error) as exc:
        # MatError is a ValueError; scipy.io raises these on a file it cannot parse
        raise DataError("cannot read %s as SVHN's MAT file: %s" % (path, exc))
    if "X" not in arrays or "y" not in arrays:
        raise DataError("%s has no X and y arrays: not an SVHN file" % path)
    images, digits = arrays["X"], arrays["y"]
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[:3] != (32, 32, 3):
        raise DataError("%s: X is %s %s, not SVHN's 32x32x3xN uint8"
                        % (path, "x".join(map(str, images.shape)), images.dtype))
    labels = np.asarray(digits).reshape(-1)
    if labels.size and not np.array_equal(labels, np.round(labels)):
        raise DataError("%s: y holds a label that is not a whole number" % path)
    labels = labels.astype(np.int64)
    _check(labels, images.shape[3], 1, SVHN_ZERO, path)
    labels[labels == SVHN_ZERO] = 0
    # X[row, column, channel, image] -> [image, channel, row, column]
    return np.ascontiguousarray(images.transpose(3, 2, 0, 1)), labels, 10


def _loadmat(path):
    """scipy.io.loadmat's arrays where scipy is installed, else matfile's (the same arrays)."""
    try:
        from scipy.io import loadmat  # lazy: scipy only to read SVHN, where the environment has it
    except ImportError:
        return matfile.loadmat(path)
    return loadmat(path)


def _find(data_dir, names, dataset, what):
    for name in names:
        path = os.path.join(data_dir, name)
        if os.path.isfile(path):
            return path
    raise DataError("%s file %s not found in %s; %s" % (
        dataset, " nor ".join(names), data_dir, _WAY_OUT % (what, dataset, dataset)))


def _check(labels, count, low, high, path):
    if len(labels) != count:
        raise DataError("%s holds %d images but %d labels" % (path, count, len(labels)))
    if len(labels) and (labels.min() < low or labels.max() > high):
        raise DataError("%s is corrupt: a label is outside %d..%d (%d..%d found)"
                        % (path, low, high, labels.min(), labels.max()))


# ---------------------------------------------------------------------------- writers

def write_cifar100(data_dir, n=1000, seed=0, split="train"):
    """Write `n` random images and labels as CIFAR-100's `train` (or `test`) pickle, and its
    `meta`, in `data_dir`; return [the split's path]."""
    rng = np.random.RandomState(seed)
    fine = rng.randint(0, CIFAR100_CLASSES, size=n)
    content = {b"batch_label": ("%s batch 1 of 1 (generated)" % split).encode(),
               b"data": rng.randint(0, 256, size=(n, _PIXELS)).astype(np.uint8),
               b"fine_labels": fine.tolist(),
               b"coarse_labels": (fine * CIFAR100_COARSE // CIFAR100_CLASSES).tolist(),
               b"filenames": [("generated_%05d.png" % i).encode() for i in range(n)]}
    meta = {b"fine_label_names": [("fine_%02d" % i).encode() for i in range(CIFAR100_CLASSES)],
            b"coarse_label_names": [("coarse_%02d" % i).encode() for i in range(CIFAR100_COARSE)]}
    if not os.path.isdir(data_dir):
        os.makedirs(data_dir)
    path = os.path.join(data_dir, CIFAR100_FILES[split])
    for target, value in ((path, content), (os.path.join(data_dir, CIFAR100_META), meta)):
        with open(target, "wb") as f:
            pickle.dump(value, f, protocol=4)  # Python 3.4 and later read it; protocol 2 doubles bytes
    mark_generated(data_dir, GENERATED_NOTE)
    return [path]


def write_svhn(data_dir, n=1000, seed=0, split="train"):
    """Write `n` random images and labels as SVHN's train_32x32.mat (or test_32x32.mat), with
    scipy.io.savemat, compressed as the published files are; return [its path]."""
    from scipy.io import savemat  # lazy: scipy only to write SVHN, in the orchestrator's environment

    rng = np.random.RandomState(seed)
    images = rng.randint(0, 256, size=(32, 32, 3, n)).astype(np.uint8)
    labels = rng.randint(1, SVHN_ZERO + 1, size=(n, 1)).astype(np.float64)  # 10: the digit 0
    if not os.path.isdir(data_dir):
        os.makedirs(data_dir)
    path = os.path.join(data_dir, SVHN_FILES[split])
    savemat(path, {"X": images, "y": labels}, do_compression=True)
    mark_generated(data_dir, GENERATED_NOTE)
    return [path]


#: dataset -> its reader (data.load hands these datasets on to it) and its writer
READERS = {"cifar100": read_cifar100, "svhn": read_svhn}
WRITERS = {"cifar100": write_cifar100, "svhn": write_svhn}
