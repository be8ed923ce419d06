"""Inference (--phase inference): forward passes only, timed one batch at a time (docs/protocol.md).

Training's steps are counted (--iterations); an inference run instead times batches until both
--min-batches and --min-seconds of measured time are reached, so that a fast network is measured
over enough time and a slow one over enough batches for its percentiles (the validity rule the
orchestrator applies: orchestrator/job/latency.py).

The events, in order:
    first_batch   the first forward pass, timed alone (`dt`): graph building, compilation and
                  autotuning land here, not in the steady state; `cold` says whether compiled
                  work could come from an earlier process (Trainer.compile_cache), and
                  `outputs_sha256` is the checksum of its outputs (the same seed gives the same)
    step          each warm-up batch (timed, not measured), then `warmup_end`, then each measured
                  batch: `dt` (the device synchronised, timing.timed) and `images` (the batch),
                  no `loss`; the collector reads them as it reads training's steps
    run_end       `steps` and `images` measured, `measured_s` their summed time

Trainers run in Python 3.6 containers: this module stays 3.6-compatible.
"""
import hashlib
import os

import numpy as np

from trainers.common.errors import InvalidArgument, Unsupported
from trainers.common.timing import timed
from trainers.common.trainer import Trainer

INFERENCE = "inference"


def check_args(args):
    """The phase's own checks on parsed arguments (protocol.resolve): the rule's bounds, and the
    combinations inference cannot be."""
    if args.phase != INFERENCE:
        return  # --min-batches and --min-seconds count inference only: training counts --iterations
    if args.min_batches < 1:
        raise InvalidArgument("--min-batches must be at least 1, got %d" % args.min_batches)
    if not args.min_seconds >= 0:
        raise InvalidArgument("--min-seconds must be 0 or more, got %r" % args.min_seconds)
    if args.mode == "accuracy":
        raise Unsupported("--mode accuracy trains and evaluates; --phase inference times forward "
                          "passes of untrained weights: use --mode throughput with --phase inference")
    if args.input != "memory":
        raise Unsupported("--phase inference times forward passes on pooled batches; use --input "
                          "memory (the loader's reading is timed in --phase train)")


def check_trainer(obj):
    """Refuse a trainer without `infer` (its declaration should have said so already)."""
    if getattr(type(obj), "infer") is getattr(Trainer, "infer"):
        raise Unsupported("%s does not support --phase inference; its trainer lacks infer"
                          % obj.framework)


def pool_size(cfg):
    """Batches the pool holds: the warm-up and the fewest measured ones (cycled beyond)."""
    return 1 + cfg.warmup + cfg.min_batches


def cold_start(cache):
    """Whether the first batch compiles from nothing: no persistent cache, or an empty one."""
    return cache is None or not os.path.isdir(cache) or not os.listdir(cache)


def outputs_sha256(outputs):
    """sha256 of the outputs as float32 bytes: the first batch's, which the seed decides."""
    array = np.ascontiguousarray(np.asarray(outputs, dtype=np.float32))
    return hashlib.sha256(array.tobytes()).hexdigest()


def run(obj, cfg, events, pool, times=None):
    """The first batch, the warm-up and the measured batches of `obj.infer` over `pool`; returns
    (measured batches, their summed seconds). Each measured batch's seconds are appended to `times`
    where given (batch_search decides on their median)."""
    check_trainer(obj)
    batch = cfg.global_batch
    cold = cold_start(obj.compile_cache())
    outputs, dt = timed(obj.infer, pool[0])
    events.emit("first_batch", dt=dt, images=batch, cold=cold, outputs_sha256=outputs_sha256(outputs))
    for i in range(cfg.warmup):
        _, dt = timed(obj.infer, pool[(1 + i) % len(pool)])
        events.emit("step", step=i, dt=dt, images=batch)
    events.emit("warmup_end", step=cfg.warmup)
    measured, seconds = 0, 0.0
    while measured < cfg.min_batches or seconds < cfg.min_seconds:
        _, dt = timed(obj.infer, pool[(1 + cfg.warmup + measured) % len(pool)])
        events.emit("step", step=cfg.warmup + measured, dt=dt, images=batch)
        if times is not None:
            times.append(dt)
        measured += 1
        seconds += dt
    events.emit("run_end", steps=measured, images=measured * batch, measured_s=seconds)
    return measured, seconds
