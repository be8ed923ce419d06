"""The PyTorch trainer: `python -m trainers.torch --model ... --dataset ...`.

Only what is PyTorch's own lives here: the networks (models.py) and the device setup and
training step (trainer.py). The command line, data, timing and events are
`trainers.common`'s. This package's name shadows nothing: inside it, `import torch` is the
absolute import of PyTorch. This file is the framework's declaration, read without importing
PyTorch (trainers/common/support.py).
"""
from trainers.common.support import PROCESS_PER_DEVICE, Support

SUPPORT = Support(
    "torch",
    inference=True,
    compiles=["eager", "compiled"],  # native is eager; compiled: torch.compile (trainer.COMPILE_MODE)
    cpu=["fp32", "bf16"],
    gpu=["fp32", "fp16", "bf16"],
    gpu_precision_capability={"bf16": (8, 0)},
    multi_gpu=PROCESS_PER_DEVICE,  # DistributedDataParallel: NCCL on GPUs, gloo for CPU replicas
    cpu_replicas=True,
    multi_node=True,  # the same DDP ranks across nodes: the rendezvous on the first node
    # the GPU build (containers/torch/gpu.yaml, base cuda12: PyPI's CUDA 12 wheel); NGC's
    # release notes state compute capability 6.0 (Pascal) and later for CUDA 12 PyTorch
    gpu_build=((6, 0), None),
    notes={
        "fp16": "CPUs lack fast fp16 arithmetic, and a slow emulation would say nothing about "
                "the framework",
        "bf16": "bf16 on GPUs needs Ampere (8.0) or newer",
        "gpus": "a CPU-only build, or no GPU on this node; the CUDA build: orchestrator "
                "images def torch --base cuda12",
        "gpu_build": "PyTorch's builds after 1.12 carry no sm_35 (Kepler): a K20m needs "
                     "torch 1.12's CUDA 10.2 build",
    })
