"""The MXNet side of the protocol: device setup, model, and one training step.

The recipe is trainers/common/recipe.py's (cross-entropy, SGD with momentum). The network is a Gluon HybridBlock hybridised with static_alloc and static_shape (MXNet's
fast path: one cached graph with its memory planned once), the loss too.

Threads: MXNet's CPU operators run on an OpenMP pool sized from OMP_NUM_THREADS when the
library loads, so MXNet is imported only in `preflight`, after OMP_NUM_THREADS has been set
from --threads (run_start's `build` records it).

Several GPUs are one process with one context per GPU and the 'device' kvstore (gradients
reduced on the GPUs); CPU replicas (trainers.common.support.CPU_REPLICAS_ENV) are as many
CPU contexts with the 'local' kvstore. The pool holds per-device batches (`trainers.common` builds it for one
process) and every context trains on the same host batch: each step still processes the
global batch of images, the inputs just repeat across GPUs.

fp16 on a GPU casts the network to float16 (BatchNorm keeps float32 parameters) and uses
SGD's multi-precision mode (a float32 master copy of the weights); the loss is taken in
float32. What runs where is declared in __init__.py.
"""
import os

from trainers.common.gpus import gpu_names, nvidia_smi
from trainers.common.host import cpu_name
from trainers.common.recipe import LEARNING_RATE, MOMENTUM
from trainers.common.trainer import Trainer, params_sha256
from trainers.mxnet import SUPPORT

mx = None  # imported by _load_mxnet, once the thread count is known


def _load_mxnet(threads):
    """Import MXNet with its OpenMP pool sized to `threads` (only the first import counts)."""
    global mx
    if mx is None:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        import mxnet
        mx = mxnet
    return mx


class MXNetTrainer(Trainer):
    support = SUPPORT

    def __init__(self):
        self.contexts = None
        self.net = None
        self.loss = None
        self.trainer = None
        self.global_batch = None
        self.dtype = "float32"
        self.on_gpu = False
        self.kvstore = None

    # ---------------------------------------------------------------- protocol hooks

    def preflight(self, cfg):
        _load_mxnet(cfg.threads)

    def gpus_visible(self, cfg):
        _load_mxnet(cfg.threads)
        if not mx.runtime.Features().is_enabled("CUDA"):
            return 0, "MXNet %s (a CPU-only build)" % mx.__version__
        return mx.context.num_gpus(), "MXNet %s" % mx.__version__

    def gpu_capabilities(self, cfg):
        return nvidia_smi(cfg.gpus, capabilities=True)

    def setup(self, cfg):
        _load_mxnet(cfg.threads)
        from trainers.mxnet.models import build, count_params

        mx.random.seed(cfg.seed)
        if cfg.on_gpu:
            self.contexts = [mx.gpu(i) for i in range(cfg.gpus)]
            devices = gpu_names(cfg.gpus)
            self.on_gpu = True
        else:
            self.contexts = [mx.cpu(i) for i in range(cfg.devices)]
            devices = [cpu_name()] * cfg.devices
        self.global_batch = cfg.global_batch

        net = build(cfg.model, cfg.input_shape, cfg.classes, cfg.network)
        params = count_params(net)
        net.initialize(mx.init.Xavier(), ctx=self.contexts)
        optimizer_params = {"learning_rate": LEARNING_RATE, "momentum": MOMENTUM}
        if cfg.precision == "fp16":
            self.dtype = "float16"
            net.cast("float16")
            optimizer_params["multi_precision"] = True
        self.loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        hybrid = cfg.compile != "eager"  # native is compiled: hybridized as always
        if hybrid:
            net.hybridize(static_alloc=True, static_shape=True)
            self.loss.hybridize(static_alloc=True, static_shape=True)
        self.kvstore = "device" if self.on_gpu else "local"
        self.trainer = mx.gluon.Trainer(net.collect_params(), "sgd", optimizer_params,
                                        kvstore=self.kvstore)
        self.net = net
        return {"params": params, "devices": devices, "version": mx.__version__,
                "build": build_info(self.contexts, self.kvstore, cfg.compile)}

    def to_batch(self, images, labels):
        # host (CPU) arrays; the copy to each GPU is part of the timed step
        # (a sequence network's token ids stay float32: float16 holds whole numbers to 2048 only)
        return (mx.nd.array(images, ctx=mx.cpu(), dtype=self.dtype if images.ndim == 4 else "float32"),
                mx.nd.array(labels, ctx=mx.cpu(), dtype="float32"))

    def step(self, batch):
        images, labels = batch
        if len(self.contexts) > 1 or self.on_gpu:
            xs = [images.as_in_context(c) for c in self.contexts]
            ys = [labels.as_in_context(c) for c in self.contexts]
        else:
            xs, ys = [images], [labels]
        with mx.autograd.record():
            losses = [self.loss(self.net(x).astype("float32", copy=False), y)
                      for x, y in zip(xs, ys)]
        mx.autograd.backward(losses)
        self.trainer.step(self.global_batch)  # gradients are sums: divide by the batch
        total = sum(l.sum().asscalar() for l in losses)
        mx.nd.waitall()  # the update too, not only the loss, has finished
        return float(total) / self.global_batch

    def param_checksum(self):
        # the trained parameters (not BatchNorm's running statistics), as the first context
        # holds them: the kvstore gives every context the same update
        return params_sha256(p.data(self.contexts[0]).asnumpy()
                             for p in self.net.collect_params().values() if p.grad_req != "null")

    def set_learning_rate(self, lr):
        self.trainer.set_learning_rate(lr)

    def predict(self, images):
        # outside autograd.record(): inference mode (no dropout, BatchNorm's running statistics)
        x = mx.nd.array(images, ctx=self.contexts[0], dtype=self.dtype)
        return self.net(x).astype("float32").asnumpy()

    def infer(self, batch):
        # outside autograd.record(), autograd off: predict mode (no dropout, BatchNorm's running
        # statistics); asnumpy() waits for the engine
        x = batch[0].as_in_context(self.contexts[0])
        return self.net(x).astype("float32").asnumpy()

    def is_out_of_memory(self, exc):
        # MXNet reports both as MXNetError: "cudaMalloc retry failed: out of memory" on a
        # GPU, "Failed to allocate CPU Memory" on the host
        text = str(exc).lower()
        return ("out of memory" in text or "failed to allocate" in text
                or ("cudamalloc" in text and "failed" in text))

    def teardown(self):
        if mx is not None:
            mx.nd.waitall()


def build_info(contexts, kvstore, form="native"):
    """What this MXNet was built with and runs on, for run_start's `build`."""
    hybrid = form != "eager"
    features = mx.runtime.Features()
    enabled = sorted(name for name, f in features.items() if f.enabled)
    info = {
        "cuda": features.is_enabled("CUDA"),
        "cudnn": features.is_enabled("CUDNN"),
        "nccl": features.is_enabled("NCCL"),
        "mkldnn": features.is_enabled("MKLDNN"),
        "blas": next((name for name in ("BLAS_MKL", "BLAS_OPEN", "BLAS_ATLAS", "BLAS_APPLE")
                      if features.is_enabled(name)), None),
        "openmp": features.is_enabled("OPENMP"),
        "features": enabled,
        "hybridize": {"static_alloc": True, "static_shape": True} if hybrid else None,
        "compile": {"form": form, "compiled": "the network and the loss" if hybrid else None,
                    "how": "hybridize(static_alloc=True, static_shape=True): one cached symbolic "
                           "graph" if hybrid else "eager: imperative Gluon, op by op"},
        "kvstore": kvstore if len(contexts) > 1 else None,
        "contexts": [str(c) for c in contexts],
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "engine": os.environ.get("MXNET_ENGINE_TYPE", "ThreadedEnginePerDevice"),
    }
    return info
