"""What only the TensorFlow trainer has; what every trainer must do is
tests/test_conformance.py's. Checked here: ORCH_TF_XLA switches the step to XLA, and
TensorFlow's allocation failure is classified as out_of_memory."""

import pytest

from helpers import allocation_failure_classes

pytestmark = pytest.mark.slow


def test_xla_is_switched_by_the_environment(framework_run, run_checks):
    proc, events = framework_run("tensorflow", [
        "--model", "lenet", "--dataset", "synthetic", "--like", "cifar10", "--batch-size", 8,
        "--iterations", 2, "--warmup", 1, "--threads", 1], ORCH_TF_XLA="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    build = run_checks(events, 1, 2, 8)["build"]
    assert build["xla"] is True and build["graph"] == "tf.function"


def test_allocation_failure_is_out_of_memory(framework_env, repo_root):
    assert allocation_failure_classes(framework_env, repo_root, "tensorflow", "trainers.tensorflow.trainer.TensorFlowTrainer",
                                      ("import tensorflow as tf", "tf.zeros([1 << 50], tf.uint8)"),
                                      'ValueError("out of range")') == ["out_of_memory", "crash"]  # 1 PiB: refused at once
