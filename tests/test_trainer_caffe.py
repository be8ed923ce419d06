"""The Caffe trainer, for real: BVLC Caffe built from source into its venv (containers/caffe/).

The environment is the one the venv runtime builds for `framework=caffe` (first use: minutes
for the Caffe build, cached afterwards). Runs: LeNet on synthetic and on generated MNIST
files, an ImageNet-shaped network at a tiny batch, the refusals (fp16, GPUs on a CPU-only
build), a Caffe abort turned into an error event, and a sweep through the orchestrator into
results.db. The multi-GPU path (`caffe train --gpu=...`) is checked as far as its command
line, generated files and log parsing: no CUDA build of Caffe exists here.
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, framework_python, model_counts, recipe_env
from test_sweep import sweep_rows
from test_trainer_protocol import check_run as protocol_check_run, run_trainer

pytestmark = pytest.mark.slow

FAST = ["--iterations", "3", "--warmup", "1", "--threads", "2"]


@pytest.fixture(scope="module")
def caffe_python():
    return framework_python("caffe")


def trainer(python, args, timeout=600, env=None):
    """(finished process, events) of the Caffe trainer in its recipe's environment."""
    return run_trainer(python, "caffe", args, {**os.environ, **recipe_env("caffe"), **(env or {})}, timeout)


def model_count(python, model, channels, size, classes):
    return model_counts(python, "caffe", channels, size, classes, [model])[model]


def check_run(done, events, steps, batch):
    """A successful run of `steps` steps (the first one warm-up): the protocol's checks, then Caffe's."""
    assert done.returncode == 0, done.stderr[-3000:]
    start = protocol_check_run(events, warmup=1, iterations=steps - 1, global_batch=batch)
    assert start["framework"] == "caffe"
    assert start["build"]["blas"] == "openblas" and start["build"]["cuda"] is False
    assert all(e["loss"] == e["loss"] and e["loss"] > 0 for e in events if e["event"] == "step")  # finite
    return start


def test_lenet_synthetic(caffe_python):
    done, events = trainer(caffe_python, ["--model", "lenet", "--dataset", "synthetic",
                                          "--like", "mnist", "--batch-size", "16"] + FAST)
    start = check_run(done, events, 4, 16)
    assert start["params"] == model_count(caffe_python, "lenet", 1, 28, 10) == 431080
    assert start["input_shape"] == [1, 28, 28] and start["threads"] == 2
    assert start["build"]["openblas_num_threads_env"] == "2"


def test_lenet_generated_mnist(caffe_python, tmp_path):
    sys.path.insert(0, str(REPO))
    from trainers.common.data import write_mnist
    write_mnist(str(tmp_path), n=200)
    done, events = trainer(caffe_python, ["--model", "lenet", "--dataset", "mnist",
                                          "--data-dir", str(tmp_path), "--batch-size", "32"]
                           + FAST)
    start = check_run(done, events, 4, 32)
    assert start["dataset"] == "mnist" and start["params"] == 431080


def test_lenet_learns_on_repeated_batches(caffe_python):
    """The solver really updates: over five passes of the same eight pooled batches the
    mean loss of a pass falls (deterministic: seeded data and Caffe, one thread)."""
    done, events = trainer(caffe_python, ["--model", "lenet", "--dataset", "synthetic",
                                          "--like", "mnist", "--batch-size", "8",
                                          "--iterations", "40", "--warmup", "0",
                                          "--threads", "1"])
    assert done.returncode == 0, done.stderr[-3000:]
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert len(losses) == 40
    first, last = sum(losses[:8]) / 8, sum(losses[-8:]) / 8
    assert last < first - 0.3, (first, last)


def test_imagenet_network_tiny_batch(caffe_python):
    done, events = trainer(caffe_python, ["--model", "alexnet", "--dataset", "synthetic",
                                          "--like", "imagenet", "--batch-size", "2",
                                          "--iterations", "2", "--warmup", "1",
                                          "--threads", "2"])
    start = check_run(done, events, 3, 2)
    assert start["params"] == model_count(caffe_python, "alexnet", 3, 224, 1000) == 61100840
    assert start["input_shape"] == [3, 224, 224]


def test_googlenet_upsampled_cifar_shape(caffe_python):
    """BatchNorm + Scale, Concat, ceil pooling; CIFAR-shaped input upsampled to 224."""
    done, events = trainer(caffe_python, ["--model", "googlenet", "--dataset", "synthetic",
                                          "--like", "cifar10", "--batch-size", "2",
                                          "--iterations", "1", "--warmup", "1"])
    start = check_run(done, events, 2, 2)
    assert start["params"] == model_count(caffe_python, "googlenet", 3, 224, 10)


@pytest.mark.parametrize("args, words", [
    (["--precision", "fp16"], "fp32 only"),
    (["--gpus", "1"], "CPU-only"),
])
def test_refusals_are_unsupported(caffe_python, args, words):
    done, events = trainer(caffe_python, ["--model", "lenet", "--dataset", "synthetic",
                                          "--like", "mnist", "--batch-size", "4"] + args + FAST)
    assert done.returncode == 3, done.stderr[-2000:]
    assert [e["event"] for e in events] == ["error"]
    assert events[0]["class"] == "unsupported" and words in events[0]["message"]


def test_caffe_abort_becomes_an_error_event(caffe_python):
    """A glog CHECK failure aborts the process below Python; the supervisor reports it."""
    done, events = trainer(caffe_python, ["--model", "lenet", "--dataset", "synthetic",
                                          "--like", "mnist", "--batch-size", "4"] + FAST,
                           env={"CAFFE_TRAINER_TEST_ABORT": "1"})
    assert done.returncode == 1, done.stderr[-2000:]
    assert events[-1]["event"] == "error" and events[-1]["class"] == "crash"
    assert "signal 6" in events[-1]["message"] and "Check failed" in events[-1]["message"]


def test_killing_the_trainer_leaves_no_orphan(caffe_python):
    """The job stops a trainer with SIGKILL; the supervised child must go with it at once,
    not only when it next writes an event (a VGG16 step takes seconds here)."""
    import psutil
    from orchestrator.runtime import VenvRuntime
    env = dict(os.environ, **VenvRuntime.for_framework("caffe").command([])[1])
    proc = subprocess.Popen([caffe_python, "-m", "trainers.caffe", "--model", "vgg16",
                             "--dataset", "synthetic", "--like", "imagenet", "--batch-size", "1",
                             "--iterations", "1000000", "--warmup", "0", "--threads", "1"],
                            cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        first = json.loads(proc.stdout.readline())
        assert first["event"] == "run_start"
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "the trainer runs in a child process"
        proc.kill()
        proc.wait()
        gone, alive = psutil.wait_procs(children, timeout=5)
        assert not alive, alive
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_abort_classification():
    sys.path.insert(0, str(REPO))
    from trainers.caffe.__main__ import classify_abort
    cls, message = classify_abort(-6, [
        "F1123 09:30:00.123456 77 syncedmem.cpp:71] Check failed: *ptr host allocation of "
        "size 1099511627776 failed", "*** Check failure stack trace: ***"])
    assert cls == "out_of_memory" and "host allocation" in message and "signal 6" in message
    cls, message = classify_abort(-6, [
        "F1123 09:30:00.1 77 syncedmem.hpp:22] Check failed: error == cudaSuccess (2 vs. 0)  "
        "out of memory"])
    assert cls == "out_of_memory"
    cls, _ = classify_abort(-11, ["something else"])
    assert cls == "crash"


SAMPLE_LOG = """\
I1123 10:00:00.000001  4242 caffe.cpp:204] Using GPUs 0, 1
I1123 10:00:01.000000  4242 solver.cpp:57] Solver scaffolding done.
I1123 10:00:01.500000  4242 caffe.cpp:248] Starting Optimization
I1123 10:00:01.600000  4242 solver.cpp:218] Iteration 0 (0 iter/s, 0.103s/1 iters), loss = 6.9078
I1123 10:00:01.700000  4242 solver.cpp:218] Iteration 1 (10.2 iter/s, 0.098s/1 iters), loss = 6.91
I1123 10:00:01.800000  4242 solver.cpp:218] Iteration 2 (9.8 iter/s, 0.1021s/1 iters), loss = 6.89
I1123 10:00:01.900000  4242 solver.cpp:447] Snapshotting to binary proto file
I1123 10:00:02.000000  4242 caffe.cpp:259] Optimization Done.
"""


def test_multigpu_command_and_log_parsing(caffe_python, tmp_path):
    """The multi-GPU path, as far as it can be checked without a CUDA build: the command
    line, the files it writes, and the steps read from a (fake) tool's log."""
    fake = tmp_path / "caffe"
    log = tmp_path / "sample.log"
    log.write_text(SAMPLE_LOG)
    fake.write_text("#!/bin/sh\necho \"$@\" > %s/argv\ncat %s >&2\n" % (tmp_path, log))
    fake.chmod(0o755)
    script = r"""
import json, os, sys
sys.path.insert(0, %(repo)r)
from trainers.common.protocol import Config
from trainers.caffe import models, multigpu, trainer
import caffe, numpy as np
assert multigpu.train_command("caffe", "/x/solver.prototxt", 4) == [
    "caffe", "train", "--solver=/x/solver.prototxt", "--gpu=0,1,2,3"]
assert multigpu.parse_iteration(
    "I1123 solver.cpp:218] Iteration 12 (9.8 iter/s, 0.1021s/1 iters), loss = 6.89") == (
    12, 6.89, 0.1021)
assert multigpu.parse_iteration("I1123 solver.cpp:57] Solver scaffolding done.") is None
cfg = Config(model="lenet", gpus=2, per_device_batch=4, warmup=1, iterations=2, seed=0,
             local_rank=0, input_shape=(1, 28, 28), classes=10)
net = models.build("lenet", cfg.input_shape, cfg.classes, cfg.per_device_batch)
solver = trainer.solver_param(caffe, cfg, "unused")
tool = multigpu.CaffeTool(%(work)r, net, solver, cfg, binary=%(fake)r)
for i in range(2):
    tool.add_batch(np.zeros((4, 1, 28, 28), np.float32), np.zeros(4, np.float32))
losses = [tool.step() for _ in range(3)]
try:
    tool.step()
    raise AssertionError("a fourth step should fail: the tool has ended")
except multigpu.ToolFailed as exc:
    assert "Optimization Done" in str(exc) and not exc.out_of_memory
tool.close()
print(json.dumps({"losses": losses, "argv": open(os.path.join(%(tmp)r, "argv")).read(),
                  "net": open(os.path.join(%(work)r, "train.prototxt")).read(),
                  "solver": open(os.path.join(%(work)r, "solver.prototxt")).read()}))
""" % {"repo": str(REPO), "work": str(tmp_path), "fake": str(fake), "tmp": str(tmp_path)}
    done = subprocess.run([caffe_python, "-c", script], cwd=str(REPO), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300,
                          env=dict(os.environ, GLOG_minloglevel="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["losses"] == [6.9078, 6.91, 6.89]
    assert out["argv"].split() == ["train", "--solver=%s" % (tmp_path / "solver.prototxt"),
                                   "--gpu=0,1"]
    assert 'type: "HDF5Data"' in out["net"] and "batch_size: 4" in out["net"]
    assert 'type: "Input"' not in out["net"]
    assert "display: 1" in out["solver"] and "solver_mode: GPU" in out["solver"]
    assert (tmp_path / "batches.h5").is_file()


def test_sweep_lands_rows_in_results_db(caffe_python, tmp_path):
    assert sweep_rows("caffe", tmp_path) == [("caffe", "alexnet", "done", 1, 61100840),
                                           ("caffe", "lenet", "done", 1, 431080)]
