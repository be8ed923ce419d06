"""A site trainer whose ranks never exchange gradients, but say what they hold: the numpy
framework (each CPU replica trains its own copy on its own shard, as trainers/numpy does) with
a parameter checksum per rank. A run of it on two replicas really ends with two different
models, which is what `ranks_diverged` (tests/test_multinode_faults.py) is for.

    TRAINER_CPU_REPLICAS=1 python -m tests.unsynced_trainer --gpus 2 --model lenet ...

With UNSYNCED_BAD_RANK=N, rank N sends a number for its checksum (a malformed params event),
for the job to skip and name.
"""
import os
import sys

from trainers.common.support import PROCESS_PER_DEVICE, Support

#: numpy's, but taking --gpus N (as CPU replicas: TRAINER_CPU_REPLICAS=1), which the orchestrator
#: asks of a GPU framework only (it has no GPU arrays, so only replicas ever run), and --nodes N
#: (each node's rank trains alone: there is nothing to meet at)
SUPPORT = Support("numpy", cpu=["fp32"], gpu=["fp32"], multi_gpu=PROCESS_PER_DEVICE,
                  cpu_replicas=True, multi_node=True, models=["lenet"])


def make_trainer():
    """The numpy trainer, reporting its parameters' checksum after the timed steps."""
    from trainers.common.trainer import params_sha256
    from trainers.numpy.trainer import NumpyTrainer

    class Unsynced(NumpyTrainer):
        support = SUPPORT

        def param_checksum(self):
            if os.environ.get("UNSYNCED_BAD_RANK") == os.environ.get("TRAINER_RANK", "0"):
                return 12345
            return params_sha256(self.model.params[name] for name in sorted(self.model.params))

    return Unsynced()


if __name__ == "__main__":
    from trainers.common.protocol import run
    # the trainer from the module imported by name: its SUPPORT is the one the run reads by name
    from tests.unsynced_trainer import make_trainer as named
    sys.exit(run(named, module="tests.unsynced_trainer"))
