"""The JAX trainer: `python -m trainers.jax --model ... --dataset ...`.

Only what is JAX's own lives here: the networks (models.py, Flax Linen modules built from
trainers/common/architectures.py's tables) and the training step (trainer.py, one
`jax.jit`-compiled pure function with Optax's SGD, data parallel over a jax.sharding mesh of
the run's devices). The command line, data, timing and events are `trainers.common`'s. Inside
this package `import jax` is the absolute import of JAX, so the package name shadows nothing.
This file is the framework's declaration, read without importing JAX
(trainers/common/support.py).

The GPU side (precisions, gpu_build, containers/jax/gpu.yaml) is declared from JAX's
documentation and the jax[cuda12] wheels' metadata; it has not been run on a GPU here.
"""
from trainers.common.support import REPLICAS, Support

SUPPORT = Support(
    "jax",
    inference=True,
    compiles=["compiled"],  # native is compiled: every step is jax.jit
    cpu=["fp32", "bf16"],  # bf16: Flax modules computing in bfloat16, parameters in fp32
    gpu=["fp32", "bf16"],
    # XLA emulates bfloat16 through float32 before Ampere: it runs, but measures nothing
    gpu_precision_capability={"bf16": (8, 0)},
    # one process, the run's devices as one jax.sharding mesh (GPUs, or XLA host devices)
    multi_gpu=REPLICAS,
    cpu_replicas=True,
    # JAX's CUDA 12 wheels (jax[cuda12], containers/jax/gpu.yaml) run on Maxwell (5.2) and
    # newer, as JAX's installation guide states
    gpu_build=((5, 2), None),
    multi_node=False,
    notes={
        "compile": "JAX's trainer is pure functions under jax.jit; run op by op (jax.disable_jit) "
                   "each primitive is dispatched alone, a debugging mode nobody trains or serves in",
        "fp16": "fp16 training needs loss scaling, which the JAX trainer does not have (and "
                "CPUs lack fast fp16 arithmetic); use bf16 or fp32",
        "bf16": "bf16 on GPUs needs Ampere (8.0) or newer",
        "gpus": "JAX's CPU build, or no GPU on this node; install jax[cuda12] "
                "(containers/jax/gpu.yaml) or use the CUDA image",
        "gpu_build": "JAX's CUDA 12 wheels need compute capability 5.2 (Maxwell) or newer",
        "multi_node": "jax.distributed across nodes is not written yet",
    })
