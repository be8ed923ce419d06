"""The minimal numpy loop (benchmarks/minimal/common.py): the reference LeNet, momentum SGD."""
import time

import numpy as np

from benchmarks.minimal import common
from trainers.common.host import set_blas_threads
from trainers.common.recipe import LEARNING_RATE, MOMENTUM
from trainers.numpy.models import build


def main():
    args = common.parse("numpy")
    set_blas_threads(args.threads)  # numpy's OpenBLAS pool (what threadpoolctl would do)
    model = build(args.model, args.input_shape, args.classes, seed=args.seed)
    lr, momentum = np.float32(LEARNING_RATE), np.float32(MOMENTUM)
    velocity = dict((k, np.zeros_like(v)) for k, v in model.params.items())
    batches = common.host_batches(args)
    times = []
    for i in range(args.steps):
        images, labels = batches[i % len(batches)]
        start = time.perf_counter()
        loss = model.loss_and_grads(images, labels)
        for name, param in model.params.items():
            velocity[name] *= momentum
            velocity[name] += model.grads[name]
            param -= lr * velocity[name]
        times.append(time.perf_counter() - start)
    common.report(args, times, loss)


if __name__ == "__main__":
    main()
