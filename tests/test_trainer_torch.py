"""What only the PyTorch trainer has; what every trainer must do is tests/test_conformance.py's.

Checked here: an ImageNet network read from CIFAR-10 files is upsampled and gets a 10-class
head, and torch's allocation failure is classified as out_of_memory."""
import json
import subprocess

import pytest

from trainers.common import data

pytestmark = pytest.mark.slow


def test_imagenet_network_on_cifar10_files_is_upsampled(framework_run, run_checks, tmp_path):
    data.write_cifar10(str(tmp_path), n=12, seed=4)
    proc, events = framework_run("torch", [
        "--model", "alexnet", "--dataset", "cifar10", "--data-dir", tmp_path, "--batch-size", 2,
        "--iterations", 2, "--warmup", 1, "--threads", 2])
    assert proc.returncode == 0, proc.stderr[-3000:]
    start = run_checks(events, 1, 2, 2)
    assert start["input_shape"] == [3, 224, 224] and start["classes"] == 10
    # torchvision's AlexNet with a 10-class head: 61,100,840 - 4,097,000 + 40,970
    assert start["params"] == 57044810


CPU_OOM = r"""
import json, torch
from trainers.common.errors import classify
from trainers.torch.trainer import TorchTrainer
try:
    torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: refused by the allocator at once
except Exception as exc:
    print(json.dumps([str(exc)[:200], classify(exc, TorchTrainer())[0],
                      classify(ValueError("out of range"), TorchTrainer())[0]]))
"""


def test_torch_allocation_failure_is_out_of_memory(framework_env, repo_root):
    python, env = framework_env("torch")
    out = subprocess.check_output([python, "-c", CPU_OOM], cwd=str(repo_root), env=env,
                                  universal_newlines=True, timeout=300)
    message, cls, other = json.loads(out)
    assert "allocate" in message, message
    assert cls == "out_of_memory" and other == "crash"
