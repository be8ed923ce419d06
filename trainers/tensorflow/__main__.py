"""Entry point: `python -m trainers.tensorflow` (arguments in docs/protocol.md)."""
import sys

from trainers.common.protocol import run


def make_trainer():
    # imported here, after run() has moved fd 1 aside, so that anything TensorFlow prints
    # while loading goes to stderr and not into the event stream
    from trainers.tensorflow.trainer import TensorFlowTrainer
    return TensorFlowTrainer()


if __name__ == "__main__":
    sys.exit(run(make_trainer, module="trainers.tensorflow"))
