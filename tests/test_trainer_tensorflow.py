"""What only the TensorFlow trainer has; what every trainer must do is
tests/test_conformance.py's. Checked here: ORCH_TF_XLA switches the step to XLA, and
TensorFlow's allocation failure is classified as out_of_memory."""
import json
import subprocess

import pytest

pytestmark = pytest.mark.slow


def test_xla_is_switched_by_the_environment(framework_run, run_checks):
    proc, events = framework_run("tensorflow", [
        "--model", "lenet", "--dataset", "synthetic", "--like", "cifar10", "--batch-size", 8,
        "--iterations", 2, "--warmup", 1, "--threads", 1], ORCH_TF_XLA="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    build = run_checks(events, 1, 2, 8)["build"]
    assert build["xla"] is True and build["graph"] == "tf.function"


OOM_CHECK = r"""
import json
import tensorflow as tf
from trainers.common.errors import classify
from trainers.tensorflow.trainer import TensorFlowTrainer
try:
    tf.zeros([1 << 50], tf.uint8)  # 1 PiB: refused by the allocator at once
except Exception as exc:
    caught = exc
print(json.dumps([classify(caught, TensorFlowTrainer())[0],
                  classify(ValueError("out of range"), TensorFlowTrainer())[0]]))
"""


def test_allocation_failure_is_out_of_memory(framework_env, repo_root):
    python, env = framework_env("tensorflow")
    out = subprocess.check_output([python, "-c", OOM_CHECK], cwd=str(repo_root), env=env,
                                  universal_newlines=True, timeout=300,
                                  stderr=subprocess.DEVNULL)
    assert json.loads(out.strip().splitlines()[-1]) == ["out_of_memory", "crash"]
