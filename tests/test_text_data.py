"""The text data sets in their real formats (trainers/common/text_data.py): Penn Treebank's ptb.*.txt
read as the TensorFlow PTB reader reads them, Keras's imdb.npz as load_data(num_words=5000) and
pad_sequences(maxlen) make it, the generators behind `orchestrator data generate ptb imdb`, and a file
that would run code when unpickled refused. Tiny hand-written files: no framework, well under a second."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainers.common import data, text_data
from trainers.common.errors import DataError

REPO = Path(__file__).resolve().parents[1]


def _ptb(folder, train, test=" a b \n"):
    folder.mkdir(exist_ok=True)
    for split, text in (("train", train), ("valid", test), ("test", test)):
        (folder / text_data.PTB_FILES[split]).write_text(text)
    return str(folder)


def test_ptb_ids_follow_the_train_files_counts_and_the_windows_are_the_next_words(tmp_path):
    """Counts: the 4, <eos> 3, cat 2; ties (a, dog, <unk>, 1 each) by the word, as `sorted` orders
    strings ('<' before letters): ids the 0, <eos> 1, cat 2, <unk> 3, a 4, dog 5."""
    folder = _ptb(tmp_path / "ptb", " the cat the \n the dog <unk> \n a cat the \n", " the zebra \n")
    stream, words = text_data.ptb_stream(folder, "train")
    assert words == 6
    assert stream.tolist() == [0, 2, 0, 1, 0, 5, 3, 1, 4, 2, 0, 1]
    ids, labels = text_data.ptb_windows(stream, 4)  # 11 // 4 = 2 windows of 5 tokens, sharing one
    assert ids.tolist() == [[0, 2, 0, 1], [0, 5, 3, 1]]
    assert labels.tolist() == [[2, 0, 1, 0], [5, 3, 1, 4]]
    test = data.load("ptb", folder, "test", seq_len=2)  # zebra is not in the train file: <unk>
    assert test.images.tolist() == [[0, 3]] and test.labels.tolist() == [[3, 1]] and test.classes == 10000
    assert data.load("ptb", folder, seq_len=3).shape == (3,)


def test_bad_ptb_files_are_refused_in_one_line_naming_the_way_out(tmp_path):
    with pytest.raises(DataError, match=r"ptb.train.txt not found in .*orchestrator data generate ptb"):
        data.load("ptb", str(tmp_path), seq_len=4)
    folder = _ptb(tmp_path / "nounk", " a b \n", " a c \n")
    with pytest.raises(DataError, match=r"words the train file lacks \(c\) .* add <unk> to ptb.train.txt"):
        data.load("ptb", folder, "test", seq_len=1)
    with pytest.raises(DataError, match=r"holds no window of seq_len 9"):
        data.load("ptb", folder, seq_len=9)
    big = _ptb(tmp_path / "big", " ".join("w%d" % i for i in range(10000)) + "\n")
    with pytest.raises(DataError, match=r"10001 distinct words \(with <eos>\); Penn Treebank's vocabulary is 10000"):
        data.load("ptb", big, seq_len=4)


def _imdb(path, x_train, y_train, x_test, y_test):
    def ragged(reviews):
        out = np.empty(len(reviews), dtype=object)
        out[:] = [list(r) for r in reviews]
        return out
    np.savez(str(path), x_train=ragged(x_train), y_train=np.array(y_train), x_test=ragged(x_test),
             y_test=np.array(y_test))


def test_imdb_is_read_as_keras_load_data_and_pad_sequences_make_it(tmp_path):
    """index_from 3 and a start id 1, ranks whose id reaches 5,000 out of vocabulary (2), 'pre'
    padding with 0 and 'pre' truncation; each split in Keras's seed-113 order (train's drawn first)."""
    reviews = [[1, 2], [4996, 4997, 10], [5, 6, 7, 8, 9, 10]]
    _imdb(tmp_path / "imdb.npz", reviews, [0, 1, 1], [[7], [8, 9]], [1, 0])
    rng = np.random.RandomState(113)
    train_order, test_order = np.arange(3), np.arange(2)
    rng.shuffle(train_order)
    rng.shuffle(test_order)
    train = data.load("imdb", str(tmp_path), "train", seq_len=5)
    by_review = {0: [0, 0, 1, 4, 5], 1: [0, 1, 4999, 2, 13], 2: [9, 10, 11, 12, 13]}  # 4997 + 3 = 5000: OOV
    assert train.images.tolist() == [by_review[i] for i in train_order]
    assert train.labels.tolist() == [[0, 1, 1][i] for i in train_order] and train.classes == 2
    test = data.load("imdb", str(tmp_path), "test", seq_len=3)
    assert test.images.tolist() == [[[0, 1, 10], [1, 11, 12]][i] for i in test_order]
    assert train.shape == (5,) and data.load("imdb", str(tmp_path)).shape == (500,)


class _Gadget(object):
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_an_imdb_file_that_would_run_code_when_unpickled_is_refused_and_runs_nothing(tmp_path):
    """numpy's allow_pickle would call open() here; the reader's unpickler rebuilds arrays only."""
    marker = tmp_path / "ran"
    hostile = np.empty(1, dtype=object)
    hostile[0] = _Gadget(str(marker))
    np.savez(str(tmp_path / "imdb.npz"), x_train=hostile, y_train=np.array([0]), x_test=hostile, y_test=np.array([0]))
    with pytest.raises(DataError, match=r"imdb.npz as Keras's imdb.npz .*refusing (io|builtins).open: an imdb.npz holds numpy arrays only"):
        data.load("imdb", str(tmp_path))
    assert not marker.exists()
    (tmp_path / "imdb.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match=r"cannot read .*imdb.npz as Keras's imdb.npz"):
        data.load("imdb", str(tmp_path))


def test_bad_reviews_are_refused_naming_the_array_and_the_review(tmp_path):
    _imdb(tmp_path / "imdb.npz", [[1, 2], [3, -4]], [0, 1], [[1]], [0])
    with pytest.raises(DataError, match=r"imdb.npz: x_train's review \d holds a negative word rank \(-4\)"):
        data.load("imdb", str(tmp_path))
    np.savez(str(tmp_path / "imdb.npz"), x_train=np.zeros((2, 2)), y_train=np.zeros(2), x_test=np.zeros(1), y_test=[0])
    with pytest.raises(DataError, match=r"imdb.npz: x_train is ndarray, not a one-dimensional array"):
        data.load("imdb", str(tmp_path))


def test_a_file_numpy_2_wrote_is_read_by_a_trainer_on_numpy_1(tmp_path, framework_env):
    """numpy 2 pickles its arrays as numpy._core, which numpy 1 (mxnet's and CNTK's environments) lacks:
    a generated imdb.npz must read there as the real one (numpy.core) does everywhere."""
    text_data.write_imdb(str(tmp_path), n=3, seed=1)
    python, env = framework_env("mxnet")
    probe = ("import numpy, sys; from trainers.common import data\n"
             "d = data.load('imdb', sys.argv[1], seq_len=4); print(numpy.__version__, d.images.sum(), len(d))")
    out = subprocess.run([python, "-c", probe, str(tmp_path)], cwd=str(REPO), env=dict(env, PYTHONPATH=str(REPO)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    version, total, count = out.stdout.split()
    here = data.load("imdb", str(tmp_path), seq_len=4)
    assert version.startswith("1.") and (int(total), int(count)) == (int(here.images.sum()), 3)


def test_orchestrator_data_generate_writes_both_in_their_formats_marked_generated(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-m", "orchestrator", "data", "generate", "ptb", "imdb", "--dir",
                          str(tmp_path), "-n", "40"], env=env, capture_output=True, text=True, check=True).stdout
    assert "40 generated train sentences" in out and "40 generated reviews" in out
    train = (tmp_path / "ptb" / "ptb.train.txt").read_text().splitlines()
    assert all(line.startswith(" ") and line.endswith(" ") and "<eos>" not in line for line in train)
    stream, words = text_data.ptb_stream(str(tmp_path / "ptb"), "valid")
    assert words == 10000 and {"<unk>", "N"} <= set(text_data.ptb_words(str(tmp_path / "ptb" / "ptb.train.txt")))
    arrays = text_data.imdb_arrays(str(tmp_path / "imdb" / "imdb.npz"))
    assert arrays["x_train"].dtype == object and len(arrays["x_test"]) == len(arrays["y_test"]) == 40
    assert all(isinstance(r, list) and min(r) >= 1 for r in arrays["x_train"])
    for name in ("ptb", "imdb"):
        assert "random words" in data.generated_note(str(tmp_path / name))


class _BadDtype(object):
    def __reduce__(self):  # only numpy's own globals, called with arguments they reject
        return (np.dtype, ("not-a-type",))


def test_a_tampered_or_out_of_range_imdb_file_is_one_data_error_not_a_traceback(tmp_path):
    """numpy's constructors raise TypeError on a tampered pickle, int64 OverflowError on a huge rank
    and ValueError on text labels: each must reach the user as a DataError naming the file."""
    import io
    import pickle
    import zipfile

    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "|O", "fortran_order": False, "shape": (1,)})
    with zipfile.ZipFile(str(tmp_path / "imdb.npz"), "w") as archive:
        archive.writestr("x_train.npy", head.getvalue() + pickle.dumps(_BadDtype(), protocol=2))
        for name, value in (("y_train", [0]), ("x_test", [0]), ("y_test", [0])):
            out = io.BytesIO()
            np.save(out, np.array(value))
            archive.writestr(name + ".npy", out.getvalue())
    with pytest.raises(DataError, match=r"cannot read .*imdb\.npz as Keras's imdb\.npz"):
        data.load("imdb", str(tmp_path))
    _imdb(tmp_path / "imdb.npz", [[2 ** 70], [3]], [0, 1], [[1]], [0])
    with pytest.raises(DataError, match=r"imdb\.npz: x_train's review \d is not a list of word ranks"):
        data.load("imdb", str(tmp_path))
    ragged = np.empty(2, dtype=object)
    ragged[:] = [[1], [2]]
    np.savez(str(tmp_path / "imdb.npz"), x_train=ragged, y_train=np.array(["pos", "neg"]), x_test=ragged[:1],
             y_test=np.array([0]))
    with pytest.raises(DataError, match=r"imdb\.npz: y_train is not an array of 0/1 labels"):
        data.load("imdb", str(tmp_path))
