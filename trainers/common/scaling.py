"""Batch arithmetic: how the configured batch size becomes per-device and global batches.

Under `strong` scaling the configured batch is the global one and is split across the
GPUs; under `weak` scaling it is each GPU's, and the global batch grows with the GPUs.
A CPU run (gpus=0) is one device whose batch is the configured one either way.
"""
from trainers.common.errors import InvalidArgument, Unsupported

SCALINGS = ("strong", "weak")


def split_batch(batch_size, scaling, gpus):
    """Return (global_batch, per_device_batch, devices); raise for an impossible split."""
    if batch_size < 1:
        raise InvalidArgument("--batch-size must be at least 1, got %d" % batch_size)
    if gpus < 0:
        raise InvalidArgument("--gpus must be 0 (CPU) or more, got %d" % gpus)
    if scaling not in SCALINGS:
        raise InvalidArgument("--scaling must be strong or weak, got %r" % (scaling,))
    if gpus == 0:
        return batch_size, batch_size, 1
    if scaling == "weak":
        return batch_size * gpus, batch_size, gpus
    if batch_size % gpus:
        raise Unsupported(
            "strong scaling splits the batch across GPUs, but batch %d does not divide "
            "among %d GPUs" % (batch_size, gpus))
    return batch_size, batch_size // gpus, gpus
