"""The minimal TensorFlow loop (benchmarks/minimal/common.py): a Keras model trained by a
tf.function step, as TensorFlow's custom-training-loop guide writes it."""
import time

import tensorflow as tf

from benchmarks.minimal import common
from trainers.common.recipe import LEARNING_RATE, MOMENTUM
from trainers.tensorflow.models import build, keras


def main():
    args = common.parse("tensorflow")
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    keras.utils.set_random_seed(args.seed)
    model = build(args.model, args.input_shape, args.classes)
    if args.forward_only:
        return infer(args, model)
    optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE, momentum=MOMENTUM)

    @tf.function
    def train_step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=logits))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    batches = [(tf.constant(x.transpose(0, 2, 3, 1)), tf.constant(y))
               for x, y in common.host_batches(args)]
    times = []
    for i in range(args.steps):
        images, labels = batches[i % len(batches)]
        start = time.perf_counter()
        value = float(train_step(images, labels))
        times.append(time.perf_counter() - start)
    common.report(args, times, value)



def infer(args, model):
    """The forward-only loop: model(x, training=False) in a tf.function, the outputs to numpy."""
    forward = tf.function(lambda x: model(x, training=False))
    batches = [tf.constant(x.transpose(0, 2, 3, 1)) for x, _ in common.host_batches(args)]
    times = []
    for i in range(args.steps):
        start = time.perf_counter()
        out = forward(batches[i % len(batches)]).numpy()
        times.append(time.perf_counter() - start)
    common.report(args, times, out.mean())


if __name__ == "__main__":
    main()
