"""The JAX trainer: `python -m trainers.jax --model ... --dataset ...`.

Only what is JAX's own lives here: the networks (models.py, Flax Linen modules built from
trainers/common/architectures.py's tables) and the training step (trainer.py, one
`jax.jit`-compiled pure function with Optax's SGD). The command line, data, timing and events
are `trainers.common`'s. Inside this package `import jax` is the absolute import of JAX, so
the package name shadows nothing. This file is the framework's declaration, read without
importing JAX (trainers/common/support.py).
"""
from trainers.common.support import Support

SUPPORT = Support(
    "jax",
    cpu=["fp32", "bf16"],  # bf16: Flax modules computing in bfloat16, parameters in fp32
    gpu=[],
    # data parallelism over jax.devices() (sharding) needs GPUs to be tested: not written yet
    multi_gpu=None,
    cpu_replicas=False,
    multi_node=False,
    notes={
        "fp16": "CPUs lack fast fp16 arithmetic, and XLA's CPU backend emulates it; use bf16 "
                "or fp32",
        "gpus": "the recipe (containers/jax/) installs JAX's CPU build; a GPU build "
                "(jax[cuda12]) and its data-parallel step are not written yet",
        "multi_gpu": "data parallelism over jax.devices() is not written yet",
        "cpu_replicas": "one process trains on the CPU; several devices are not written yet",
        "multi_node": "jax.distributed across nodes is not written yet",
    })
