"""The minimal MXNet loop (benchmarks/minimal/common.py): a hybridised Gluon network and
gluon.Trainer, as MXNet's Gluon tutorials write it."""
import os
import time

from benchmarks.minimal import common
from trainers.common.recipe import LEARNING_RATE, MOMENTUM


def main():
    args = common.parse("mxnet")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # read when MXNet loads
    import mxnet as mx
    from trainers.mxnet.models import build

    mx.random.seed(args.seed)
    net = build(args.model, args.input_shape, args.classes)
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    net.hybridize(static_alloc=True, static_shape=True)
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    loss_fn.hybridize(static_alloc=True, static_shape=True)
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd",
                               {"learning_rate": LEARNING_RATE, "momentum": MOMENTUM})
    batches = [(mx.nd.array(x), mx.nd.array(y)) for x, y in common.host_batches(args)]
    times = []
    for i in range(args.steps):
        images, labels = batches[i % len(batches)]
        start = time.perf_counter()
        with mx.autograd.record():
            loss = loss_fn(net(images), labels)
        loss.backward()
        trainer.step(args.batch_size)
        value = loss.mean().asscalar()
        mx.nd.waitall()  # the update too, as the trainer waits for it
        times.append(time.perf_counter() - start)
    common.report(args, times, value)


if __name__ == "__main__":
    main()
