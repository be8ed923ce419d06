"""The batch pool: a few distinct batches prepared before timing starts, then cycled.

What a benchmark step should cost is the framework's work: host-to-device copy, forward,
backward, optimizer update. Reading files, decoding, upsampling and converting to the
framework's tensors are done here, once, for a handful of batches, so they stay out of the
timed step in every framework alike. Several distinct batches (not one) keep a framework
from benefiting from seeing the very same input each step.
"""
import numpy as np

MAX_BATCHES = 8
BUDGET_BYTES = 512 * 1024 * 1024  # float32 pool per process


def pool_batches(per_device_batch, shape, steps, max_batches=MAX_BATCHES,
                 budget_bytes=BUDGET_BYTES):
    """How many distinct batches to prepare: at most `max_batches`, no more than the run
    has steps, and as many as fit in `budget_bytes` of float32 (at least one)."""
    batch_bytes = 4 * per_device_batch * int(np.prod(shape))
    fit = max(1, budget_bytes // max(1, batch_bytes))
    return int(max(1, min(max_batches, steps, fit)))


def batch_indices(i, per_device_batch, rank, world_size, n):
    """Dataset indices of batch `i` for `rank`: consecutive runs of the dataset, the ranks'
    slices side by side (as a sharded sampler would give), wrapping at the end."""
    start = (i * world_size + rank) * per_device_batch
    return (start + np.arange(per_device_batch)) % n


def build_pool(dataset, n_batches, per_device_batch, input_shape, to_batch,
               rank=0, world_size=1):
    """`n_batches` batches of this rank, resized to `input_shape` ([C, H, W]) and passed
    through the framework's `to_batch(images, labels)` hook."""
    if dataset.shape[0] != input_shape[0]:
        raise ValueError("dataset has %d channels, model expects %d"
                         % (dataset.shape[0], input_shape[0]))
    size = tuple(input_shape[1:])
    pool = []
    for i in range(n_batches):
        idx = batch_indices(i, per_device_batch, rank, world_size, len(dataset))
        images, labels = dataset.batch(idx, size=size)
        pool.append(to_batch(images, labels))
    return pool
