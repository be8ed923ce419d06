"""A framework-free trainer that exercises `trainers.common` where a CPU-only torch cannot.

It is a real implementation of the trainer hooks: softmax regression on the flattened
input, trained with plain SGD in numpy (float32, softmax written out without the
max-subtraction, so a too-large learning rate genuinely overflows to NaN). It runs in any
interpreter with numpy, including the orchestrator's venv and a Python 3.6 one, which lets
the tests drive the paths a CPU torch cannot reach:

    HARNESS_RANKS=per-device   one process per device (gpus=N starts N CPU ranks), so the
                               launcher, relaying and rank failures are tested for real
    HARNESS_LR=<float>         learning rate times the input size (default 10, stable at
                               every input size); 1e6 diverges
    HARNESS_OOM_RANK=<r>       rank r asks numpy for an impossible allocation at step 1
                               (a genuine MemoryError)
    HARNESS_NOISE=1            setup writes straight to fd 1 and print()s, as frameworks'
                               C code and Python code do

    python -m tests.numpy_trainer --model lenet --dataset synthetic --like mnist ...
"""
import os
import sys

import numpy as np

from trainers.common.errors import Unsupported
from trainers.common.protocol import run
from trainers.common.trainer import Trainer


class NumpyTrainer(Trainer):
    framework = "numpy-harness"

    def preflight(self, cfg):
        if cfg.precision != "fp32":
            raise Unsupported("the numpy harness computes in fp32 only")

    def processes(self, cfg):
        return cfg.devices if os.environ.get("HARNESS_RANKS") == "per-device" else 1

    def setup(self, cfg):
        if os.environ.get("HARNESS_NOISE"):
            os.write(1, b"noise written to fd 1 by native code\n")
            print("noise printed by Python")
        self.rank = cfg.rank
        oom_rank = os.environ.get("HARNESS_OOM_RANK")
        self.oom = oom_rank is not None and int(oom_rank) == cfg.rank
        self.steps = 0
        features = int(np.prod(cfg.input_shape))
        self.lr = np.float32(float(os.environ.get("HARNESS_LR", "10")) / features)
        rng = np.random.RandomState(cfg.seed)
        self.w = (rng.randn(features, cfg.classes) * 0.01).astype(np.float32)
        self.b = np.zeros(cfg.classes, dtype=np.float32)
        return {"params": self.w.size + self.b.size, "devices": ["cpu"] * cfg.devices,
                "version": np.__version__, "build": {"numpy": np.__version__}}

    def to_batch(self, images, labels):
        return images.reshape(len(images), -1), labels

    def step(self, batch):
        self.steps += 1
        if self.oom and self.steps == 2:
            np.ones(1 << 62, dtype=np.uint8)  # 4 EiB: MemoryError on any machine
        x, y = batch
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            e = np.exp(x.dot(self.w) + self.b)
            p = e / e.sum(axis=1, keepdims=True)
            loss = -np.log(p[np.arange(len(y)), y]).mean()
            grad = p
            grad[np.arange(len(y)), y] -= 1
            grad /= np.float32(len(y))
            self.w -= self.lr * x.T.dot(grad)
            self.b -= self.lr * grad.sum(axis=0)
        return float(loss)


if __name__ == "__main__":
    sys.exit(run(NumpyTrainer, module="tests.numpy_trainer"))
