"""The numpy trainer: `python -m trainers.numpy --model lenet ...`, the reference framework.

Caffe's LeNet written out in numpy (models.py: im2col convolutions, ceil-mode max pooling,
forward and backward by hand) and trained with the common recipe (trainer.py). It needs
nothing but numpy, so it runs in any interpreter the trainers support (the orchestrator's
own, a Python 3.6 one) and drives the paths of `trainers.common` that need no framework:
the run loop, the launcher (CPU replicas are one process per replica), relaying and rank
failures. It is also the example docs/adding-a-framework.md follows: a framework is this
package, containers/numpy/ and conf/framework/numpy.yaml. This file is its declaration.
"""
from trainers.common.support import PROCESS_PER_DEVICE, Support

SUPPORT = Support(
    "numpy",
    inference=True,
    cpu=["fp32"],
    gpu=[],
    multi_gpu=PROCESS_PER_DEVICE,
    cpu_replicas=True,
    models=["lenet"],
    notes={
        "fp16": "numpy computes in fp32 here",
        "bf16": "numpy has no bfloat16",
        "gpus": "numpy has no GPU arrays",
        "models": "numpy's reference is Caffe's LeNet only; the ImageNet, CIFAR, fully connected, "
                  "recurrent and Transformer networks are left to the frameworks with a graph compiler",
    })
