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

Several devices (`--gpus N`: the first N of jax.devices("gpu"); with TRAINER_CPU_REPLICAS=1,
N XLA host devices) are data parallel through jax.sharding, not pmap: a 1-D Mesh over the
run's devices, the global batch sharded on its leading axis, the train state replicated, and
the one step jitted with those in/out shardings. Under jit the program is the single-device
program on the global batch and XLA's partitioner inserts the all-reduces, so the loss (a mean
over the global batch) and its gradient are exactly one device's at the global batch;
`jax.pmap` is legacy in current JAX (its own documentation points to jit with shardings),
needs a per-device leading axis on every array and an explicit `lax.pmean`. One consequence:
BatchNorm's batch statistics are over the global batch (synchronous BatchNorm), where
PyTorch's DistributedDataParallel normalises each GPU's shard by its own statistics. One
device is the same path on a one-device mesh. The pool holds per-device batches
(`trainers.common` builds it for one process), and every device receives the same host batch
(as TensorFlow's and MXNet's replicas do): each step processes the global batch of images
(cfg.global_batch = N x cfg.per_device_batch), the inputs repeat across devices.
`train_on(shards)` takes one batch per device, for a check with distinct data on each.

XLA reads the host device count (XLA_FLAGS `--xla_force_host_platform_device_count`) and its
CPU thread pool's size (PJRT_NPROC) from the environment when its backend starts, which is the
first jax.devices() or computation, not `import jax`; `configure_xla` sets both in the first
hook of the run (`gpus_visible` on GPUs, else `preflight`) and refuses to run if the backend
has started already with other settings. A CPU run is pinned to JAX's CPU platform, so a GPU build on the node does
not take it.

--threads: XLA's CPU client sizes its intra-op (Eigen) pool from PJRT_NPROC, else from the CPUs
the process may run on (its affinity, which Slurm's cgroup sets); a pool never has fewer
threads than host devices. `configure_xla` sets PJRT_NPROC to --threads, and `build` records
the pool's threads as counted in /proc (`xla_cpu_threads`) beside the --threads asked for.

Precisions (trainers/jax/__init__.py): fp32; bf16 as Flax's mixed precision (layers compute
in bfloat16, parameters, gradients, the optimizer and the loss stay float32). The GPU build
(containers/jax/gpu.yaml, jax[cuda12]) is declared from JAX's documentation and has not been
run on a GPU here.
"""
import os

import flax
import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from trainers.common.errors import Unsupported
from trainers.common.host import cpu_name
from trainers.common.recipe import LEARNING_RATE, MOMENTUM, WEIGHT_DECAY
from trainers.common.trainer import Trainer, params_sha256
from trainers.common.token_nets import labels_per_sample
from trainers.jax import SUPPORT
from trainers.jax.models import build, count_params, init_variables

DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16}
HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"
THREADS_ENV = "PJRT_NPROC"   # XLA's DefaultThreadPoolSize() reads it (then NPROC, then affinity)
BATCH_AXIS = "batch"
# how the XLA CPU client names its intra-op pool's threads (tsl prefixes "tf_")
EIGEN_THREAD = "XLAEigen"


def with_flag(flags, flag, value):
    """XLA_FLAGS `flags` with `flag`=`value`, replacing that flag where it is set already and
    keeping every other flag."""
    kept = [f for f in (flags or "").split() if f.split("=", 1)[0] != flag]
    return " ".join(kept + ["%s=%s" % (flag, value)])


def configure_xla(cfg, environ=None):
    """Set what XLA reads when its backend starts: the CPU thread pool's size (--threads), the
    number of host devices for CPU replicas, and the CPU platform for a run off GPUs."""
    environ = os.environ if environ is None else environ
    wanted = dict(environ)
    wanted[THREADS_ENV] = str(cfg.threads)
    if cfg.cpu_replicas:
        wanted["XLA_FLAGS"] = with_flag(environ.get("XLA_FLAGS"), HOST_DEVICES_FLAG, cfg.devices)
    from jax._src import xla_bridge
    if xla_bridge.backends_are_initialized():
        if wanted != dict(environ):  # started already, and not as this run needs it
            raise RuntimeError("JAX's backend started before the run configured it (threads, "
                               "devices); nothing may use a device before the trainer's first "
                               "hook")
        return
    environ.update(wanted)
    if not cfg.on_gpu:
        jax.config.update("jax_platforms", "cpu")


def run_devices(cfg):
    """The devices this run trains on: the first cfg.devices GPUs, or the host's devices."""
    found = jax.devices("gpu" if cfg.on_gpu else "cpu")
    if len(found) < cfg.devices:
        raise Unsupported("--gpus %d needs %d %s; JAX %s sees %d" % (
            cfg.gpus, cfg.devices, "GPUs" if cfg.on_gpu else "host devices", jax.__version__,
            len(found)))
    return found[:cfg.devices]


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
        self.devices = None
        self.replicated = None
        self.sharded = None

    def gpus_visible(self, cfg):
        configure_xla(cfg)
        try:
            return len(jax.devices("gpu")), "JAX %s" % jax.__version__
        except RuntimeError:  # no GPU backend: the CPU jaxlib, or no CUDA plugin that loads
            return 0, "JAX %s (no GPU backend: install jax[cuda12])" % jax.__version__

    def gpu_capabilities(self, cfg):
        found = []
        for device in jax.devices("gpu")[:cfg.gpus]:
            cap = getattr(device, "compute_capability", None)
            if not cap:
                return None
            found.append((device.device_kind, cap))
        return found

    def preflight(self, cfg):
        configure_xla(cfg)

    def setup(self, cfg):
        configure_xla(cfg)
        self.devices = run_devices(cfg)
        mesh = Mesh(np.array(self.devices), (BATCH_AXIS,))
        self.replicated = NamedSharding(mesh, PartitionSpec())
        self.sharded = NamedSharding(mesh, PartitionSpec(BATCH_AXIS))
        model = build(cfg.model, cfg.input_shape, cfg.classes, dtype=DTYPES[cfg.precision], network=cfg.network)
        variables = init_variables(model, cfg.input_shape, seed=cfg.seed)
        params = variables["params"]
        stats = dict((k, v) for k, v in variables.items() if k != "params")
        optimizer = optax.inject_hyperparams(_optimizer)(learning_rate=_rate(LEARNING_RATE))
        self.model = model
        self.state = jax.device_put(
            {"params": params, "stats": stats, "opt": optimizer.init(params),
             "key": jax.random.fold_in(jax.random.PRNGKey(cfg.seed), cfg.rank)},
            self.replicated)

        def train_step(state, images, labels):
            key, dropout_key = jax.random.split(state["key"])
            if images.ndim == 4:  # a sequence network's token ids stay as they are
                images = jnp.transpose(images, (0, 2, 3, 1))
            labels = labels.reshape(-1)  # a sequence network's: one per position

            def loss_fn(params):
                # BatchNorm's statistics and the mean are over the global batch, all devices'
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
            if images.ndim == 4:  # a sequence network's token ids stay as they are
                images = jnp.transpose(images, (0, 2, 3, 1))
            logits = model.apply(dict(state["stats"], params=state["params"]), images, train=False)
            return logits.astype(jnp.float32)

        self.eval_step = jax.jit(eval_step)
        if cfg.phase != "inference":  # inference compiles eval_step alone, at its first batch
            self._compile_train(train_step, cfg)
        names = [d.device_kind for d in self.devices] if cfg.on_gpu else [cpu_name()] * len(self.devices)
        return {"params": count_params(params), "devices": names,
                "version": jax.__version__, "build": build_info(cfg, self.devices)}

    def _compile_train(self, train_step, cfg):
        self.train_step = jax.jit(
            train_step, donate_argnums=0,
            in_shardings=(self.replicated, self.sharded, self.sharded),
            out_shardings=(self.replicated, self.replicated)).lower(
            self.state, *_batch_shapes(cfg)).compile()

    def to_batch(self, images, labels):
        # JAX's default integers are 32-bit: convert here (token ids too), outside the timed step
        kind = np.int32 if images.dtype.kind == "i" else np.float32
        return np.ascontiguousarray(images, dtype=kind), labels.astype(np.int32)

    def step(self, batch):
        # the pool's per-device batch goes to every device (the module's docstring)
        return self.train_on([batch] * len(self.devices))

    def train_on(self, shards):
        """One step on one (images, labels) host batch per device, in device order: the global
        batch is their concatenation, each device's shard copied to it here."""
        images = self._global([s[0] for s in shards])
        labels = self._global([s[1] for s in shards])
        self.state, loss = self.train_step(self.state, images, labels)
        jax.block_until_ready((self.state, loss))
        return float(loss)

    def _global(self, parts):
        shape = (sum(len(p) for p in parts),) + parts[0].shape[1:]
        return jax.make_array_from_single_device_arrays(
            shape, self.sharded, [jax.device_put(p, d) for p, d in zip(parts, self.devices)])

    def set_learning_rate(self, lr):
        self.state["opt"].hyperparams["learning_rate"] = jax.device_put(_rate(lr),
                                                                       self.replicated)

    def predict(self, images):
        images = np.asarray(images)  # a sequence network's token ids stay integers (to_batch)
        return np.asarray(self.eval_step(self.state, images if images.dtype.kind == "i" else images.astype(np.float32)))

    def infer(self, batch):
        return self.predict(batch[0])  # jitted (train=False), np.asarray waits for the result

    def compile_cache(self):
        return jax.config.jax_compilation_cache_dir  # None unless a persistent cache is set

    def param_checksum(self):
        return params_sha256(jax.tree_util.tree_leaves(self.state["params"]))

    def is_out_of_memory(self, exc):
        # jax.errors.JaxRuntimeError (XlaRuntimeError before JAX 0.5), a RuntimeError
        text = str(exc)
        return isinstance(exc, RuntimeError) and (
            "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower())


def _batch_shapes(cfg):
    """The global batch's inputs and labels the step is compiled for: float32 images and a label
    each, or a sequence network's int32 token ids and a language model's label (the next token) per
    position, a classifier's (lstm_imdb's) one per sequence."""
    batch = (cfg.global_batch,) + tuple(cfg.input_shape)
    if len(cfg.input_shape) == 1:
        labels = batch if labels_per_sample(cfg.model, cfg.input_shape) > 1 else batch[:1]
        return jax.ShapeDtypeStruct(batch, jnp.int32), jax.ShapeDtypeStruct(labels, jnp.int32)
    return jax.ShapeDtypeStruct(batch, jnp.float32), jax.ShapeDtypeStruct(batch[:1], jnp.int32)


def xla_cpu_threads():
    """Threads of XLA's CPU intra-op pool, counted by name in /proc (None where there is none
    to read)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    count = 0
    for task in tasks:
        try:
            with open("/proc/self/task/%s/comm" % task) as f:
                count += EIGEN_THREAD in f.read()
        except OSError:  # the thread ended meanwhile
            pass
    return count


def build_info(cfg, devices):
    """What this JAX was built with and runs on, for run_start's `build`."""
    device = devices[0]
    return {
        "jaxlib": jaxlib.__version__,
        "flax": flax.__version__,
        "optax": optax.__version__,
        "platform": device.platform,
        "device_kind": device.device_kind,
        "api": "flax.linen",
        "compute_dtype": jnp.dtype(DTYPES[cfg.precision]).name,
        "data_parallel": "jit over a %d-device mesh, batch sharded, state replicated"
                         % len(devices),
        "batchnorm": "synchronous (statistics over the global batch)",
        # JAX has no eager mode worth measuring (Support refuses --compile eager): always jax.jit
        "compile": {"form": cfg.compile, "compiled": "the training step and the forward pass",
                    "how": "jax.jit (XLA compiles each at its first call; the step ahead of time)"},
        "xla_cpu_threads": xla_cpu_threads(),
        "threads_asked": cfg.threads,
        THREADS_ENV.lower(): os.environ.get(THREADS_ENV),
        "xla_flags": os.environ.get("XLA_FLAGS"),
    }
