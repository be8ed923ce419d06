"""Entry point: `python -m trainers.mxnet` (arguments in docs/protocol.md)."""
import sys

from trainers.common.protocol import run


def make_trainer():
    # MXNet itself is imported later, in the trainer's preflight, once --threads is known:
    # its OpenMP pool reads OMP_NUM_THREADS when the library loads
    from trainers.mxnet.trainer import MXNetTrainer
    return MXNetTrainer()


if __name__ == "__main__":
    sys.exit(run(make_trainer, module="trainers.mxnet"))
