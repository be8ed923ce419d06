"""CIFAR-100's pickles and SVHN's MAT files (trainers/common/cifar100_svhn.py): files written here
in the published layouts, by this test and not by the project's writers, are read back exactly;
the generated ones are marked; bad files are refused in one line; a real run trains on each."""
import os
import pickle
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import scipy.io

from trainers.common import cifar100_svhn, data, inputs, matfile
from trainers.common.errors import DataError


def _cifar100_split(n, first_label):
    """A CIFAR-100 split as the archive has it: b"data" rows of R, G, B planes, fine labels."""
    pixels = (np.arange(n * 3072) % 251).astype(np.uint8).reshape(n, 3072)
    fine = [(first_label + 37 * i) % 100 for i in range(n)]
    return pixels, fine, {b"batch_label": b"training batch 1 of 1", b"data": pixels, b"fine_labels": fine,
                          b"coarse_labels": [f // 5 for f in fine], b"filenames": [b"x_%d.png" % i for i in range(n)]}


def test_cifar100_in_the_archive_layout_is_read_exactly(tmp_path):
    folder = tmp_path / "cifar-100-python"  # as cifar-100-python.tar.gz unpacks
    folder.mkdir()
    splits = {"train": _cifar100_split(5, 99), "test": _cifar100_split(3, 0)}
    for split, (_, _, content) in splits.items():
        (folder / split).write_bytes(pickle.dumps(content, protocol=2))
    (folder / "meta").write_bytes(pickle.dumps({b"fine_label_names": [b"apple"] * 100}, protocol=2))
    for split, (pixels, fine, _) in splits.items():
        ds = data.load("cifar100", str(tmp_path), split)
        assert ds.classes == 100 and ds.labels.tolist() == fine  # the fine labels
        assert ds.images.shape == (len(fine), 3, 32, 32)
        # pixel (row 5, column 7) of the blue plane of image 1: byte 2 * 1024 + 5 * 32 + 7 of its row
        assert ds.images[1, 2, 5, 7] == pixels[1, 2 * 1024 + 5 * 32 + 7]
        assert np.array_equal(ds.images.reshape(len(fine), -1), pixels)
    assert data.generated_note(str(tmp_path)) is None


def _element(kind, payload):
    return struct.pack("<II", kind, len(payload)) + payload + b"\0" * (-len(payload) % 8)


def _mat_array(name, cls, stored, values):
    """A MATLAB miMATRIX element as MATLAB writes one: its name a small element, its values in
    the `stored` type (numpy code) whatever the class (a double array of small ints as bytes)."""
    kinds = {"u1": 2, "f8": 9}
    name_small = struct.pack("<HH", 1, len(name)) + name.encode().ljust(4, b"\0")
    body = (_element(6, struct.pack("<II", cls, 0)) + _element(5, struct.pack("<%di" % values.ndim, *values.shape))
            + name_small + _element(kinds[stored], values.astype(stored).tobytes(order="F")))
    return _element(14, body)


def _svhn_mat(path, images, digits):
    """SVHN's file as MATLAB saved it (v5, each array compressed): X uint8 (class 9), y double
    (class 6) stored as bytes."""
    header = b"MATLAB 5.0 MAT-file, Platform: GLNXA64, Created on: Tue Dec  6 2011".ljust(116, b" ")
    out = header + b"\0" * 8 + struct.pack("<H", 0x0100) + b"IM"
    for element in (_mat_array("X", 9, "u1", images), _mat_array("y", 6, "u1", digits)):
        packed = zlib.compress(element)
        out += struct.pack("<II", 15, len(packed)) + packed
    path.write_bytes(out)


def test_svhn_in_matlabs_layout_is_read_exactly_by_scipy_and_by_matfile(tmp_path):
    i, j, c, n = np.meshgrid(np.arange(32), np.arange(32), np.arange(3), np.arange(4), indexing="ij")
    images = ((i + 2 * j + 64 * c + 7 * n) % 256).astype(np.uint8)  # X[row, column, channel, image]
    digits = np.array([[10], [1], [9], [10]], dtype=np.float64)
    _svhn_mat(tmp_path / "train_32x32.mat", images, digits)
    ds = data.load("svhn", str(tmp_path))
    assert ds.classes == 10 and ds.labels.tolist() == [0, 1, 9, 0]  # 10 is the digit 0
    assert ds.images.shape == (4, 3, 32, 32)
    assert ds.images[3, 2, 5, 7] == (5 + 2 * 7 + 64 * 2 + 7 * 3) % 256
    ours, scipys = matfile.loadmat(str(tmp_path / "train_32x32.mat")), scipy.io.loadmat(str(tmp_path / "train_32x32.mat"))
    for name in ("X", "y"):  # the environments without scipy read the same arrays
        assert ours[name].dtype == scipys[name].dtype and np.array_equal(ours[name], scipys[name])


@pytest.mark.parametrize("compressed", [True, False])
def test_matfile_reads_what_scipy_writes(tmp_path, compressed):
    rng = np.random.RandomState(3)
    arrays = {"X": rng.randint(0, 256, size=(32, 32, 3, 5)).astype(np.uint8), "y": rng.rand(5, 1),
              "n": np.arange(6, dtype=np.int32).reshape(2, 3)}
    scipy.io.savemat(str(tmp_path / "a.mat"), dict(arrays, text="skipped"), do_compression=compressed)
    read = matfile.loadmat(str(tmp_path / "a.mat"))
    assert sorted(read) == ["X", "n", "y"]
    assert all(read[k].dtype == v.dtype and np.array_equal(read[k], v) for k, v in arrays.items())


def test_generate_writes_both_in_their_layouts_marked_generated(tmp_path):
    from orchestrator.commands import data as command

    assert command.main(["generate", "cifar100", "svhn", "--dir", str(tmp_path), "-n", "8"]) == 0
    assert sorted(os.listdir(tmp_path / "cifar100")) == ["GENERATED", "meta", "test", "train"]
    assert sorted(os.listdir(tmp_path / "svhn")) == ["GENERATED", "test_32x32.mat", "train_32x32.mat"]
    for name in ("cifar100", "svhn"):
        folder = str(tmp_path / name)
        train, test = data.load(name, folder), data.load(name, folder, "test")
        assert (len(train), len(test)) == (8, 1) and train.classes == inputs.DATASETS[name].classes
        assert "means nothing" in data.generated_note(folder)
    assert scipy.io.loadmat(str(tmp_path / "svhn" / "train_32x32.mat"))["X"].shape == (32, 32, 3, 8)


class _Planted(object):
    def __reduce__(self):
        return os.mkdir, (self.path,)


def test_a_pickle_that_would_run_code_is_refused_unrun(tmp_path):
    planted = _Planted()
    planted.path = str(tmp_path / "ran")
    (tmp_path / "train").write_bytes(pickle.dumps({b"data": planted}, protocol=2))
    with pytest.raises(DataError, match=r"train: posix\.mkdir is in the pickle.*not reading it"):
        data.load("cifar100", str(tmp_path))
    assert not os.path.exists(planted.path)


def _pickled(folder, content):
    (Path(folder) / "train").write_bytes(pickle.dumps(content, protocol=2))


@pytest.mark.parametrize("name, write, says", [
    ("cifar100", lambda d: _pickled(d, {b"data": np.zeros((2, 3072), np.uint8), b"fine_labels": [0, 100]}),
     r"label is outside 0\.\.99"),
    ("cifar100", lambda d: _pickled(d, {b"data": np.zeros((2, 3072), np.uint8)}),
     r"has no b'fine_labels': not a CIFAR-100 file"),
    ("cifar100", lambda d: _pickled(d, {b"data": np.zeros((2, 3072), np.uint8), b"fine_labels": {b"a": 1}}),
     r"b'fine_labels' is not a list of whole numbers"),
    ("cifar100", lambda d: (Path(d) / "train").write_bytes(b"\x80\x02}q"), r"cannot read .* as a CIFAR-100 pickle"),
    ("svhn", lambda d: scipy.io.savemat(d + "/train_32x32.mat", {"X": np.zeros((32, 32, 3, 2), np.uint8),
                                                                 "y": np.array([[0.0], [3.0]])}),
     r"label is outside 1\.\.10"),
    ("svhn", lambda d: scipy.io.savemat(d + "/train_32x32.mat", {"X": np.zeros((28, 28, 1, 2), np.uint8),
                                                                 "y": np.ones((2, 1))}),
     r"X is 28x28x1x2 uint8, not SVHN's 32x32x3xN uint8"),
    ("svhn", lambda d: None, r"svhn file train_32x32\.mat not found in .*orchestrator data generate svhn"),
    ("cifar100", lambda d: None, r"cifar100 file train nor cifar-100-python/train not found .*--like cifar100"),
])
def test_bad_files_are_refused_in_one_line_with_the_way_out(tmp_path, name, write, says):
    write(str(tmp_path))
    with pytest.raises(DataError, match=says) as refused:
        data.load(name, str(tmp_path))
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("compressed", [True, False])
def test_a_truncated_or_garbled_mat_file_is_refused_by_both_readers(tmp_path, compressed):
    pixels = np.random.RandomState(0).randint(0, 256, size=(32, 32, 3, 2)).astype(np.uint8)
    scipy.io.savemat(str(tmp_path / "a.mat"), {"X": pixels}, do_compression=compressed)
    whole = (tmp_path / "a.mat").read_bytes()
    (tmp_path / "train_32x32.mat").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(matfile.MatError, match=r"train_32x32\.mat (is truncated|.*corrupt)"):
        matfile.loadmat(str(tmp_path / "train_32x32.mat"))
    with pytest.raises(DataError, match=r"cannot read .*train_32x32\.mat as SVHN's MAT file"):
        data.load("svhn", str(tmp_path))  # scipy.io's reader, here
    garbled = whole[:132] + struct.pack("<I", 0x7FFFFFF0) + whole[136:]  # the first element's byte count
    (tmp_path / "b.mat").write_bytes(garbled)
    with pytest.raises(matfile.MatError, match=r"b\.mat is truncated"):
        matfile.loadmat(str(tmp_path / "b.mat"))


def test_a_mat_v73_file_is_refused_with_the_way_out(tmp_path):
    (tmp_path / "a.mat").write_bytes(b"MATLAB 7.3 MAT-file".ljust(512, b" ") + b"\x89HDF\r\n\x1a\n")
    with pytest.raises(matfile.MatError, match=r"MAT v7\.3 \(HDF5\) file; save it as v5"):
        matfile.loadmat(str(tmp_path / "a.mat"))


def test_the_networks_take_them_as_they_take_cifar10():
    assert inputs.input_shape("resnet56", "cifar100") == inputs.input_shape("googlenet_cifar", "svhn") == (3, 32, 32)
    assert inputs.input_shape("lenet", "svhn") == (3, 32, 32)
    assert [inputs.ran_at(m, d) for m, d in (("alexnet", "cifar100"), ("vgg16", "svhn"), ("alexnet_r", "cifar100"),
                                             ("lenet", "svhn"))] == ["ran at 224x224"] * 2 + [None] * 2
    assert set(cifar100_svhn.READERS) == set(cifar100_svhn.WRITERS) == {"cifar100", "svhn"}


@pytest.fixture(scope="module")
def image_sets(tmp_path_factory):
    """Generated CIFAR-100 and SVHN folders, 8 training images each."""
    root = tmp_path_factory.mktemp("imagesets")
    for name, write in cifar100_svhn.WRITERS.items():
        write(str(root / name), n=8, seed=5)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("name", ["torch", "cntk"])  # cntk: a Python 3.6 environment, scipy 1.5's loadmat
def test_a_run_trains_on_each(framework_run, run_checks, image_sets, name):
    """resnet56 on CIFAR-100 (a 100-class head: 853,018 at 10 classes + 64 x 90 + 90) and LeNet on
    SVHN (431,080 at MNIST's 1x28x28; at 3x32x32 its first conv has 2 x 20 x 25 more weights and
    its ip1 sees 50 x 5 x 5, not 4 x 4: 431,080 + 1,000 + 500 x 50 x 9), 2 steps of batch 4."""
    for model, dataset, params in (("resnet56", "cifar100", 853018 + 64 * 90 + 90),
                                   ("lenet", "svhn", 431080 + 1000 + 500 * 50 * 9)):
        proc, events = framework_run(name, [
            "--model", model, "--dataset", dataset, "--data-dir", image_sets / dataset, "--batch-size", 4,
            "--iterations", 2, "--warmup", 1, "--threads", 1])
        assert proc.returncode == 0, proc.stderr[-3000:]
        start = run_checks(events, 1, 2, 4)
        assert (start["dataset"], start["input_shape"], start["params"]) == (dataset, [3, 32, 32], params)
        assert start["classes"] == inputs.DATASETS[dataset].classes
