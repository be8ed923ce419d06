"""Entry point: `python -m trainers.numpy` (arguments in docs/protocol.md)."""
import sys

from trainers.common.protocol import run


def make_trainer():
    from trainers.numpy.trainer import NumpyTrainer
    return NumpyTrainer()


if __name__ == "__main__":
    sys.exit(run(make_trainer, module="trainers.numpy"))
