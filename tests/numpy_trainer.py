"""A site trainer: a trainer module outside trainers/, named by a framework YAML's `trainer:`
key (tests/test_sweep.py and tests/test_slurm.py write such a YAML). It is the numpy
framework (trainers/numpy) under another module name; the orchestrator reads its SUPPORT.

    python -m tests.numpy_trainer --model lenet --dataset synthetic --like mnist ...
"""
import sys

from trainers.numpy import SUPPORT  # noqa: F401  (this module's declaration)

if __name__ == "__main__":
    from trainers.common.protocol import run
    from trainers.numpy.__main__ import make_trainer
    sys.exit(run(make_trainer, module="tests.numpy_trainer"))
