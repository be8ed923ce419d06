"""What only the Caffe trainer has; what every trainer must do is tests/test_conformance.py's.

BVLC Caffe is built from source into its venv (containers/caffe/; first use: minutes, cached
afterwards). Checked here: the solver really trains, GoogLeNet's Caffe layers (BatchNorm +
Scale, Concat, ceil pooling) run at an upsampled CIFAR shape, a Caffe abort (below Python)
becomes an error event through the common launcher's isolated run, a killed trainer leaves no
orphan, how an abort's log is read, and the multi-GPU path (`caffe train --gpu=...`) as far as
its command line, generated files and log parsing: no CUDA build of Caffe exists here.
"""
import json
import subprocess

import psutil
import pytest

from trainers.caffe.trainer import classify_abort

pytestmark = pytest.mark.slow


LENET = ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist"]


def test_lenet_learns_on_repeated_batches(framework_run):
    """The solver really updates: over five passes of the same eight pooled batches the
    mean loss of a pass falls (deterministic: seeded data and Caffe, one thread)."""
    proc, events = framework_run("caffe", LENET + ["--batch-size", 8, "--iterations", 40,
                                                    "--warmup", 0, "--threads", 1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert len(losses) == 40
    first, last = sum(losses[:8]) / 8, sum(losses[-8:]) / 8
    assert last < first - 0.3, (first, last)


def test_googlenet_upsampled_cifar_shape(framework_run, run_checks):
    proc, events = framework_run("caffe", ["--model", "googlenet", "--dataset", "synthetic",
                                            "--like", "cifar10", "--batch-size", 2,
                                            "--iterations", 1, "--warmup", 1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    start = run_checks(events, 1, 1, 2)
    assert start["input_shape"] == [3, 224, 224] and start["classes"] == 10
    assert start["build"]["cuda"] is False and "blas" not in start["build"]
    assert any(b["library"] == "OpenBLAS" and "openblas-pthread/libopenblasp" in b["path"] for b in start["blas"])


def test_caffe_abort_becomes_an_error_event(framework_run):
    """A glog CHECK failure aborts the process below Python; the parent reports it."""
    proc, events = framework_run("caffe", LENET + ["--batch-size", 4, "--iterations", 1],
                       CAFFE_TRAINER_TEST_ABORT="1")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert [e["event"] for e in events] == ["error"]
    assert events[0]["class"] == "crash"
    assert events[0]["message"].startswith(
        "the trainer's child process ended (killed by signal 6) without reporting an error: "
        "Caffe aborted: Check failed")
    assert "Check failed" in events[0]["traceback"]


def test_killing_the_trainer_leaves_no_orphan(framework_env, repo_root):
    """The job stops a trainer with SIGKILL; the child that trains must go with it at once,
    not only when it next writes an event (a VGG16 step takes seconds here)."""
    python, env = framework_env("caffe")
    proc = subprocess.Popen([python, "-m", "trainers.caffe", "--model", "vgg16",
                             "--dataset", "synthetic", "--like", "imagenet", "--batch-size", "1",
                             "--iterations", "1000000", "--warmup", "0", "--threads", "1"],
                            cwd=str(repo_root), env=env, stdout=subprocess.PIPE,
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
    cls, message = classify_abort([
        "F1123 09:30:00.123456 77 syncedmem.cpp:71] Check failed: *ptr host allocation of "
        "size 1099511627776 failed", "*** Check failure stack trace: ***"])
    assert cls == "out_of_memory"
    assert message == ("Caffe aborted: Check failed: *ptr host allocation of size "
                       "1099511627776 failed")
    cls, _ = classify_abort([
        "F1123 09:30:00.1 77 syncedmem.hpp:22] Check failed: error == cudaSuccess (2 vs. 0)  "
        "out of memory"])
    assert cls == "out_of_memory"
    assert classify_abort(["something else"]) == ("crash", "Caffe aborted: no fatal message "
                                                           "in its log")


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


def test_multigpu_command_and_log_parsing(framework_env, tmp_path, repo_root):
    """The multi-GPU path, as far as it can be checked without a CUDA build: the command
    line, the files it writes, and the steps read from a (fake) tool's log."""
    python, env = framework_env("caffe")
    fake = tmp_path / "caffe"
    log = tmp_path / "sample.log"
    log.write_text(SAMPLE_LOG)
    fake.write_text("#!/bin/sh\necho \"$@\" > %s/argv\ncat %s >&2\n" % (tmp_path, log))
    fake.chmod(0o755)
    script = r"""
import json, os
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
print(json.dumps({"losses": losses, "argv": open(os.path.join(%(work)r, "argv")).read(),
                  "net": open(os.path.join(%(work)r, "train.prototxt")).read(),
                  "solver": open(os.path.join(%(work)r, "solver.prototxt")).read()}))
""" % {"work": str(tmp_path), "fake": str(fake)}
    done = subprocess.run([python, "-c", script], cwd=str(repo_root), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["losses"] == [6.9078, 6.91, 6.89]
    assert out["argv"].split() == ["train", "--solver=%s" % (tmp_path / "solver.prototxt"),
                                   "--gpu=0,1"]
    assert 'type: "HDF5Data"' in out["net"] and "batch_size: 4" in out["net"]
    assert 'type: "Input"' not in out["net"]
    assert "display: 1" in out["solver"] and "solver_mode: GPU" in out["solver"]
    assert (tmp_path / "batches.h5").is_file()
