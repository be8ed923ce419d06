"""The dataset readers read what the writers write, byte for byte, and refuse bad files
with a message that names the file."""
import gzip
import os
import struct

import numpy as np
import pytest

from trainers.common import data
from trainers.common.errors import DataError


def _idx_payload(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_round_trip(tmp_path, gz):
    images_path, labels_path = data.write_mnist(str(tmp_path), n=37, seed=3, gz=gz)
    assert images_path.endswith("train-images-idx3-ubyte" + (".gz" if gz else ""))
    ds = data.read_mnist(str(tmp_path))

    assert len(ds) == 37 and ds.shape == (1, 28, 28) and ds.classes == 10
    assert ds.images.dtype == np.uint8 and ds.labels.dtype == np.int64
    # the bytes after each IDX header are the pixels and labels, in order
    raw_images = np.frombuffer(_idx_payload(images_path)[16:], dtype=np.uint8)
    raw_labels = np.frombuffer(_idx_payload(labels_path)[8:], dtype=np.uint8)
    assert np.array_equal(ds.images.reshape(-1), raw_images)
    assert np.array_equal(ds.labels, raw_labels.astype(np.int64))
    assert set(np.unique(ds.labels)) <= set(range(10)) and len(np.unique(ds.labels)) > 3

    images, labels = ds.batch(np.array([0, 5, 36]))
    assert images.dtype == np.float32 and images.shape == (3, 1, 28, 28)
    assert 0.0 <= images.min() and images.max() <= 1.0
    assert np.allclose(images * 255.0, ds.images[[0, 5, 36]])
    assert labels.tolist() == ds.labels[[0, 5, 36]].tolist()


def test_mnist_header_is_the_published_format(tmp_path):
    images_path, labels_path = data.write_mnist(str(tmp_path), n=5)
    raw = _idx_payload(images_path)
    assert struct.unpack(">IIII", raw[:16]) == (0x00000803, 5, 28, 28)
    assert struct.unpack(">II", _idx_payload(labels_path)[:8]) == (0x00000801, 5)


def test_mnist_same_seed_same_data(tmp_path):
    data.write_mnist(str(tmp_path / "a"), n=10, seed=7)
    data.write_mnist(str(tmp_path / "b"), n=10, seed=7)
    data.write_mnist(str(tmp_path / "c"), n=10, seed=8)
    a, b, c = (data.read_mnist(str(tmp_path / d)) for d in "abc")
    assert np.array_equal(a.images, b.images)
    assert not np.array_equal(a.images, c.images)


def test_cifar10_round_trip(tmp_path):
    paths = data.write_cifar10(str(tmp_path), n=25, seed=1, files=2)
    assert [os.path.basename(p) for p in paths] == ["data_batch_1.bin", "data_batch_2.bin"]
    ds = data.read_cifar10(str(tmp_path))

    assert len(ds) == 25 and ds.shape == (3, 32, 32)
    raw = np.concatenate([np.fromfile(p, dtype=np.uint8) for p in paths]).reshape(25, 3073)
    assert np.array_equal(ds.labels, raw[:, 0].astype(np.int64))
    # record layout: 1024 red, 1024 green, 1024 blue bytes, each row-major 32x32
    assert np.array_equal(ds.images[4, 1, 2, 3], raw[4, 1 + 1024 + 2 * 32 + 3])
    assert np.array_equal(ds.images.reshape(25, -1), raw[:, 1:])


def test_cifar10_found_in_the_archive_folder(tmp_path):
    data.write_cifar10(str(tmp_path / data.CIFAR10_DIR), n=4)
    assert len(data.read_cifar10(str(tmp_path))) == 4


def test_missing_mnist_names_the_file(tmp_path):
    with pytest.raises(DataError) as err:
        data.read_mnist(str(tmp_path))
    assert "train-images-idx3-ubyte" in str(err.value)
    assert "synthetic" in str(err.value)


def test_missing_labels_file_is_named(tmp_path):
    data.write_mnist(str(tmp_path), n=4)
    os.remove(str(tmp_path / data.MNIST_LABELS))
    with pytest.raises(DataError, match="train-labels-idx1-ubyte"):
        data.read_mnist(str(tmp_path))


def test_missing_cifar10_names_the_file(tmp_path):
    with pytest.raises(DataError, match="data_batch_1.bin"):
        data.read_cifar10(str(tmp_path))


@pytest.mark.parametrize("keep,says", [(-100, "header promises 10x28x28"),
                                        (10, "shorter than its 16-byte header")])
def test_truncated_mnist_is_refused(tmp_path, keep, says):
    images_path, _ = data.write_mnist(str(tmp_path), n=10)
    with open(images_path, "rb") as f:
        blob = f.read()
    with open(images_path, "wb") as f:
        f.write(blob[:keep])
    with pytest.raises(DataError) as err:
        data.read_mnist(str(tmp_path))
    assert "truncated" in str(err.value) and images_path in str(err.value)
    assert says in str(err.value)


def test_truncated_gzip_is_refused(tmp_path):
    images_path, _ = data.write_mnist(str(tmp_path), n=50, gz=True)
    with open(images_path, "rb") as f:
        blob = f.read()
    with open(images_path, "wb") as f:
        f.write(blob[: len(blob) // 2])
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz"):
        data.read_mnist(str(tmp_path))


def test_wrong_magic_is_refused(tmp_path):
    images_path, labels_path = data.write_mnist(str(tmp_path), n=3)
    os.replace(labels_path, images_path)  # a labels file where the images belong
    with open(labels_path, "wb") as f:
        f.write(b"")
    with pytest.raises(DataError, match="not an IDX file"):
        data.read_mnist(str(tmp_path))


def test_label_count_mismatch_is_refused(tmp_path):
    data.write_mnist(str(tmp_path / "a"), n=3)
    data.write_mnist(str(tmp_path / "b"), n=4)
    os.replace(str(tmp_path / "b" / data.MNIST_LABELS), str(tmp_path / "a" / data.MNIST_LABELS))
    with pytest.raises(DataError, match="3 images but .* 4 labels"):
        data.read_mnist(str(tmp_path / "a"))


def test_truncated_cifar10_is_refused(tmp_path):
    (path,) = data.write_cifar10(str(tmp_path), n=3)
    with open(path, "rb") as f:
        blob = f.read()
    with open(path, "wb") as f:
        f.write(blob[:-1])
    with pytest.raises(DataError, match="data_batch_1.bin is truncated"):
        data.read_cifar10(str(tmp_path))


def test_cifar10_label_out_of_range_is_refused(tmp_path):
    (path,) = data.write_cifar10(str(tmp_path), n=3)
    blob = bytearray(open(path, "rb").read())
    blob[3073] = 11  # second record's label
    with open(path, "wb") as f:
        f.write(bytes(blob))
    with pytest.raises(DataError, match="label 11"):
        data.read_cifar10(str(tmp_path))


@pytest.mark.parametrize("like,shape,classes", [
    ("mnist", (1, 28, 28), 10), ("cifar10", (3, 32, 32), 10),
    ("imagenet", (3, 224, 224), 1000)])
def test_synthetic_has_the_shape_of_its_dataset(like, shape, classes):
    ds = data.synthetic(like, 6, seed=0)
    assert ds.shape == shape and ds.classes == classes and len(ds) == 6
    assert ds.labels.min() >= 0 and ds.labels.max() < classes
    again = data.synthetic(like, 6, seed=0)
    other_rank = data.synthetic(like, 6, seed=[0, 1])
    assert np.array_equal(ds.images, again.images)
    assert not np.array_equal(ds.images, other_rank.images)


def test_a_missing_imagenet_tree_names_the_path_and_the_way_out(tmp_path):
    with pytest.raises(DataError) as err:
        data.load("imagenet", str(tmp_path))
    assert str(tmp_path / "train") in str(err.value)
    assert "orchestrator data generate imagenet" in str(err.value)
    assert "--dataset synthetic --like imagenet" in str(err.value)


def test_writer_command_line(tmp_path):
    assert data.main(["cifar10", str(tmp_path), "--n", "7"]) == 0
    assert len(data.read_cifar10(str(tmp_path))) == 7
