"""The TensorFlow trainer: `python -m trainers.tensorflow --model ... --dataset ...`.

Only what is TensorFlow's own lives here: the networks (models.py, Keras layers) and the
device setup and training step (trainer.py, a tf.function under a tf.distribute strategy).
The command line, data, timing and events are `trainers.common`'s. Inside this package,
`import tensorflow` is the absolute import of TensorFlow (Python 3 has no implicit
relative imports), so the package name shadows nothing. This file is the framework's
declaration, read without importing TensorFlow (trainers/common/support.py).
"""
from trainers.common.support import REPLICAS, Support

SUPPORT = Support(
    "tensorflow",
    inference=True,
    compiles=["eager", "compiled"],  # native: tf.function graph; eager: no tf.function; compiled: XLA
    cpu=["fp32", "bf16"],  # Keras mixed_bfloat16 on the CPU
    gpu=["fp32", "fp16", "bf16"],
    gpu_precision_capability={"bf16": (8, 0)},
    multi_gpu=REPLICAS,  # MirroredStrategy: one replica per GPU (or per logical CPU device)
    cpu_replicas=True,
    # MultiWorkerMirroredStrategy: one worker per node (TF_CONFIG from the node's place), its
    # GPUs as replicas; on the CPU one replica per node
    multi_node=True,
    # TensorFlow's release wheels (2.18 and later, CUDA 12: tensorflow[and-cuda], the NGC
    # images) are built for sm_60, sm_70, sm_80, sm_89 and compute_90 (the repository's
    # .bazelrc), so Pascal (6.0) is the oldest GPU they hold
    gpu_build=((6, 0), None),
    notes={
        "fp16": "CPUs lack fast fp16 arithmetic; use bf16 or fp32",
        "bf16": "bf16 on GPUs needs Ampere (8.0) or newer",
        "gpus": "tensorflow-cpu, or no GPU on this node; install tensorflow[and-cuda] or use "
                "the CUDA image",
        "gpu_build": "Kepler GPUs need a CUDA 11 build of TensorFlow, as build=kepler (2.11.1) is",
    })
