"""Entry point: `python -m trainers.caffe` (arguments in docs/protocol.md).

Its Support declares `isolate` (trainers/caffe/__init__.py): `trainers.common.protocol.run`
trains in a child process and reports a Caffe abort from its log.
"""
import sys

from trainers.common.protocol import run


def make_trainer():
    # imported here, after run() has moved fd 1 aside; caffe itself is imported only when
    # needed, once the thread count (read by OpenBLAS at load time) is known
    from trainers.caffe.trainer import CaffeTrainer
    return CaffeTrainer()


if __name__ == "__main__":
    sys.exit(run(make_trainer, module="trainers.caffe"))
