"""Batch arithmetic: how the configured batch size becomes per-device and global batches.

Under `strong` scaling the configured batch is the global one and is split across every
device of the run; under `weak` scaling it is each device's, and the global batch grows with
the devices. A device is a GPU, or on CPU (gpus=0) one process per node. Nodes multiply the
devices the same way GPUs do, so `scaling` means the same across nodes as across GPUs.
"""
from trainers.common.errors import InvalidArgument, Unsupported
from trainers.common.settings import SCALINGS


def split_batch(batch_size, scaling, gpus, nodes=1):
    """Return (global_batch, per_device_batch, devices on each node); raise for an impossible
    split."""
    if batch_size < 1:
        raise InvalidArgument("--batch-size must be at least 1, got %d" % batch_size)
    if gpus < 0:
        raise InvalidArgument("--gpus must be 0 (CPU) or more, got %d" % gpus)
    if nodes < 1:
        raise InvalidArgument("--nodes must be at least 1, got %d" % nodes)
    if scaling not in SCALINGS:
        raise InvalidArgument("--scaling must be strong or weak, got %r" % (scaling,))
    local = max(gpus, 1)
    devices = local * nodes
    if scaling == "weak":
        return batch_size * devices, batch_size, local
    if batch_size % devices:
        raise Unsupported(
            "strong scaling splits the batch across devices, but batch %d does not divide "
            "among %d %s" % (batch_size, devices, _devices(gpus, nodes)))
    return batch_size, batch_size // devices, local


def _devices(gpus, nodes):
    what = "GPUs" if gpus else "CPU processes"
    return what if nodes == 1 else "%s (%d nodes)" % (what, nodes)
