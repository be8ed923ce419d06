"""trainers.common on its own: batch arithmetic, input sizing, the pool, events, error
classes, argument checks, declarations, and the whole run loop and multi-process launcher
driven by the numpy trainer (trainers/numpy, the reference framework) in this interpreter.
What every framework must do is tests/test_conformance.py's."""
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from trainers.common import data, errors, inputs, launch, pool, scaling, support
from trainers.common.events import Events
from trainers.common.protocol import build_parser, resolve

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------ batch arithmetic

@pytest.mark.parametrize("batch,mode,gpus,expected", [
    (64, "strong", 0, (64, 64, 1)),
    (64, "weak", 0, (64, 64, 1)),
    (64, "strong", 1, (64, 64, 1)),
    (64, "strong", 4, (64, 16, 4)),
    (64, "weak", 4, (256, 64, 4)),
    (3, "weak", 2, (6, 3, 2)),
])
def test_split_batch(batch, mode, gpus, expected):
    assert scaling.split_batch(batch, mode, gpus) == expected


@pytest.mark.parametrize("batch,mode,gpus,exc", [
    (0, "strong", 0, errors.InvalidArgument),
    (-4, "weak", 1, errors.InvalidArgument),
    (6, "strong", 4, errors.Unsupported),
    (2, "strong", 4, errors.Unsupported),
    (8, "strong", -1, errors.InvalidArgument),
])
def test_split_batch_refuses(batch, mode, gpus, exc):
    with pytest.raises(exc):
        scaling.split_batch(batch, mode, gpus)


# ------------------------------------------------------------------ inputs

def test_input_shapes():
    assert inputs.input_shape("lenet", "mnist") == (1, 28, 28)
    assert inputs.input_shape("lenet", "cifar10") == (3, 32, 32)
    assert inputs.input_shape("resnet50", "mnist") == (1, 224, 224)
    assert inputs.input_shape("vgg16", "cifar10") == (3, 224, 224)
    assert inputs.input_shape("googlenet", "imagenet") == (3, 224, 224)
    assert inputs.input_shape("fcn_r", "mnist") == (1, 28, 28)  # flattened by the network itself
    assert inputs.input_shape("fcn_s", "dlbench_fcn") == (1, 1, 26752)
    assert inputs.input_shape("resnet56", "cifar10") == (3, 32, 32)  # CIFAR-10's network, at its size
    assert inputs.input_shape("alexnet_r", "cifar10") == (3, 32, 32)
    # what the dry run, `results` and the report say beside a cell whose network saw another size
    assert [inputs.ran_at(m, like) for m, like in (("alexnet", "cifar10"), ("vgg16", "mnist"), ("alexnet", "imagenet"),
                                                    ("alexnet_r", "cifar10"), ("lenet", "cifar10"),
                                                    ("alexnet_r", "mnist"))] == ["ran at 224x224"] * 2 + [None] * 4
    assert inputs.input_shape("vgg16_cifar", "cifar10") == inputs.input_shape("googlenet_cifar", "cifar10") == (3, 32, 32)
    assert inputs.input_shape("lstm", "ptb") == (32,)  # token ids, seq_len of them
    assert set(inputs.MODELS) == {"lenet", "alexnet", "resnet50", "googlenet", "vgg16", "fcn_s", "fcn_r",
                                  "resnet56", "alexnet_r", "vgg16_cifar", "googlenet_cifar", "lstm", "lstm_imdb", "lstm_ptb", "gpt"}


def test_resize_nearest_repeats_pixels_at_integer_factors():
    images = np.arange(2 * 3 * 4 * 4, dtype=np.uint8).reshape(2, 3, 4, 4)
    out = inputs.resize_nearest(images, 28, 28)
    assert out.shape == (2, 3, 28, 28) and out.dtype == np.uint8
    assert np.array_equal(out, images.repeat(7, axis=2).repeat(7, axis=3))


def test_resize_nearest_other_sizes_pick_covering_pixel():
    images = np.arange(5 * 5, dtype=np.float32).reshape(1, 1, 5, 5)
    out = inputs.resize_nearest(images, 7, 3)
    assert out.shape == (1, 1, 7, 3)
    assert out[0, 0, 6, 2] == images[0, 0, 4, 3]  # (6*5)//7 = 4, (2*5)//3 = 3
    assert out[0, 0, 0, 0] == images[0, 0, 0, 0]


# ------------------------------------------------------------------ pool

def test_pool_batches_bounds():
    assert pool.pool_batches(64, (1, 28, 28), steps=100) == 8
    assert pool.pool_batches(64, (1, 28, 28), steps=3) == 3
    # 256 ImageNet images are 154 MB as float32: three fit in 512 MiB
    assert pool.pool_batches(256, (3, 224, 224), steps=100) == 3
    assert pool.pool_batches(4096, (3, 224, 224), steps=100) == 1


def test_ranks_get_disjoint_slices():
    a = pool.batch_indices(0, 4, rank=0, world_size=2, n=100)
    b = pool.batch_indices(0, 4, rank=1, world_size=2, n=100)
    c = pool.batch_indices(1, 4, rank=0, world_size=2, n=100)
    assert a.tolist() == [0, 1, 2, 3] and b.tolist() == [4, 5, 6, 7]
    assert c.tolist() == [8, 9, 10, 11]
    assert pool.batch_indices(3, 4, 0, 1, n=10).tolist() == [2, 3, 4, 5]  # wraps


def test_build_pool_resizes_and_converts():
    ds = data.synthetic("mnist", 10, seed=0)
    seen = []

    def to_batch(images, labels):
        seen.append((images.shape, images.dtype, labels.dtype))
        return ("converted", images, labels)

    batches = pool.build_pool(ds, 3, 4, (1, 224, 224), to_batch)
    assert len(batches) == 3 and batches[0][0] == "converted"
    assert seen[0] == ((4, 1, 224, 224), np.float32, np.int64)
    # batch 2 covers indices 8, 9, 0, 1 of a 10-image set, upsampled 8x
    assert np.allclose(batches[2][1][:, :, ::8, ::8] * 255, ds.images[[8, 9, 0, 1]])
    assert batches[2][2].tolist() == ds.labels[[8, 9, 0, 1]].tolist()


# ------------------------------------------------------------------ events, errors

def test_events_are_strict_json_lines():
    stream = io.StringIO()
    events = Events(stream)
    events.emit("step", step=np.int64(3), dt=np.float32(0.5), loss=float("nan"))
    events.emit("error", {"class": "crash", "message": "x"})
    lines = stream.getvalue().splitlines()
    first, second = json.loads(lines[0]), json.loads(lines[1])
    assert first["event"] == "step" and first["step"] == 3 and first["dt"] == 0.5
    assert first["loss"] == "nan" and isinstance(first["t"], float)
    assert second["class"] == "crash"


class _OomTrainer(object):
    def is_out_of_memory(self, exc):
        return "device ran dry" in str(exc)


def test_classify():
    assert errors.classify(errors.Unsupported("no fp16"))[:2] == ("unsupported", "no fp16")
    assert errors.classify(errors.DataError("gone"))[0] == "unsupported"
    assert errors.classify(errors.Diverged("nan"))[0] == "diverged"
    assert errors.classify(MemoryError())[0] == "out_of_memory"
    assert errors.classify(RuntimeError("device ran dry"), _OomTrainer())[0] == "out_of_memory"
    cls, message, tb = errors.classify(RuntimeError("device ran dry"))
    assert cls == "crash" and "RuntimeError" in message
    try:
        {}["missing"]
    except KeyError as exc:
        cls, _, tb = errors.classify(exc)
    assert cls == "crash" and "Traceback" in tb and "KeyError" in tb


# ------------------------------------------------------------------ argument checks

def _resolve(*argv, **env):
    return resolve(build_parser().parse_args(list(argv)), env)


def test_resolve_weak_scaling_and_shapes():
    cfg = _resolve("--model", "resnet50", "--dataset", "synthetic", "--like", "cifar10",
                   "--batch-size", "8", "--scaling", "weak", "--gpus", "2", "--threads", "3")
    assert (cfg.global_batch, cfg.per_device_batch, cfg.devices) == (16, 8, 2)
    assert cfg.input_shape == (3, 224, 224) and cfg.classes == 10
    assert (cfg.rank, cfg.world_size, cfg.threads, cfg.precision) == (0, 1, 3, "fp32")


def test_resolve_reads_rank_from_the_launcher():
    cfg = _resolve("--model", "lenet", "--dataset", "synthetic", "--like", "mnist",
                   "--batch-size", "8", "--gpus", "2",
                   TRAINER_RANK="1", TRAINER_WORLD_SIZE="2", TRAINER_LOCAL_RANK="1")
    assert (cfg.rank, cfg.world_size, cfg.local_rank, cfg.per_device_batch) == (1, 2, 1, 4)


def test_the_fully_connected_networks_take_their_data_flattened_and_only_they_take_fcn_s_data(tmp_path):
    """FCN-R on MNIST: 1x28x28 flattened to 784 inputs by the network; FCN-S on DLBench's 26,752
    features and classes. A convolutional network on that feature vector is refused with the
    reason; the shape has no files, so it is no --dataset."""
    fcn_r = _resolve("--model", "fcn_r", "--dataset", "synthetic", "--like", "mnist", "--batch-size", "8")
    assert (fcn_r.input_shape, fcn_r.classes) == ((1, 28, 28), 10)
    fcn_s = _resolve("--model", "fcn_s", "--dataset", "synthetic", "--like", "dlbench_fcn", "--batch-size", "8")
    assert (fcn_s.input_shape, fcn_s.classes) == ((1, 1, 26752), 26752)
    with pytest.raises(errors.Unsupported, match=r"^dlbench_fcn-shaped data is 1x1x26752 features, not an "
                                                 r"image: only the fully connected networks \(fcn_r, fcn_s\) "
                                                 r"take it, not resnet50; use another --dataset or --model \(with --dataset "
                                                 r"synthetic, another --like\)$"):
        _resolve("--model", "resnet50", "--dataset", "synthetic", "--like", "dlbench_fcn", "--batch-size", "8")
    with pytest.raises(errors.InvalidArgument, match="or use --dataset synthetic --like dlbench_fcn"):
        _resolve("--model", "fcn_s", "--dataset", "dlbench_fcn", "--batch-size", "8")
    with pytest.raises(errors.Unsupported, match="^dlbench_fcn is random data with no files; use --dataset "
                                                 "synthetic --like dlbench_fcn$"):
        data.load("dlbench_fcn", str(tmp_path))


@pytest.mark.parametrize("model", ["resnet56", "alexnet_r", "vgg16_cifar", "googlenet_cifar"])
def test_the_cifar10_networks_take_cifar10_shaped_data_only(model):
    """He et al.'s ResNet-56, DLBench's AlexNet-R and kuangliu's 32x32 VGG16 and GoogLeNet are made for 32x32: on
    CIFAR-10 (or synthetic data shaped like it) they run at that size; any other shape is refused
    with the reason, not resized."""
    run = _resolve("--model", model, "--dataset", "synthetic", "--like", "cifar10", "--batch-size", "8")
    assert (run.input_shape, run.classes) == ((3, 32, 32), 10)
    for like, shape in (("mnist", "1x28x28"), ("imagenet", "3x224x224")):
        with pytest.raises(errors.Unsupported, match=r"^%s is a CIFAR-10 network for 32x32 images, and "
                                                     r"%s-shaped data is %s: it takes cifar10-shaped data only; "
                                                     r"use another --dataset or --model \(with --dataset "
                                                     r"synthetic, another --like\)$" % (model, like, shape)):
            _resolve("--model", model, "--dataset", "synthetic", "--like", like, "--batch-size", "8")


def test_the_lstm_takes_token_ids_of_its_seq_len_and_only_it_takes_them():
    """DLBench's LSTM on ptb-shaped data: [seq_len] token ids (32 unless --seq-len), the vocabulary's
    10,000 classes; an image network on token ids, the LSTM on images, and --seq-len for an image
    network are refused with the reason."""
    run = _resolve("--model", "lstm", "--dataset", "synthetic", "--like", "ptb", "--batch-size", "8")
    assert (run.input_shape, run.classes) == ((32,), 10000)
    run = _resolve("--model", "lstm", "--dataset", "synthetic", "--like", "ptb", "--batch-size", "8", "--seq-len", "64")
    assert run.input_shape == (64,)
    with pytest.raises(errors.Unsupported, match=r"^ptb-shaped data is token ids and resnet50 is an image network: "
                                                 r"the sequence networks \(lstm, lstm_imdb, lstm_ptb, gpt\) take text-shaped data "
                                                 r"\(ptb, imdb\) only"):
        _resolve("--model", "resnet50", "--dataset", "synthetic", "--like", "ptb", "--batch-size", "8")
    with pytest.raises(errors.Unsupported, match=r"^mnist-shaped data is images and lstm is a sequence network"):
        _resolve("--model", "lstm", "--dataset", "synthetic", "--like", "mnist", "--batch-size", "8")
    with pytest.raises(errors.Unsupported, match=r"^--seq-len is the sequence length of text-shaped data \(ptb, imdb\), "
                                                 r"which lenet does not take; leave --seq-len out$"):
        _resolve("--model", "lenet", "--dataset", "synthetic", "--like", "mnist", "--batch-size", "8", "--seq-len", "8")
    with pytest.raises(errors.InvalidArgument, match=r"^--seq-len must be at least 1, got 0$"):
        _resolve("--model", "lstm", "--dataset", "synthetic", "--like", "ptb", "--batch-size", "8", "--seq-len", "0")


def test_synthetic_text_is_token_ids_each_labelled_with_the_next():
    """A language model's data: every label is the token at the next position, int64, in the vocabulary."""
    text = data.synthetic("ptb", 5, seed=3, seq_len=7)
    tokens, labels = text.batch(np.arange(5))
    assert tokens.shape == labels.shape == (5, 7) and tokens.dtype == labels.dtype == np.int64
    assert (tokens[:, 1:] == labels[:, :-1]).all() and 0 <= tokens.min() and labels.max() < 10000
    assert text.shape == (7,) and len(text) == 5
    batches = pool.build_pool(text, 2, 2, (7,), lambda x, y: (x, y))
    assert [b[0].shape for b in batches] == [(2, 7), (2, 7)]


def test_a_shape_refusal_on_real_files_names_a_way_out_that_exists(tmp_path):
    """`--dataset mnist` under ResNet-56 has no --like to change (--like is for --dataset
    synthetic only, and refused beside real files): the way out names --dataset and --model."""
    with pytest.raises(errors.Unsupported) as refused:
        _resolve("--model", "resnet56", "--dataset", "mnist", "--data-dir", str(tmp_path), "--batch-size", "8")
    assert str(refused.value).endswith("; use another --dataset or --model (with --dataset synthetic, another "
                                       "--like)"), str(refused.value)
    with pytest.raises(errors.InvalidArgument, match="--like is for --dataset synthetic"):
        _resolve("--model", "resnet56", "--dataset", "mnist", "--like", "cifar10", "--data-dir", str(tmp_path),
                 "--batch-size", "8")


@pytest.mark.parametrize("argv,match", [
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--batch-size", "4", "--iterations", "0"], "--iterations"),
    (["--batch-size", "4", "--warmup", "-1"], "--warmup"),
    (["--batch-size", "4", "--threads", "0"], "--threads"),
    (["--batch-size", "five"], "--batch-size takes N \\(images per step\\) or auto"),
    (["--batch-size", "4", "--precision", "fp8"], "invalid choice"),
])
def test_resolve_refuses_bad_input(argv, match):
    base = ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist"]
    with pytest.raises(errors.InvalidArgument, match=match):
        _resolve(*(base + argv))


def test_resolve_dataset_rules(tmp_path):
    with pytest.raises(errors.InvalidArgument, match="--like"):
        _resolve("--model", "lenet", "--dataset", "synthetic", "--batch-size", "1")
    with pytest.raises(errors.InvalidArgument, match="--data-dir"):
        _resolve("--model", "lenet", "--dataset", "mnist", "--batch-size", "1")
    with pytest.raises(errors.DataError, match="does not exist"):
        _resolve("--model", "lenet", "--dataset", "mnist", "--batch-size", "1",
                 "--data-dir", str(tmp_path / "nowhere"))
    with pytest.raises(errors.InvalidArgument, match="--data-dir"):
        _resolve("--model", "lenet", "--dataset", "imagenet", "--batch-size", "1")
    with pytest.raises(errors.DataError, match="generate imagenet"):
        _resolve("--model", "lenet", "--dataset", "imagenet", "--batch-size", "1",
                 "--data-dir", str(tmp_path / "nowhere"))
    with pytest.raises(errors.Unsupported, match="--input pipeline"):
        _resolve("--model", "lenet", "--dataset", "mnist", "--batch-size", "1",
                 "--data-dir", str(tmp_path), "--input", "pipeline")
    cfg = _resolve("--model", "alexnet", "--dataset", "imagenet", "--batch-size", "1",
                   "--data-dir", str(tmp_path), "--input", "pipeline", "--loader-workers", "3")
    assert cfg.input == "pipeline" and cfg.loader_workers == 3 and cfg.classes == 1000
    cfg = _resolve("--model", "alexnet", "--dataset", "mnist", "--batch-size", "1",
                   "--data-dir", str(tmp_path))
    assert cfg.like == "mnist" and cfg.input_shape == (1, 224, 224)


# ------------------------------------------------------------------ the whole loop

def numpy_run(args, python=None, **env):
    """Run the numpy trainer; return (exit status, events, stderr)."""
    full_env = dict(os.environ)
    full_env.update(env)
    proc = subprocess.run([python or sys.executable, "-m", "trainers.numpy"] + args,
                          cwd=REPO, env=full_env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    return proc.returncode, events, proc.stderr


SMALL = ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist",
         "--iterations", "4", "--warmup", "2", "--threads", "1"]


def test_run_and_native_noise_goes_to_stderr():
    rc, events, stderr = numpy_run(SMALL + ["--batch-size", "8"], NUMPY_TRAINER_NOISE="1")
    assert rc == 0
    assert [e["event"] for e in events] == (
        ["run_start", "step", "step", "warmup_end"] + ["step"] * 4 + ["run_end"])
    assert "noise written to fd 1" in stderr and "noise printed by Python" in stderr
    assert events[0]["framework"] == "numpy" and events[0]["params"] == 431080
    assert [e["step"] for e in events if e["event"] == "step"] == list(range(6))
    assert events[-1]["images"] == 32 and events[3]["step"] == 2
    stamps = [e["t"] for e in events]
    assert stamps == sorted(stamps)


def test_warmup_zero_opens_the_window_first():
    argv = ["--model", "lenet", "--dataset", "synthetic", "--like", "cifar10",
            "--iterations", "2", "--warmup", "0", "--batch-size", "2"]
    rc, events, _ = numpy_run(argv)
    assert rc == 0
    assert [e["event"] for e in events] == ["run_start", "warmup_end", "step", "step",
                                            "run_end"]
    assert events[1]["step"] == 0


def test_divergence_is_caught_at_the_step_it_happens():
    rc, events, _ = numpy_run(SMALL + ["--batch-size", "8"], NUMPY_TRAINER_LR="1e6")
    assert rc == errors.EXIT_CODES["diverged"]
    assert events[-1]["event"] == "error" and events[-1]["class"] == "diverged"
    assert all(isinstance(e["loss"], float) for e in events if e["event"] == "step")


def test_memory_error_is_out_of_memory():
    rc, events, _ = numpy_run(SMALL + ["--batch-size", "8"], NUMPY_TRAINER_OOM_RANK="0")
    assert rc == errors.EXIT_CODES["out_of_memory"]
    assert events[-1]["class"] == "out_of_memory" and "traceback" in events[-1]
    assert [e["event"] for e in events[:-1]] == ["run_start", "step"]


def test_launcher_runs_one_process_per_device_and_relays_rank_0():
    rc, events, _ = numpy_run(SMALL + ["--batch-size", "8", "--gpus", "2", "--scaling",
                                     "weak"], TRAINER_CPU_REPLICAS="1")
    assert rc == 0
    kinds = [e["event"] for e in events]
    assert kinds == ["run_start", "step", "step", "warmup_end"] + ["step"] * 4 + ["run_end"]
    start = events[0]
    assert start["processes"] == 2 and start["batch_size"] == 16
    assert start["per_device_batch"] == 8
    assert all(e["images"] == 16 for e in events if e["event"] == "step")


def test_launcher_reports_a_failing_rank():
    rc, events, _ = numpy_run(SMALL + ["--batch-size", "8", "--gpus", "2"],
                            TRAINER_CPU_REPLICAS="1", NUMPY_TRAINER_OOM_RANK="1")
    assert rc == errors.EXIT_CODES["out_of_memory"]
    assert events[-1]["event"] == "error" and events[-1]["class"] == "out_of_memory"
    assert events[-1]["message"].startswith("rank 1: ")
    # rank 0 finished its steps, but the run did not end well: no run_end
    assert "run_end" not in [e["event"] for e in events]


@pytest.mark.skipif(not os.environ.get("PY36_PYTHON"),
                    reason="set PY36_PYTHON to a Python 3.6 with numpy 1.19")
def test_common_runs_on_python_36(tmp_path):
    py36 = os.environ["PY36_PYTHON"]
    version = subprocess.check_output([py36, "-c", "import sys, numpy; print("
                                       "sys.version_info[:2], numpy.__version__)"],
                                      universal_newlines=True)
    assert version.startswith("(3, 6)")
    subprocess.check_call([py36, "-m", "trainers.common.data", "mnist", str(tmp_path),
                           "--n", "40", "--gz"], cwd=REPO)
    argv = ["--model", "lenet", "--dataset", "mnist", "--data-dir", str(tmp_path),
            "--iterations", "3", "--warmup", "1", "--batch-size", "4", "--gpus", "2"]
    rc, events, _ = numpy_run(argv, python=py36, TRAINER_CPU_REPLICAS="1")
    assert rc == 0 and events[0]["python"].startswith("3.6")
    assert events[-1] == dict(events[-1], event="run_end", steps=3, images=12)


# ------------------------------------------------------------------ declarations

DECLARED = support.Support(
    "fw", cpu=["fp32", "bf16"], gpu=["fp32", "fp16"], multi_gpu=support.REPLICAS,
    gpu_build=((5, 0), (7, 5)), gpu_precision_capability={"fp16": (6, 0)},
    notes={"fp16": "no fast fp16 on CPUs"})


@pytest.mark.parametrize("request_, message", [
    (dict(precision="fp32", gpus=0), None),
    (dict(precision="bf16", gpus=0), None),
    (dict(precision="fp16", gpus=0),
     "fw does not support --precision fp16 on the CPU; it supports fp32, bf16 there "
     "(no fast fp16 on CPUs)"),
    (dict(precision="bf16", gpus=1), "fw does not support --precision bf16 on GPUs; it "
                                     "supports fp32, fp16 there"),
    (dict(precision="fp32", gpus=2, cpu_replicas=True),
     "fw does not support --gpus 2 as CPU replicas (TRAINER_CPU_REPLICAS=1); it supports "
     "several devices on GPUs only"),
    (dict(precision="fp32", gpus=1, gpu_capability=3.5, gpu_name="hardware=k20m"),
     "fw does not support hardware=k20m (compute capability 3.5); it supports compute "
     "capability 5.0 to 7.5 in its GPU build"),
    (dict(precision="fp32", gpus=1, gpu_capability="8.0"), "fw does not support these GPUs "
     "(compute capability 8.0); it supports compute capability 5.0 to 7.5 in its GPU build"),
    (dict(precision="fp16", gpus=1, gpu_capability=5.2),
     "fw does not support --precision fp16 on these GPUs (compute capability 5.2); it "
     "supports it on compute capability >= 6.0 (no fast fp16 on CPUs)"),
    (dict(precision="fp16", gpus=2, gpu_capability=7.0), None),
])
def test_a_declaration_refuses_what_it_does_not_hold_in_one_format(request_, message):
    assert DECLARED.problem(**request_) == message


def test_a_declaration_of_one_device_and_no_gpus():
    cpu_only = support.Support("cpuonly", cpu=["fp32"], models=["lenet"])
    assert cpu_only.problem("fp32", 1) == ("cpuonly does not support --gpus 1; it supports "
                                           "the CPU only")
    assert cpu_only.problem("fp32", 0, "vgg16") == ("cpuonly does not support --model vgg16; "
                                                    "it supports lenet")
    assert cpu_only.processes(4) == 1
    per_device = support.Support("p", cpu=["fp32"], gpu=["fp32"],
                                 multi_gpu=support.PROCESS_PER_DEVICE)
    assert per_device.processes(4) == 4 and per_device.processes(1) == 1
    assert DECLARED.processes(4) == 1  # replicas: one process
    with pytest.raises(ValueError, match="unknown"):
        support.Support("x", cpu=["fp8"])
    with pytest.raises(ValueError, match="multi_gpu"):
        support.Support("x", cpu=["fp32"], multi_gpu="threads")


def test_asking_for_more_gpus_than_the_framework_sees_is_unsupported():
    assert DECLARED.gpus_problem(2, 2, "fw 1.0") is None
    assert DECLARED.gpus_problem(4, 2, "fw 1.0") == (
        "fw does not support --gpus 4 here; it supports the 2 GPU(s) fw 1.0 sees")


def test_a_process_that_dies_without_reporting_is_named_with_its_log():
    stream = io.StringIO()
    relay = launch.Relay(Events(stream))
    code = launch.verdict(relay, [("rank 0", -6, ["F1123 x.cpp:1] Check failed: oops"])],
                          lambda code, tail: ("out_of_memory", "it said so"))
    (event,) = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert code == errors.EXIT_CODES["out_of_memory"]
    assert event["message"] == ("rank 0 ended (killed by signal 6) without reporting an "
                                "error: it said so")
    assert event["traceback"] == "F1123 x.cpp:1] Check failed: oops"


def test_a_trainer_runs_isolated_exactly_where_its_support_declares_it():
    """`isolate` is declared once, in the framework's light Support (which the orchestrator and the
    benchmarks read without importing the framework), and the trainer reads it from there."""
    from trainers.common.support import Support, declared
    from trainers.common.trainer import Trainer

    class Isolated(Trainer):
        support = Support("isolated", cpu=["fp32"], isolate=True)

    class Plain(Trainer):
        support = Support("plain", cpu=["fp32"])

    assert Isolated().isolate is True and Plain().isolate is False and Trainer().isolate is False
    assert declared("trainers.caffe").isolate is True  # a failed CHECK aborts Caffe's whole process
    assert not any(declared(f"trainers.{fw}").isolate for fw in ("torch", "tensorflow", "mxnet", "cntk", "jax", "numpy"))
