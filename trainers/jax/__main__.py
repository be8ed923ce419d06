"""Entry point: `python -m trainers.jax` (arguments in docs/protocol.md)."""
import sys

from trainers.common.protocol import run


def make_trainer():
    # imported here, after run() has moved fd 1 aside, so that anything JAX or XLA prints
    # while loading goes to stderr and not into the event stream
    from trainers.jax.trainer import JaxTrainer
    return JaxTrainer()


if __name__ == "__main__":
    sys.exit(run(make_trainer, module="trainers.jax"))
