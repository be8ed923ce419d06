"""The PyTorch trainer, run for real as a job runs it, speaks docs/protocol.md."""
import json
import subprocess

import pytest

from conftest import REPO
from trainers.common import data
from trainers.common.errors import EXIT_CODES

pytestmark = pytest.mark.slow

RUN_START_FIELDS = {
    "framework", "version", "build", "model", "params", "input_shape", "classes",
    "dataset", "like", "batch_size", "per_device_batch", "gpus", "devices", "threads",
    "precision", "seed", "python"}


def train(torch_python, repo_root, *argv):
    """Run `python -m trainers.torch argv`; return (exit status, events, stderr)."""
    proc, events = run_trainer(torch_python, "torch", argv)
    return proc.returncode, events, proc.stderr


def run_trainer(python, framework, argv, env=None, timeout=900):
    """Run `python -m trainers.<framework> argv` from the repository; return (the finished
    process, its events). Fails the test if any stdout line is not a JSON event with `event` and `t`."""
    proc = subprocess.run([python, "-m", "trainers.%s" % framework] + [str(a) for a in argv],
                          cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout, env=env)
    events = []
    for line in proc.stdout.splitlines():
        event = json.loads(line)
        assert isinstance(event["event"], str) and isinstance(event["t"], float), line
        events.append(event)
    return proc, events


def check_run(events, warmup, iterations, global_batch):
    """The event order and counts of a successful run; returns the run_start event."""
    kinds = [e["event"] for e in events]
    assert kinds == (["run_start"] + ["step"] * warmup + ["warmup_end"]
                     + ["step"] * iterations + ["run_end"])
    start, end = events[0], events[-1]
    assert RUN_START_FIELDS <= set(start)
    assert start["batch_size"] == global_batch
    steps = [e for e in events if e["event"] == "step"]
    assert [s["step"] for s in steps] == list(range(warmup + iterations))
    assert all(s["images"] == global_batch and s["dt"] > 0 for s in steps)
    assert all(isinstance(s["loss"], float) for s in steps)
    assert events[warmup + 1]["step"] == warmup
    assert end["steps"] == iterations and end["images"] == iterations * global_batch
    stamps = [e["t"] for e in events]
    assert stamps == sorted(stamps)
    measured = steps[warmup:]
    throughput = sum(s["images"] for s in measured) / sum(s["dt"] for s in measured)
    assert throughput > 0
    return start


def test_lenet_synthetic_mnist(torch_python, repo_root):
    rc, events, _ = train(torch_python, repo_root, "--model", "lenet", "--dataset",
                          "synthetic", "--like", "mnist", "--batch-size", 16,
                          "--iterations", 4, "--warmup", 2, "--threads", 1, "--seed", 5)
    assert rc == 0
    start = check_run(events, warmup=2, iterations=4, global_batch=16)
    assert start["framework"] == "torch" and start["params"] == 431080
    assert start["input_shape"] == [1, 28, 28] and start["classes"] == 10
    assert start["devices"] and start["gpus"] == 0 and start["threads"] == 1
    assert start["per_device_batch"] == 16 and start["seed"] == 5
    assert start["build"]["intra_op_threads"] == 1 and "mkl" in start["build"]
    assert start["version"].startswith("2.")


def test_lenet_reads_mnist_files(torch_python, repo_root, tmp_path):
    data.write_mnist(str(tmp_path), n=50, seed=2, gz=True)
    rc, events, _ = train(torch_python, repo_root, "--model", "lenet", "--dataset", "mnist",
                          "--data-dir", tmp_path, "--batch-size", 8, "--iterations", 3,
                          "--warmup", 1, "--threads", 1)
    assert rc == 0
    start = check_run(events, warmup=1, iterations=3, global_batch=8)
    assert (start["dataset"], start["like"], start["params"]) == ("mnist", "mnist", 431080)


def test_imagenet_network_on_cifar10_files_is_upsampled(torch_python, repo_root, tmp_path):
    data.write_cifar10(str(tmp_path), n=12, seed=4)
    rc, events, _ = train(torch_python, repo_root, "--model", "alexnet", "--dataset",
                          "cifar10", "--data-dir", tmp_path, "--batch-size", 2,
                          "--iterations", 2, "--warmup", 1, "--threads", 2)
    assert rc == 0
    start = check_run(events, warmup=1, iterations=2, global_batch=2)
    assert start["input_shape"] == [3, 224, 224] and start["classes"] == 10
    # torchvision's AlexNet with a 10-class head: 61,100,840 - 4,097,000 + 40,970
    assert start["params"] == 57044810


def test_lenet_reads_cifar10_files_at_native_size(torch_python, repo_root, tmp_path):
    data.write_cifar10(str(tmp_path), n=20, seed=4, files=2)
    rc, events, _ = train(torch_python, repo_root, "--model", "lenet", "--dataset",
                          "cifar10", "--data-dir", tmp_path, "--batch-size", 4,
                          "--iterations", 2, "--warmup", 0, "--threads", 1)
    assert rc == 0
    start = check_run(events, warmup=0, iterations=2, global_batch=4)
    assert start["input_shape"] == [3, 32, 32] and start["params"] == 657080


def test_resnet50_synthetic_imagenet(torch_python, repo_root):
    rc, events, _ = train(torch_python, repo_root, "--model", "resnet50", "--dataset",
                          "synthetic", "--like", "imagenet", "--batch-size", 2,
                          "--iterations", 1, "--warmup", 1, "--threads", 2)
    assert rc == 0
    start = check_run(events, warmup=1, iterations=1, global_batch=2)
    assert start["params"] == 25557032 and start["classes"] == 1000


def test_bf16_runs_on_cpu(torch_python, repo_root):
    rc, events, _ = train(torch_python, repo_root, "--model", "lenet", "--dataset",
                          "synthetic", "--like", "cifar10", "--batch-size", 8,
                          "--iterations", 2, "--warmup", 1, "--threads", 1,
                          "--precision", "bf16")
    assert rc == 0
    assert check_run(events, warmup=1, iterations=2, global_batch=8)["precision"] == "bf16"


LENET = ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist",
         "--iterations", 2, "--warmup", 0, "--threads", 1]


@pytest.mark.parametrize("argv,cls,says", [
    (["--batch-size", 0], "unsupported", "--batch-size must be at least 1"),
    (["--batch-size", 3, "--gpus", 2], "unsupported", "does not divide among 2 GPUs"),
    (["--batch-size", 4, "--gpus", 2], "unsupported", "needs CUDA"),
    (["--batch-size", 4, "--gpus", 1, "--scaling", "weak"], "unsupported", "needs CUDA"),
    (["--batch-size", 4, "--precision", "fp16"], "unsupported", "fp16 on the CPU"),
    (["--batch-size", 4, "--iterations", 0], "unsupported", "--iterations"),
])
def test_impossible_configuration_is_one_error_event(torch_python, repo_root, argv, cls,
                                                     says):
    rc, events, stderr = train(torch_python, repo_root, *(LENET + argv))
    assert rc == EXIT_CODES[cls] and rc != 0
    assert len(events) == 1, events
    assert events[0]["event"] == "error" and events[0]["class"] == cls
    assert says in events[0]["message"]
    assert "Traceback" not in stderr


def test_missing_dataset_names_the_file(torch_python, repo_root, tmp_path):
    rc, events, _ = train(torch_python, repo_root, "--model", "lenet", "--dataset", "mnist",
                          "--data-dir", tmp_path, "--batch-size", 4, "--iterations", 1)
    assert rc != 0 and [e["event"] for e in events] == ["error"]
    assert events[0]["class"] == "unsupported"
    assert "train-images-idx3-ubyte" in events[0]["message"]


CPU_OOM = r"""
import json, torch
from trainers.common.errors import classify
from trainers.torch.trainer import TorchTrainer
try:
    torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: refused by the allocator at once
except Exception as exc:
    print(json.dumps([type(exc).__name__, str(exc)[:200], classify(exc, TorchTrainer())[0],
                      classify(ValueError("out of range"), TorchTrainer())[0]]))
"""


def test_torch_allocation_failure_is_out_of_memory(torch_python, repo_root):
    out = subprocess.check_output([torch_python, "-c", CPU_OOM], cwd=str(repo_root),
                                  universal_newlines=True, timeout=300)
    name, message, cls, other = json.loads(out)
    assert "allocate" in message, message
    assert cls == "out_of_memory" and other == "crash"
