"""The CNTK trainer: `python -m trainers.cntk --model ... --dataset ...` (Python 3.6).

Only what is CNTK's own lives here: the networks (models.py, cntk.layers) and the device
setup and training step (trainer.py, a cntk.Trainer with momentum SGD). The command line,
data, timing and events are `trainers.common`'s. Several GPUs train under MPI, one process
per GPU started by `mpiexec` (mpi.py), as CNTK's data-parallel learner requires. Inside
this package `import cntk` is the absolute import of CNTK. This file is the framework's
declaration, read without importing CNTK (trainers/common/support.py).
"""
from trainers.common.support import MPI_RANKS, Support

SUPPORT = Support(
    "cntk",
    inference=True,
    cpu=["fp32"],
    gpu=["fp32", "fp16"],
    gpu_precision_capability={"fp16": (6, 0)},
    multi_gpu=MPI_RANKS,
    # CPU ranks under the venv's OpenMPI 4 stand-in libraries: enough to check the launch and
    # the data-parallel learner, not a supported way to train (mpi.py)
    cpu_replicas=True,
    # the cntk-gpu image (containers/cntk/gpu.yaml, base cuda10: CUDA 10.0, cuDNN 7,
    # OpenMPI 1.10) covers compute capability 3.0 up to 7.5 (K20m and P100, not Ampere or newer)
    gpu_build=((3, 0), (7, 5)),
    without=["gpt"],  # the Transformer: its note says why
    notes={
        "gpt": "CNTK 2.7's layers library has no multi-head attention; a hand-built one from its primitives is not written here",
        "compile": "CNTK builds one static graph from its Python definition, with no compiler "
                   "option nor an eager mode to switch to",
        "fp16": "CNTK has no CPU fp16 kernels, and fp16 training needs Pascal or newer",
        "bf16": "CNTK has no bfloat16",
        "gpus": "the venv's CNTK is CPU-only; CNTK's GPU build is cntk-gpu, CUDA 10.0: "
                "orchestrator images def cntk --base cuda10",
        "gpu_build_newer": "CNTK 2.7 is the last release: its CUDA 10.0 build predates Ampere",
    })
