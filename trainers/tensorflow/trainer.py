"""The TensorFlow side of the protocol: device setup, model, and one training step.

The recipe is trainers/common/recipe.py's (cross-entropy, SGD with momentum). The step is one tf.function (a graph, not eager execution: TensorFlow's fast path) run
under a tf.distribute strategy: the default one on the CPU, MirroredStrategy over the GPUs
(one process, one replica per GPU, NCCL all-reduce). XLA is off by default, as in a plain
tf.function; ORCH_TF_XLA=1 in the environment compiles the step with XLA (the protocol's
arguments are the same for every framework, so this switch is an environment variable),
and run_start's `build` records which it was.

CPU replicas (trainers.common.support.CPU_REPLICAS_ENV) are the same MirroredStrategy over
as many logical CPU devices. Under several devices the pool holds per-replica batches (`trainers.common` builds it for
one process), and every replica trains on the same host batch: each step still processes
the global batch of images, the inputs just repeat across replicas.

Across nodes (`--nodes N`, cfg.node) each node runs one worker process and the strategy is
MultiWorkerMirroredStrategy: TF_CONFIG names every node's worker (`tf_config`), each worker
keeps one replica per GPU (one on the CPU: MWMS gives a worker on the CPU one device, so CPU
replicas across nodes are refused), and the same step all-reduces across workers (gRPC ring
collectives on the CPU, NCCL on GPUs).

fp16 and bf16 are Keras mixed precision (`mixed_float16` with loss scaling on a GPU,
`mixed_bfloat16` on a CPU or an Ampere-or-newer GPU), as declared in __init__.py.
"""
import json
import os

import tensorflow as tf

from trainers.common.errors import InvalidArgument, Unsupported
from trainers.common.host import cpu_name
from trainers.common.recipe import LEARNING_RATE, MOMENTUM
from trainers.common.support import refusal
from trainers.common.trainer import Trainer, params_sha256
from trainers.common.token_nets import labels_per_sample
from trainers.tensorflow import SUPPORT
from trainers.tensorflow.models import build, count_params, keras

XLA_ENV = "ORCH_TF_XLA"
POLICIES = {"fp32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}


def worker_port(node, index):
    """The port of worker `index`'s TensorFlow server (on node.addrs[index]). Each worker needs
    its own: the nodes of a test cluster share one address (127.0.0.1), so one port for all
    would collide. node.port itself is left alone: it is the rendezvous port that
    trainers.common.launch hands every rank as MASTER_PORT (a torch-style rank 0 listens on it)."""
    return node.port + 1 + index


def tf_config(node):
    """TF_CONFIG for this node's worker of a run across nodes: one worker per node, in node-rank
    order; MultiWorkerMirroredStrategy reads it when it is made."""
    if worker_port(node, node.nodes - 1) > 65535:
        raise InvalidArgument("the rendezvous port %d leaves no room for %d TensorFlow workers "
                              "(ports port+1 .. port+%d); choose a port below %d"
                              % (node.port, node.nodes, node.nodes, 65536 - node.nodes))
    workers = ["%s:%d" % (addr, worker_port(node, i)) for i, addr in enumerate(node.addrs)]
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": node.rank}}


def xla_requested(environ=None):
    """Whether the environment asks for an XLA-compiled step (ORCH_TF_XLA=1/true/yes/on)."""
    value = (os.environ if environ is None else environ).get(XLA_ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


class TensorFlowTrainer(Trainer):
    support = SUPPORT

    def __init__(self):
        self.strategy = None
        self.model = None
        self.optimizer = None
        self.train_step = None
        self.on_gpu = False
        self.xla = False
        self.eager = False
        self.forward = None

    # ---------------------------------------------------------------- protocol hooks

    def gpus_visible(self, cfg):
        if not tf.test.is_built_with_cuda():
            return 0, "TensorFlow %s (a CPU-only build)" % tf.__version__
        return len(tf.config.list_physical_devices("GPU")), "TensorFlow %s" % tf.__version__

    def gpu_capabilities(self, cfg):
        found = []
        for gpu in tf.config.list_physical_devices("GPU")[:cfg.gpus]:
            details = tf.config.experimental.get_device_details(gpu)
            if not details.get("compute_capability"):
                return None
            found.append((details.get("device_name", gpu.name),
                          tuple(details["compute_capability"])))
        return found

    def preflight(self, cfg):
        if cfg.node:
            tf_config(cfg.node)  # a port range that does not fit is refused before any data
        if cfg.node and cfg.cpu_replicas and cfg.devices > 1:
            raise Unsupported(refusal(
                "tensorflow", "CPU replicas across nodes", "one replica per node on the CPU",
                "MultiWorkerMirroredStrategy gives a worker without GPUs its one CPU device"))

    def setup(self, cfg):
        # the thread pools and visible devices are fixed when TensorFlow's runtime starts,
        # which is the first op: set them before anything runs
        tf.config.threading.set_intra_op_parallelism_threads(cfg.threads)
        tf.config.threading.set_inter_op_parallelism_threads(cfg.threads)
        if cfg.on_gpu:
            gpus = tf.config.list_physical_devices("GPU")[:cfg.gpus]
            tf.config.set_visible_devices(gpus, "GPU")
            details = [tf.config.experimental.get_device_details(g) for g in gpus]
            devices = [d.get("device_name", g.name) for d, g in zip(details, gpus)]
            self.on_gpu = True
        else:
            tf.config.set_visible_devices([], "GPU")
            devices = [cpu_name()] * cfg.devices
        self.strategy = _strategy(cfg)
        keras.utils.set_random_seed(cfg.seed)
        keras.mixed_precision.set_global_policy(POLICIES[cfg.precision])
        # --compile compiled is XLA; native keeps ORCH_TF_XLA's choice; eager runs no tf.function
        self.xla = cfg.compile == "compiled" or (cfg.compile == "native" and xla_requested())
        self.eager = cfg.compile == "eager"

        with self.strategy.scope():
            model = build(cfg.model, cfg.input_shape, cfg.classes, cfg.network)
            optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE, momentum=MOMENTUM)
            if cfg.precision == "fp16":
                optimizer = _loss_scale_optimizer(optimizer)
            optimizer.build(model.trainable_variables)  # slots now, not inside the graph
        self.model, self.optimizer = model, optimizer
        # the loss is the mean over every label: a language model's are one per position
        labels = cfg.global_batch * labels_per_sample(cfg.model, cfg.input_shape)
        self.train_step = self._make_step(labels, cfg.precision == "fp16")
        return {"params": count_params(model), "devices": devices, "version": tf.__version__,
                "build": build_info(self.strategy, self.xla, self.eager)}

    def to_batch(self, images, labels):
        # NCHW -> NHWC on the host, once per pooled batch; the tensors stay in host memory
        # so that the copy to the GPU happens inside the timed step
        with tf.device("/cpu:0"):
            # (a sequence network's token ids as they are)
            return (tf.constant(images.transpose(0, 2, 3, 1) if images.ndim == 4 else images),
                    tf.constant(labels))

    def step(self, batch):
        loss = self.train_step(batch[0], batch[1])
        if self.on_gpu:
            tf.test.experimental.sync_devices()
        return float(loss.numpy())

    def param_checksum(self):
        # a mirrored variable reads as its first replica's value: the replicas hold one value
        return params_sha256(v.numpy() for v in self.model.trainable_variables)

    def set_learning_rate(self, lr):
        # a variable the compiled step reads, so no retracing
        self.optimizer.learning_rate.assign(lr)

    def predict(self, images):
        return self.infer((tf.constant(images.transpose(0, 2, 3, 1) if images.ndim == 4 else images),))

    def infer(self, batch):
        # model(x, training=False): BatchNorm's running statistics, no dropout; numpy() waits
        if self.forward is None:
            model = self.model
            forward = lambda x: tf.cast(model(x, training=False), tf.float32)  # noqa: E731
            self.forward = forward if self.eager else tf.function(
                forward, jit_compile=self.xla, reduce_retracing=True)
        return self.forward(batch[0]).numpy()

    def is_out_of_memory(self, exc):
        if isinstance(exc, tf.errors.ResourceExhaustedError):
            return True
        text = str(exc).lower()
        return "out of memory" in text or "oom when allocating" in text

    def teardown(self):
        self.train_step = self.forward = None
        keras.backend.clear_session()

    # ---------------------------------------------------------------- the step

    def _make_step(self, global_labels, scale_loss):
        model, optimizer, strategy = self.model, self.optimizer, self.strategy
        variables = model.trainable_variables

        def loss_and_grads(images, labels):
            with tf.GradientTape() as tape:
                logits = model(images, training=True)  # a sequence network's: flat, one per label
                logits = tf.reshape(logits, [-1, tf.shape(logits)[-1]])
                per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=tf.reshape(labels, [-1]), logits=tf.cast(logits, tf.float32))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_labels)
                scaled = _scaled(optimizer, loss) if scale_loss else loss
            grads = tape.gradient(scaled, variables)
            if scale_loss and hasattr(optimizer, "get_unscaled_gradients"):  # Keras 2
                grads = optimizer.get_unscaled_gradients(grads)
            return loss, grads

        replicas = strategy.num_replicas_in_sync
        if self.xla and replicas > 1:
            # the cross-replica update cannot sit inside an XLA cluster: compile the forward
            # and backward pass, leave the all-reduce and update to the graph around it
            loss_and_grads = tf.function(loss_and_grads, jit_compile=True)

        def replica_step(images, labels):
            loss, grads = loss_and_grads(images, labels)
            optimizer.apply_gradients(zip(grads, variables))
            return loss

        def train_step(images, labels):
            per_replica = strategy.run(replica_step, args=(images, labels))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        if self.eager:
            return train_step  # op by op: no tf.function around the step
        return tf.function(train_step, jit_compile=bool(self.xla and replicas == 1),
                           reduce_retracing=True)


def _strategy(cfg):
    """The tf.distribute strategy of this run; made after the visible devices are set and
    before any op runs."""
    if cfg.node:
        # TF_CONFIG is read when the strategy is made; the worker trains on its visible GPUs
        # (on the CPU: its one CPU device)
        os.environ["TF_CONFIG"] = json.dumps(tf_config(cfg.node))
        return tf.distribute.MultiWorkerMirroredStrategy()
    if cfg.on_gpu:
        return tf.distribute.MirroredStrategy(devices=["/gpu:%d" % i for i in range(cfg.gpus)])
    if cfg.cpu_replicas:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(cfg.devices)])
        return tf.distribute.MirroredStrategy(
            devices=["/cpu:%d" % i for i in range(cfg.devices)],
            cross_device_ops=tf.distribute.ReductionToOneDevice())
    return tf.distribute.get_strategy()  # the default: this process's CPU


def _loss_scale_optimizer(optimizer):
    cls = getattr(keras.optimizers, "LossScaleOptimizer", None)  # Keras 3
    if cls is None:
        cls = keras.mixed_precision.LossScaleOptimizer  # Keras 2 (TensorFlow <= 2.15)
    return cls(optimizer)


def _scaled(optimizer, loss):
    scale = getattr(optimizer, "scale_loss", None) or optimizer.get_scaled_loss
    return scale(loss)


def build_info(strategy, xla, eager=False):
    """What this TensorFlow was built with and runs on, for run_start's `build`."""
    raw = dict(tf.sysconfig.get_build_info())
    info = {
        "cuda": raw.get("cuda_version") if raw.get("is_cuda_build") else None,
        "cudnn": raw.get("cudnn_version") if raw.get("is_cuda_build") else None,
        "cuda_compute_capabilities": raw.get("cuda_compute_capabilities"),
        "is_cuda_build": bool(raw.get("is_cuda_build")),
        "is_rocm_build": bool(raw.get("is_rocm_build")),
        "git_version": tf.version.GIT_VERSION,
        "keras": getattr(keras, "__version__", None),
        "xla": bool(xla),
        "xla_env": XLA_ENV,
        "graph": None if eager else "tf.function",
        "compile": {"form": "eager" if eager else "compiled" if xla else "native",
                    "compiled": None if eager else "the training step and the forward pass",
                    "how": "eager: op by op" if eager else
                    "tf.function(jit_compile=True): XLA" if xla else "tf.function: a graph, no XLA"},
        "strategy": type(strategy).__name__,
        "replicas": strategy.num_replicas_in_sync,
        "mixed_precision_policy": keras.mixed_precision.global_policy().name,
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        # oneDNN (MKL-DNN) kernels are on by default in x86 Linux builds since TF 2.9
        "onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    return info
