"""The MXNet side of the protocol: device setup, model, and one training step.

Cross-entropy loss and SGD with momentum 0.9 at learning rate 0.01, as the PyTorch trainer.
The network is a Gluon HybridBlock hybridised with static_alloc and static_shape (MXNet's
fast path: one cached graph with its memory planned once), the loss too.

Threads: MXNet's CPU operators run on an OpenMP pool sized from OMP_NUM_THREADS when the
library loads, so MXNet is imported only in `preflight`, after OMP_NUM_THREADS has been set
from --threads (run_start's `build` records it).

Several GPUs are one process with one context per GPU and the 'device' kvstore (gradients
reduced on the GPUs). The pool holds per-device batches (`trainers.common` builds it for one
process) and every context trains on the same host batch: each step still processes the
global batch of images, the inputs just repeat across GPUs.

fp16 on a GPU casts the network to float16 (BatchNorm keeps float32 parameters) and uses
SGD's multi-precision mode (a float32 master copy of the weights); the loss is taken in
float32. fp16 on a CPU and bf16 anywhere are refused: MXNet 1.9's bfloat16 support is an
experimental CPU-only AMP mode this trainer does not use.
"""
import os
import subprocess

from trainers.common.errors import Unsupported, require_gpus
from trainers.common.host import cpu_name
from trainers.common.trainer import Trainer

LEARNING_RATE = 0.01
MOMENTUM = 0.9

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
    framework = "mxnet"

    def __init__(self):
        self.contexts = None
        self.net = None
        self.loss = None
        self.trainer = None
        self.global_batch = None
        self.dtype = "float32"
        self.on_gpu = False

    # ---------------------------------------------------------------- protocol hooks

    def preflight(self, cfg):
        _load_mxnet(cfg.threads)
        if cfg.precision == "bf16":
            raise Unsupported("bf16 is not supported by the MXNet trainer (MXNet 1.9's "
                              "bfloat16 is an experimental CPU-only AMP mode); use fp32, "
                              "or fp16 on a GPU")
        if cfg.gpus > 0:
            if not mx.runtime.Features().is_enabled("CUDA"):
                raise Unsupported(
                    "--gpus %d needs CUDA, but this MXNet %s is a CPU-only build; install "
                    "mxnet-cu112 or use the CUDA image" % (cfg.gpus, mx.__version__))
            require_gpus(cfg.gpus, mx.context.num_gpus(), "MXNet %s" % mx.__version__)
        elif cfg.precision == "fp16":
            raise Unsupported("fp16 on the CPU is not supported by this trainer (CPUs "
                              "lack fast fp16 arithmetic); use fp32")

    def setup(self, cfg):
        _load_mxnet(cfg.threads)
        from trainers.mxnet.models import build, count_params

        mx.random.seed(cfg.seed)
        if cfg.gpus > 0:
            self.contexts = [mx.gpu(i) for i in range(cfg.gpus)]
            devices = _gpu_names(cfg.gpus)
            self.on_gpu = True
        else:
            self.contexts = [mx.cpu()]
            devices = [cpu_name()]
        self.global_batch = cfg.global_batch

        net = build(cfg.model, cfg.input_shape, cfg.classes)
        params = count_params(net)
        net.initialize(mx.init.Xavier(), ctx=self.contexts)
        optimizer_params = {"learning_rate": LEARNING_RATE, "momentum": MOMENTUM}
        if cfg.precision == "fp16":
            self.dtype = "float16"
            net.cast("float16")
            optimizer_params["multi_precision"] = True
        net.hybridize(static_alloc=True, static_shape=True)
        self.loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        self.loss.hybridize(static_alloc=True, static_shape=True)
        self.trainer = mx.gluon.Trainer(net.collect_params(), "sgd", optimizer_params,
                                        kvstore="device")
        self.net = net
        return {"params": params, "devices": devices, "version": mx.__version__,
                "build": build_info(self.contexts)}

    def to_batch(self, images, labels):
        # host (CPU) arrays; the copy to each GPU is part of the timed step
        return (mx.nd.array(images, ctx=mx.cpu(), dtype=self.dtype),
                mx.nd.array(labels, ctx=mx.cpu(), dtype="float32"))

    def step(self, batch):
        images, labels = batch
        if self.on_gpu:
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

    def is_out_of_memory(self, exc):
        # MXNet reports both as MXNetError: "cudaMalloc retry failed: out of memory" on a
        # GPU, "Failed to allocate CPU Memory" on the host
        text = str(exc).lower()
        return ("out of memory" in text or "failed to allocate" in text
                or ("cudamalloc" in text and "failed" in text))

    def teardown(self):
        if mx is not None:
            mx.nd.waitall()


def _gpu_names(n):
    """GPU model names from nvidia-smi (MXNet has no call for them); 'gpu(i)' otherwise."""
    try:
        out = subprocess.check_output(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            stderr=subprocess.STDOUT, universal_newlines=True, timeout=30)
        names = [line.strip() for line in out.splitlines() if line.strip()]
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible:
            try:
                names = [names[int(i)] for i in visible.split(",") if i.strip()]
            except (ValueError, IndexError):
                pass
        if len(names) >= n:
            return names[:n]
    except (OSError, subprocess.SubprocessError):
        pass
    return ["gpu(%d)" % i for i in range(n)]


def build_info(contexts):
    """What this MXNet was built with and runs on, for run_start's `build`."""
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
        "hybridize": {"static_alloc": True, "static_shape": True},
        "kvstore": "device" if len(contexts) > 1 else None,
        "contexts": [str(c) for c in contexts],
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "engine": os.environ.get("MXNET_ENGINE_TYPE", "ThreadedEnginePerDevice"),
    }
    return info
