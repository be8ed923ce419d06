"""The minimal JAX loop (benchmarks/minimal/common.py), forward-only: the trainer's flax network in
evaluation form (train=False) under jax.jit, each batch's logits read back with np.asarray, as JAX's
own examples time a model. XLA's CPU pool gets --threads threads and the batches stay on the host
until the timed call copies them, as the trainer has them (trainers/jax/trainer.py: configure_xla,
to_batch). Training has no minimal loop here: run it with --forward-only."""
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.minimal import common
from trainers.jax.models import build, init_variables
from trainers.jax.trainer import THREADS_ENV


def main():
    args = common.parse("jax")
    if not args.forward_only:
        raise SystemExit("the JAX minimal loop times inference only; add --forward-only")
    os.environ[THREADS_ENV] = str(args.threads)  # read when the backend starts: before any array is made
    jax.config.update("jax_platforms", "cpu")
    model = build(args.model, args.input_shape, args.classes, network=args.network)
    variables = init_variables(model, args.input_shape, seed=args.seed)

    @jax.jit
    def forward(variables, images):
        if images.ndim == 4:  # NCHW as the pool holds it, NHWC as flax's convolutions take it
            images = jnp.transpose(images, (0, 2, 3, 1))
        return model.apply(variables, images, train=False)

    batches = [x for x, _ in common.host_batches(args)]  # float32 NCHW on the host
    times = []
    for i in range(args.steps):
        start = time.perf_counter()
        out = np.asarray(forward(variables, batches[i % len(batches)]))
        times.append(time.perf_counter() - start)
    common.report(args, times, out.mean())


if __name__ == "__main__":
    main()
