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


SEEDED_INIT = r"""
import hashlib, json, sys
import numpy as np
import tensorflow as tf
from trainers.tensorflow.models import build
tf.keras.utils.set_random_seed(int(sys.argv[1]))
weights = build("resnet50", (3, 32, 32), 10).get_weights()
by_shape = {}
for w in weights:
    if w.std() > 0:  # drawn at random (not BatchNorm's ones and zeros)
        by_shape.setdefault(w.shape, []).append(w)
equal = sum(np.array_equal(a, b) for ws in by_shape.values() for a, b in zip(ws, ws[1:]))
print(json.dumps([hashlib.sha256(b"".join(w.tobytes() for w in weights)).hexdigest(), int(equal)]))
"""


def test_the_seed_alone_decides_the_initial_weights_and_no_two_layers_start_equal(framework_env, repo_root):
    """Keras initializers made at import drew their seeds from an unseeded `random` (the same --seed
    gave other weights in every process) and one shared instance gave equal layers of one shape."""
    import json
    import subprocess

    python, env = framework_env("tensorflow")

    def init(seed):
        out = subprocess.check_output([python, "-c", SEEDED_INIT, str(seed)], cwd=str(repo_root), env=env,
                                      universal_newlines=True, timeout=300, stderr=subprocess.DEVNULL)
        return json.loads(out.strip().splitlines()[-1])

    (first, equal), (again, _), (other, _) = init(0), init(0), init(1)
    assert first == again and first != other
    assert equal == 0  # ResNet-50 has many same-shape convolutions: each drew its own weights
