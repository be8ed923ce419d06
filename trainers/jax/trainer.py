"""The JAX side of the protocol: a Flax Linen network (models.py) trained by one jitted step.

Why Linen and not NNX: Linen keeps the model's variables in explicit pytrees (params,
BatchNorm's batch_stats) apart from the module, so the training step is a pure function of
(state, images, labels) -> (state, loss) that `jax.jit` compiles once and that holds no
Python state; Linen is also the API most published JAX training code is written in. NNX
(stateful modules, newer) would need `nnx.jit` and its graph splitting around the same step.

The step: NCHW batches (the protocol's) are transposed to NHWC inside the compiled function,
the loss is softmax cross-entropy averaged over the batch, and the update is the shared
recipe's (trainers/common/recipe.py) in Optax's words: `add_decayed_weights(WEIGHT_DECAY)`
then `sgd(lr, momentum=MOMENTUM)`, which is PyTorch's v = m * v + g, w = w - lr * v. The rate
sits in the optimizer state (`optax.inject_hyperparams`), so accuracy mode's schedule changes
it without recompiling. The step is compiled ahead of time in `setup` for the run's batch
shape, so no timed step (warm-up or not) pays for compilation; `step` returns the loss after
`jax.block_until_ready` on everything the step produced. The state is donated to the step, so
XLA updates the parameters in place.

Precisions (trainers/jax/__init__.py): fp32; bf16 as Flax's mixed precision (layers compute
in bfloat16, parameters, gradients, the optimizer and the loss stay float32). One process on
one device: JAX's CPU build, no replicas.

--threads: XLA's CPU client sizes its thread pool from the CPUs the process may run on (the
job's allocation, which Slurm's cgroup sets); JAX has no per-process setting for it, so
`build` records the CPUs XLA sees beside the --threads asked for.
"""
import os

import flax
import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
import optax

from trainers.common.host import cpu_name
from trainers.common.recipe import LEARNING_RATE, MOMENTUM, WEIGHT_DECAY
from trainers.common.trainer import Trainer, params_sha256
from trainers.jax import SUPPORT
from trainers.jax.models import build, count_params, init_variables

DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16}


def _optimizer(learning_rate):
    return optax.chain(optax.add_decayed_weights(WEIGHT_DECAY),
                       optax.sgd(learning_rate, momentum=MOMENTUM))


def _rate(lr):
    # one dtype for every rate, so that setting it never changes the compiled step's signature
    return jnp.asarray(lr, dtype=jnp.float32)


class JaxTrainer(Trainer):
    support = SUPPORT

    def __init__(self):
        self.model = None
        self.state = None
        self.train_step = None
        self.eval_step = None

    def setup(self, cfg):
        model = build(cfg.model, cfg.input_shape, cfg.classes, dtype=DTYPES[cfg.precision])
        variables = init_variables(model, cfg.input_shape, seed=cfg.seed)
        params = variables["params"]
        stats = dict((k, v) for k, v in variables.items() if k != "params")
        optimizer = optax.inject_hyperparams(_optimizer)(learning_rate=_rate(LEARNING_RATE))
        self.model = model
        self.state = {"params": params, "stats": stats, "opt": optimizer.init(params),
                      "key": jax.random.fold_in(jax.random.PRNGKey(cfg.seed), cfg.rank)}

        def train_step(state, images, labels):
            key, dropout_key = jax.random.split(state["key"])
            images = jnp.transpose(images, (0, 2, 3, 1))

            def loss_fn(params):
                logits, stats = model.apply(
                    dict(state["stats"], params=params), images, train=True,
                    rngs={"dropout": dropout_key}, mutable=list(state["stats"]))
                loss = optax.softmax_cross_entropy_with_integer_labels(
                    logits.astype(jnp.float32), labels).mean()
                return loss, stats

            (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
            updates, opt = optimizer.update(grads, state["opt"], state["params"])
            return {"params": optax.apply_updates(state["params"], updates), "stats": stats,
                    "opt": opt, "key": key}, loss

        def eval_step(state, images):
            logits = model.apply(dict(state["stats"], params=state["params"]),
                                 jnp.transpose(images, (0, 2, 3, 1)), train=False)
            return logits.astype(jnp.float32)

        batch = (cfg.per_device_batch,) + tuple(cfg.input_shape)
        self.train_step = jax.jit(train_step, donate_argnums=0).lower(
            self.state, jax.ShapeDtypeStruct(batch, jnp.float32),
            jax.ShapeDtypeStruct(batch[:1], jnp.int32)).compile()
        self.eval_step = jax.jit(eval_step)
        return {"params": count_params(params), "devices": [cpu_name()] * cfg.devices,
                "version": jax.__version__, "build": build_info(cfg)}

    def to_batch(self, images, labels):
        # JAX's default integers are 32-bit: convert here, outside the timed step
        return np.ascontiguousarray(images, dtype=np.float32), labels.astype(np.int32)

    def step(self, batch):
        images, labels = jax.device_put(batch[0]), jax.device_put(batch[1])
        self.state, loss = self.train_step(self.state, images, labels)
        jax.block_until_ready((self.state, loss))
        return float(loss)

    def set_learning_rate(self, lr):
        self.state["opt"].hyperparams["learning_rate"] = _rate(lr)

    def predict(self, images):
        return np.asarray(self.eval_step(self.state, np.asarray(images, dtype=np.float32)))

    def param_checksum(self):
        return params_sha256(jax.tree_util.tree_leaves(self.state["params"]))

    def is_out_of_memory(self, exc):
        # jax.errors.JaxRuntimeError (XlaRuntimeError before JAX 0.5), a RuntimeError
        text = str(exc)
        return isinstance(exc, RuntimeError) and (
            "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower())


def build_info(cfg):
    """What this JAX was built with and runs on, for run_start's `build`."""
    device = jax.devices()[0]
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count()
    return {
        "jaxlib": jaxlib.__version__,
        "flax": flax.__version__,
        "optax": optax.__version__,
        "platform": device.platform,
        "device_kind": device.device_kind,
        "api": "flax.linen",
        "compute_dtype": jnp.dtype(DTYPES[cfg.precision]).name,
        "xla_cpu_threads": cpus,
        "threads_asked": cfg.threads,
        "xla_flags": os.environ.get("XLA_FLAGS"),
    }
