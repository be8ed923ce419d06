"""The Caffe trainer: `python -m trainers.caffe --model ... --dataset ...`.

Only what is Caffe's own lives here: the networks as Caffe nets (models.py), the solver,
device setup and training step (trainer.py), the multi-GPU path through the `caffe train`
tool (multigpu.py), and how Caffe's aborts read (trainer.py; the run is isolated in a child
process by trainers/common/launch.py). The command line, data, timing and events are
`trainers.common`'s. Caffe itself is built from source into the trainer's environment
(containers/caffe/). Inside this package, `import caffe` is the absolute import of pycaffe.
This file is the framework's declaration, read without importing Caffe
(trainers/common/support.py).
"""
from trainers.common.support import EXTERNAL_TOOL, Support

SUPPORT = Support(
    "caffe",
    inference=True,
    isolate=True,  # a failed CHECK aborts the process below anything Python catches (trainer.py)
    cpu=["fp32"],
    gpu=["fp32"],
    multi_gpu=EXTERNAL_TOOL,  # `caffe train --gpu=0,1,...` (NCCL), timed from its log
    # the GPU build (containers/caffe/gpu.yaml, base cuda10: CUDA 10.0, cuDNN 7) compiles sm_35,
    # sm_60 and sm_70 kernels: Kepler (K20m) and newer
    gpu_build=((3, 5), None),
    without=["gpt"],  # the Transformer: its note says why
    notes={
        "gpt": "BVLC Caffe has no attention layer (no batched matrix product of two blobs, no causal mask): it has LSTM, not the Transformer",
        "compile": "Caffe runs its prototxt net layer by layer in C++: there is no compiler to "
                   "switch on, nor another form to switch to",
        "fp16": "BVLC Caffe has no fp16 solver",
        "bf16": "BVLC Caffe has no bf16 solver",
        "gpus": "the venv's build is CPU-only; the CUDA build: orchestrator images def caffe "
                "--base cuda10",
    })
