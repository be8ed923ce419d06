"""The numpy side of the protocol: LeNet (models.py) trained with the common recipe.

Momentum SGD as trainers/common/recipe.py states it, on the CPU, in fp32, with numpy's
OpenBLAS pool sized by --threads. CPU replicas
(trainers.common.support.CPU_REPLICAS_ENV) are one process per replica, started by
`trainers.common.launch`; each trains on its own shard of the data (numpy has no all-reduce:
the replicas do not exchange gradients, so this checks the launch, not data parallelism).

Test hooks (environment), so that the tests can drive the common failure paths for real:

    NUMPY_TRAINER_LR=<float>       the learning rate instead of the recipe's (1e6 diverges)
    NUMPY_TRAINER_OOM_RANK=<r>     rank r asks numpy for an impossible allocation at its
                                   second step (a genuine MemoryError)
    NUMPY_TRAINER_NOISE=1          setup writes straight to fd 1 and print()s, as frameworks'
                                   C code and Python code do
"""
import os

import numpy as np

from trainers.common.host import cpu_name, set_blas_threads
from trainers.common.recipe import LEARNING_RATE, MOMENTUM, WEIGHT_DECAY
from trainers.common.trainer import Trainer
from trainers.numpy import SUPPORT
from trainers.numpy.models import build

LR_ENV = "NUMPY_TRAINER_LR"
OOM_RANK_ENV = "NUMPY_TRAINER_OOM_RANK"
NOISE_ENV = "NUMPY_TRAINER_NOISE"


class NumpyTrainer(Trainer):
    support = SUPPORT

    def setup(self, cfg):
        if os.environ.get(NOISE_ENV):
            os.write(1, b"noise written to fd 1 by native code\n")
            print("noise printed by Python")
        oom_rank = os.environ.get(OOM_RANK_ENV)
        self.oom = oom_rank is not None and int(oom_rank) == cfg.rank
        self.steps = 0
        self.lr = np.float32(float(os.environ.get(LR_ENV, LEARNING_RATE)))
        self.model = build(cfg.model, cfg.input_shape, cfg.classes, seed=cfg.seed)
        self.velocity = dict((k, np.zeros_like(v)) for k, v in self.model.params.items())
        # numpy's OpenBLAS was loaded with trainers.common, before --threads was known, and
        # started a thread per CPU: --threads sizes its pool now
        blas_threads = set_blas_threads(cfg.threads)
        return {"params": self.model.count(), "devices": [cpu_name()] * cfg.devices,
                "version": np.__version__,
                "build": {"numpy": np.__version__, "blas_threads": blas_threads}}  # its BLAS: run_start's `blas`

    def set_learning_rate(self, lr):
        self.lr = np.float32(lr)

    def predict(self, images):
        with np.errstate(over="ignore", invalid="ignore"):
            return self.model.logits(images)

    def infer(self, batch):
        return self.predict(batch[0])  # the forward alone: LeNet has no dropout nor BatchNorm

    def step(self, batch):
        self.steps += 1
        if self.oom and self.steps == 2:
            np.ones(1 << 62, dtype=np.uint8)  # 4 EiB: MemoryError on any machine
        images, labels = batch
        with np.errstate(over="ignore", invalid="ignore"):
            loss = self.model.loss_and_grads(images, labels)
            for name, param in self.model.params.items():
                grad = self.model.grads[name]
                if WEIGHT_DECAY:
                    grad = grad + np.float32(WEIGHT_DECAY) * param
                velocity = self.velocity[name]
                velocity *= np.float32(MOMENTUM)
                velocity += grad
                param -= self.lr * velocity
        return loss
