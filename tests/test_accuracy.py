"""Accuracy mode (issue 15): scikit-learn's real digits written by `orchestrator data digits`,
every framework learning LeNet on them to a test top-1 of at least 0.90 within 10 epochs on the
CPU with the one recipe, a learning rate that diverges ending `diverged` with its epoch, and the
metrics reaching results.db through the result file and the collector."""
import json
import os
from pathlib import Path

import pytest

from helpers import orchestrator, rows, user_dir

EPOCHS = 10
TARGET = 0.90
BATCH = 64


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """<data root>/digits as `orchestrator data digits` writes it."""
    root = tmp_path_factory.mktemp("data")
    done = orchestrator(["data", "digits", "--dir", str(root)], user_dir(root))
    assert done.returncode == 0, done.stderr
    assert "1438 training and 359 test images" in done.stdout, done.stdout
    return root / "digits"


def accuracy_argv(data_dir, epochs=EPOCHS, *more):
    return ["--model", "lenet", "--dataset", "digits", "--data-dir", str(data_dir),
            "--batch-size", BATCH, "--threads", 1, "--mode", "accuracy", "--epochs", epochs,
            "--target-accuracy", TARGET] + list(more)


# --- the data set ------------------------------------------------------------------------------

def test_digits_are_a_fixed_stratified_split_in_mnist_files(digits, tmp_path):
    from trainers.common.data import load

    train, test = load("digits", str(digits), "train"), load("digits", str(digits), "test")
    assert (len(train), len(test)) == (1438, 359) and len(train) + len(test) == 1797
    assert train.shape == test.shape == (1, 28, 28) and train.classes == 10
    import numpy as np
    # every digit held out in proportion (about a fifth of each class's ~180 images)
    assert all(35 <= n <= 37 for n in np.bincount(test.labels, minlength=10))
    # real strokes, not noise: the upsampled digits use the whole 0..255 range, and the left
    # edge, which the 8x8 digits leave blank, stays dark, where random images are grey everywhere
    assert train.images.max() == 255 and train.images[:, :, :, :2].mean() < 1 < train.images.mean()
    assert "load_digits" in (digits / "SOURCE").read_text()
    # the same split and bytes every time
    again = orchestrator(["data", "digits", "--dir", str(tmp_path)], user_dir(tmp_path))
    assert again.returncode == 0, again.stderr
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        assert (tmp_path / "digits" / name).read_bytes() == (digits / name).read_bytes(), name


def test_the_schedule_and_the_shuffle_are_the_recipes():
    from trainers.common import recipe

    assert [recipe.learning_rate(e, 10) for e in range(10)] == [0.01] * 7 + [0.01 * 0.1] * 3
    assert recipe.decay_steps(10, 22) == [7 * 22]
    first, second = recipe.epoch_order(100, 0, 0), recipe.epoch_order(100, 0, 1)
    assert sorted(first) == list(range(100)) and list(first) != list(second)
    assert list(first) == list(recipe.epoch_order(100, 0, 0))


# --- every framework learns --------------------------------------------------------------------

def test_lenet_learns_digits_to_90_percent_within_10_epochs(framework, digits):
    proc, events = framework.run(accuracy_argv(digits))
    assert proc.returncode == 0, proc.stderr[-3000:]
    kinds = [e["event"] for e in events]
    assert kinds[:2] == ["run_start", "warmup_end"] and kinds[-1] == "run_end", kinds[:3]
    start = events[0]
    assert start["mode"] == "accuracy" and start["epochs"] == EPOCHS
    assert (start["train_images"], start["test_images"], start["steps_per_epoch"]) == (1438, 359, 1438 // BATCH)
    epochs = [e for e in events if e["event"] == "epoch"]
    assert [e["epoch"] for e in epochs] == list(range(1, EPOCHS + 1))
    assert kinds.count("step") == EPOCHS * (1438 // BATCH)
    # the recipe's schedule, and no top-5 for ten classes
    assert [e["lr"] for e in epochs] == pytest.approx([0.01] * 7 + [0.001] * 3)
    assert all("top5" not in e and e["train_s"] > 0 and e["eval_s"] > 0 for e in epochs)
    top1 = [e["top1"] for e in epochs]
    assert epochs[-1]["train_loss"] < epochs[0]["train_loss"] / 3, [e["train_loss"] for e in epochs]
    assert top1[-1] >= TARGET, "%s: test top-1 by epoch %s" % (framework, top1)
    # the evaluation is outside the timed steps: the wall clock holds both
    assert epochs[-1]["elapsed_s"] >= epochs[-1]["train_s_total"] + sum(e["eval_s"] for e in epochs) * 0.99


def test_a_learning_rate_that_diverges_ends_diverged_with_its_epoch(framework, digits):
    proc, events = framework.run(accuracy_argv(digits, 3, "--learning-rate", "10000"))
    errors = [e for e in events if e["event"] == "error"]
    assert proc.returncode == 5 and len(errors) == 1, (proc.returncode, proc.stderr[-2000:])
    assert errors[0]["class"] == "diverged"
    assert "at epoch 1 of 3" in errors[0]["message"] and "learning rate 10000" in errors[0]["message"]
    assert not [e for e in events if e["event"] == "epoch"]


def test_accuracy_mode_refuses_data_with_nothing_to_learn(framework_run):
    proc, events = framework_run("numpy", ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist",
                                           "--batch-size", 8, "--mode", "accuracy"])
    assert proc.returncode == 3 and events[-1]["class"] == "unsupported"
    assert "test split" in events[-1]["message"]


def test_missing_digits_files_say_how_to_write_them(framework_run, tmp_path):
    proc, events = framework_run("numpy", accuracy_argv(tmp_path, 1))
    assert proc.returncode == 3 and events[-1]["class"] == "unsupported"
    assert "orchestrator data digits" in events[-1]["message"]


def test_accuracy_on_generated_files_says_it_means_nothing(framework_run, tmp_path):
    from orchestrator.job import metrics

    done = orchestrator(["data", "generate", "mnist", "-n", "256"], user_dir(tmp_path))
    assert done.returncode == 0 and "means nothing" in done.stdout, done.stdout + done.stderr
    proc, events = framework_run("numpy", ["--model", "lenet", "--dataset", "mnist", "--data-dir",
                                           str(tmp_path / "data" / "mnist"), "--batch-size", 32, "--threads", 1,
                                           "--mode", "accuracy", "--epochs", 1])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert events[0]["test_images"] == 51 and "means nothing" in events[0]["data_generated"]
    measured = metrics.compute(events)
    assert "top1_final" in measured and "accuracy on generated data" in measured.reason


@pytest.fixture(scope="module")
def imdb(tmp_path_factory):
    """A generated imdb.npz of 16 reviews a split (`orchestrator data generate imdb`)."""
    root = tmp_path_factory.mktemp("text")
    done = orchestrator(["data", "generate", "imdb", "-n", "16", "--dir", str(root)], user_dir(root))
    assert done.returncode == 0, done.stderr
    return root / "imdb"


@pytest.mark.parametrize("name", ["torch", "tensorflow", "jax", "mxnet", "caffe", "cntk"])
def test_lstm_imdb_is_trained_and_scored_in_accuracy_mode(framework_run, imdb, name):
    """A class per review: each framework's predict takes [batch, seq_len] token ids (Caffe's
    time-major, CNTK's one-hot) and its top-1 is over the 16 test reviews."""
    proc, events = framework_run(name, ["--model", "lstm_imdb", "--dataset", "imdb", "--data-dir", str(imdb),
                                        "--seq-len", 4, "--batch-size", 4, "--threads", 1, "--mode", "accuracy",
                                        "--epochs", 1])
    assert proc.returncode == 0, proc.stderr[-2000:]
    epoch = [e for e in events if e["event"] == "epoch"]
    assert len(epoch) == 1 and epoch[0]["test_images"] == 16 and round(epoch[0]["top1"] * 16, 9).is_integer()
    assert "random words" in events[0]["data_generated"]


def test_accuracy_mode_refuses_the_language_models_stream(framework_run, tmp_path):
    proc, events = framework_run("torch", ["--model", "lstm", "--dataset", "ptb", "--data-dir", str(tmp_path),
                                           "--batch-size", 4, "--mode", "accuracy"])
    assert proc.returncode == 3 and events[-1]["class"] == "unsupported"
    assert "perplexity" in events[-1]["message"] and "--dataset imdb" in events[-1]["message"]


# --- into results.db ---------------------------------------------------------------------------

def test_an_accuracy_run_lands_its_metrics_in_results(digits, tmp_path):
    """The job as the launcher hands it over (settings as the cell resolves them; mode, epochs and
    target from the cell's config), its result file collected, `orchestrator results` showing it."""
    from orchestrator.job import run as job
    from orchestrator import setting_registry

    workdir = user_dir(tmp_path)
    # a resolved cell holds every setting, defaults included (setting_registry.filled)
    settings = setting_registry.filled({
        "framework": "torch", "model": "lenet", "dataset": "digits", "like": None, "hardware": "local",
        "gpus": 0, "threads": 1, "batch_size": BATCH, "scaling": "strong", "iterations": 50, "warmup": 10,
        "seed": 0, "precision": "fp32", "mode": "accuracy", "epochs": 4, "target_accuracy": TARGET})
    config = {"framework": {"name": "torch"}, "mode": "accuracy", "epochs": 4, "target_accuracy": TARGET}
    cache = os.environ.get("ORCHESTRATOR_CACHE", str(Path.home() / ".cache" / "orchestrator"))
    run_dir = tmp_path / "runs" / "s1" / "c1" / "0"
    spec = job.JobSpec(sweep_id="s1", cell_id="c1", settings=settings, config=config,
                       runs=[job.RunSpec(uid="s1:c1:0:1", repeat=0, attempt=1, run_dir=str(run_dir))],
                       runtime={"kind": "venv", "cache": cache}, data_dir=str(digits))
    [path] = job.run_cell(spec)
    result = json.loads(Path(path).read_text())
    assert result["state"] == "done", result.get("error")
    assert "--mode" in result["argv"] and "accuracy" in result["argv"]
    metrics = result["metrics"]
    assert metrics["epochs"] == 4 and metrics["top1_final"] >= TARGET and metrics["target_accuracy"] == TARGET
    assert 1 <= metrics["epochs_to_target"] <= 4
    assert 0 < metrics["time_to_target_s"] < metrics["wall_to_target_s"]

    done = orchestrator(["collect"], workdir)
    assert done.returncode == 0, done.stderr
    [(mode, top1, epochs_to, seconds)] = rows(workdir, "select mode, top1, epochs_to_target, time_to_target_s "
                                                       "from results")
    assert mode == "accuracy" and top1 == pytest.approx(metrics["top1_final"])
    assert epochs_to == metrics["epochs_to_target"] and seconds == pytest.approx(metrics["time_to_target_s"])
    shown = orchestrator(["results", "--where", "mode=accuracy"], workdir)
    assert shown.returncode == 0, shown.stderr
    assert "top-1" in shown.stdout and "%.3f" % metrics["top1_final"] in shown.stdout, shown.stdout


def test_the_convergence_sweep_lands_a_row_per_framework(tmp_path):
    workdir = user_dir(tmp_path)
    assert orchestrator(["data", "digits"], workdir).returncode == 0
    done = orchestrator(["-m", "framework=torch,numpy", "model=lenet", "dataset=digits", "mode=accuracy",
                         "epochs=10", "threads=1", "wait=true"], workdir, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = rows(workdir, "select framework, mode, top1, epochs_to_target from results order by framework")
    assert [(f, m) for f, m, _, _ in found] == [("numpy", "accuracy"), ("torch", "accuracy")], found
    assert all(top1 >= TARGET and epochs_to >= 1 for _, _, top1, epochs_to in found), found


def test_the_convergence_preset_is_five_frameworks_on_digits_in_accuracy_mode(tmp_path):
    done = orchestrator(["-m", "+preset=convergence", "dry_run=true"], user_dir(tmp_path))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "5 cells by hardware: 5 to run" in done.stdout, done.stdout
    for name in ("caffe", "tensorflow", "torch", "mxnet", "cntk"):
        assert name in done.stdout
    assert done.stdout.count("accuracy") >= 5 and "digits" in done.stdout


def test_the_batch_accuracy_preset_sweeps_five_batch_sizes_per_framework(tmp_path):
    done = orchestrator(["-m", "+preset=batch-accuracy", "dry_run=true"], user_dir(tmp_path))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "25 cells by hardware: 25 to run" in done.stdout, done.stdout


def test_an_exploded_but_finite_loss_is_diverged_too():
    from trainers.common.accuracy import diverged

    # ten classes: a uniform guess's loss is ln 10 = 2.30; 100 times it is the bound
    assert [diverged(x, 10) for x in (2.3, 15.0, 229.0)] == [False, False, False]
    assert [diverged(x, 10) for x in (231.0, 1.1e15, float("nan"), float("inf"))] == [True] * 4
    assert not diverged(600.0, 1000)  # a thousand classes: the bound is 691
