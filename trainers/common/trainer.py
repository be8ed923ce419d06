"""The hooks a framework implements; everything else is `trainers.common.protocol.run`.

A framework package declares what it supports (`SUPPORT`, a trainers.common.support.Support,
in its light `__init__.py`), subclasses `Trainer` pointing to that declaration, fills in the
few methods that differ between frameworks, and its `__main__` calls `run(...)`. What the
declaration does not hold is refused by `run` before any hook is called. The order of calls
in one process:

    gpus_visible(cfg)       on GPUs: how many the framework sees (refused when too few)
    gpu_capabilities(cfg)   on GPUs: their compute capabilities (refused outside the declaration)
    preflight(cfg)          cheap framework checks, before any data is read: raise Unsupported
    setup(cfg) -> dict      build model, optimizer, devices; report what was built
    to_batch(images, labels)    once per pooled batch, before timing starts
    step(batch) -> loss     timed; must return with the device synchronised
    param_checksum()        after the timed steps: the parameters' sha256 (params_sha256), or None
    teardown()              always, also after an error

Inference (--phase inference, trainers/common/inference.py) calls, after `setup` (cfg.phase
tells it: no optimizer is needed) and `to_batch`, `infer(batch)` instead of `step`: timed, the
first batch alone, then the warm-up batches, then the measured ones; `compile_cache()` says
whether the first batch could reuse compiled work from an earlier process. A framework without
`infer` is refused that phase (its SUPPORT declares inference=False, with the reason).

Accuracy mode (trainers/common/accuracy.py) calls `to_batch` and `step` per minibatch of a
shuffled epoch and adds two hooks: `set_learning_rate(lr)` when the schedule changes the rate
and `predict(images)` for the evaluation after each epoch. A framework without them is
refused that mode (`unsupported`).

How many processes a run takes follows from the declaration (`Support.processes`); the
launch is `trainers.common.launch`'s (`ranks()` names a framework's own starter, `isolate`
asks for the run in a child process). `cfg` is a `trainers.common.protocol.Config`.
"""
import hashlib

import numpy as np


class Trainer(object):
    support = None  # the framework's trainers.common.support.Support

    @property
    def isolate(self):
        """Whether run() trains in a child process and reports how it ended, for a framework that
        aborts the whole process on errors (launch.py): its Support declares it."""
        return bool(self.support is not None and self.support.isolate)

    @property
    def framework(self):
        return self.support.framework

    def preflight(self, cfg):
        """Raise `Unsupported` for a configuration this framework cannot run here beyond
        what its declaration says (a missing tool). Called before data is read, and also in
        the launching parent of a multi-process run, so it must not claim devices."""

    def gpus_visible(self, cfg):
        """(number of GPUs this framework sees here, a few words naming its version and
        build for the refusal: 'torch 2.13.0+cpu (CUDA not built)'). Called for GPU runs only,
        before preflight, in every process of the run (the launching parent too): it may
        import the framework but must not claim devices."""
        return 0, "%s (no GPU check)" % self.framework

    def gpu_capabilities(self, cfg):
        """[(name, (major, minor))] of the cfg.gpus GPUs the run will use, or None when the
        framework cannot tell; checked against the declaration."""
        return None

    def ranks(self):
        """The trainers.common.launch.Ranks that starts this framework's ranks (None: one
        `python -m` process per rank)."""
        return None

    def classify_exit(self, code, log_tail):
        """(class, detail) for the run's child process that ended with status `code` without
        reporting an error, read from its last log lines; None: a crash."""
        return None

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

    def infer(self, batch):
        """Inference: one forward pass of `batch` (what `to_batch` made; its labels unused) in
        evaluation form (no gradients, BatchNorm's running statistics, no dropout), with the
        weights `setup` initialised from cfg.seed. Returns the outputs (logits) as something
        numpy.asarray reads, on the host: the copy in and the copy out belong to a served batch's
        latency, and a host array proves the device has finished."""
        raise NotImplementedError

    def compile_cache(self):
        """Inference: the folder of a persistent compile cache this process reads (JAX's
        compilation cache, TorchInductor's), or None where every process compiles afresh. A
        missing or empty folder, or None, makes the first batch a cold start."""
        return None

    def set_learning_rate(self, lr):
        """Accuracy mode: train the following steps at rate `lr` (trainers/common/recipe.py's
        schedule; called before the first step and where the rate changes)."""
        raise NotImplementedError

    def predict(self, images):
        """Accuracy mode: the network's outputs (logits, N x classes, anything numpy can
        read) for float32 NCHW images in [0, 1] of the configured batch size, in inference
        mode (no dropout, BatchNorm's running statistics) and without changing any weight."""
        raise NotImplementedError

    def is_out_of_memory(self, exc):
        """Whether `exc` is this framework's way of reporting an out-of-memory condition
        (MemoryError is recognised without asking)."""
        return False

    def param_checksum(self):
        """sha256 (hex) of the model's parameters after the timed steps, or None where the
        framework gives none. Ranks of a data-parallel run hold identical parameters, so equal
        checksums across ranks prove that their gradients were exchanged."""
        return None

    def teardown(self):
        """Release what setup claimed (process groups, sessions)."""


def params_sha256(arrays):
    """The checksum `Trainer.param_checksum` returns: sha256 over each parameter's float32
    bytes, in the model's order (numpy arrays, or anything numpy.asarray takes)."""
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(np.ascontiguousarray(np.asarray(array, dtype=np.float32)).tobytes())
    return digest.hexdigest()
