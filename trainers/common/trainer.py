"""The hooks a framework implements; everything else is `trainers.common.protocol.run`.

A framework package subclasses `Trainer`, fills in the few methods that differ between
frameworks, and its `__main__` calls `run(TheTrainer)`. The order of calls in one process:

    preflight(cfg)          cheap checks, before any data is read: raise Unsupported
    processes(cfg)          1, or cfg.devices to have one process per GPU (see launch.py)
    setup(cfg) -> dict      build model, optimizer, devices; report what was built
    to_batch(images, labels)    once per pooled batch, before timing starts
    step(batch) -> loss     timed; must return with the device synchronised
    teardown()              always, also after an error

`cfg` is a `trainers.common.protocol.Config`.
"""


class Trainer(object):
    framework = None  # "torch", "tensorflow", ...

    def preflight(self, cfg):
        """Raise `Unsupported` for a configuration this framework cannot run here
        (precision on this device type, GPUs without CUDA). Called before data is read,
        and also in the launching parent of a multi-process run, so it must not claim
        devices."""

    def processes(self, cfg):
        """1 to run all devices from this process; `cfg.devices` to have `run` start one
        process per device (ranks; `cfg.rank`, `cfg.world_size`, `cfg.local_rank` tell each
        its place, and MASTER_ADDR/MASTER_PORT are set for the rendezvous)."""
        return 1

    def setup(self, cfg):
        """Build the model, loss, optimizer and devices. Return a dict with
        `params` (trainable parameter count), `devices` (list of names), `version` (the
        framework's) and `build` (dict of what the framework reports: cuda, cudnn, blas...).
        """
        raise NotImplementedError

    def to_batch(self, images, labels):
        """Turn host arrays (float32 NCHW in [0, 1], int64 labels of this process's
        per-device batch) into whatever `step` takes. Runs outside the timed region;
        the host-to-device copy belongs in `step`."""
        return images, labels

    def step(self, batch):
        """One training step (copy in, forward, backward, update); return the loss as a
        float after the device has finished."""
        raise NotImplementedError

    def is_out_of_memory(self, exc):
        """Whether `exc` is this framework's way of reporting an out-of-memory condition
        (MemoryError is recognised without asking)."""
        return False

    def teardown(self):
        """Release what setup claimed (process groups, sessions)."""
