"""The MXNet trainer: `python -m trainers.mxnet --model ... --dataset ...`.

Only what is MXNet's own lives here: the networks (models.py, Gluon HybridBlocks) and the
device setup and training step (trainer.py). The command line, data, timing and events are
`trainers.common`'s. Inside this package, `import mxnet` is the absolute import of MXNet
(Python 3 has no implicit relative imports), so the package name shadows nothing. This file
is the framework's declaration, read without importing MXNet (trainers/common/support.py).
"""
from trainers.common.support import REPLICAS, Support

SUPPORT = Support(
    "mxnet",
    inference=True,
    compiles=["eager", "compiled"],  # native and compiled: hybridized (static_alloc); eager: imperative
    cpu=["fp32"],
    gpu=["fp32", "fp16"],
    multi_gpu=REPLICAS,  # one process, one context per GPU (or per CPU replica), a kvstore
    cpu_replicas=True,
    # mxnet-cu112 1.9.1 is built for 5.0, 6.0, 7.0, 8.0 and 8.6
    # (config/distribution/linux_cu112.cmake, MXNET_CUDA_ARCH): Maxwell (5.0) is the oldest
    gpu_build=((5, 0), None),
    notes={
        "fp16": "CPUs lack fast fp16 arithmetic",
        "bf16": "MXNet 1.9's bfloat16 is an experimental CPU-only AMP mode this trainer does "
                "not use",
        "gpus": "a CPU-only build, or no GPU on this node; install mxnet-cu112 or use the "
                "CUDA image",
        "gpu_build": "a Kepler K20m (3.5) needs a CUDA <= 10.2 build (mxnet-cu102)",
    })
