"""The minimal CNTK loop (benchmarks/minimal/common.py): a cntk.Trainer fed one minibatch at a
time, as CNTK's Python tutorials write it. Python 3.6."""
import os
import time

import numpy as np

from benchmarks.minimal import common
from trainers.common.recipe import LEARNING_RATE, MOMENTUM


def main():
    args = common.parse("cntk")
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    from trainers.cntk.libpath import import_cntk
    from trainers.cntk.models import build
    C = import_cntk()
    C.cntk_py.set_max_num_cputhreads(args.threads)
    C.cntk_py.set_fixed_random_seed(args.seed)
    cpu = C.device.cpu()
    C.device.try_set_default_device(cpu)

    features = C.input_variable(args.input_shape, np.float32)
    labels = C.input_variable(args.classes, np.float32)
    z = build(args.model, features, args.classes)
    loss = C.cross_entropy_with_softmax(z, labels)
    learner = C.momentum_sgd(
        z.parameters,
        lr=C.learning_parameter_schedule(LEARNING_RATE, minibatch_size=args.batch_size),
        momentum=C.momentum_schedule(MOMENTUM), unit_gain=False)
    trainer = C.Trainer(z, (loss, None), [learner])
    batches = [{features: C.Value(x, device=cpu),
                labels: C.Value(np.eye(args.classes, dtype=np.float32)[y], device=cpu)}
               for x, y in common.host_batches(args)]
    times = []
    for i in range(args.steps):
        batch = batches[i % len(batches)]
        start = time.perf_counter()
        trainer.train_minibatch(batch)
        value = trainer.previous_minibatch_loss_average
        times.append(time.perf_counter() - start)
    common.report(args, times, value)


if __name__ == "__main__":
    main()
