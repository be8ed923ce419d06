"""--batch-size auto (issue 38 item 4): one inference run that finds where a device stops gaining.

Sweeping batch_size=1,2,4,... as separate jobs makes a user guess where to stop, and pays each job's
start, data and model build again. Here one process builds the model once and measures batch 1, 2,
4, ... in turn, each point exactly as a fixed-batch inference run is measured (trainers/common/
inference.py: the first batch apart, the warm-up, the validity rule), until either
    - a point runs out of memory (the framework's way of saying so: errors.classify, which asks
      Trainer.is_out_of_memory; MemoryError on the host), that point then recorded as the limit, or
    - throughput stops rising: PATIENCE points in a row each under (1 + GAIN) x the best point
      before them (`stop`, a pure function), or the batch reaches MAX_BATCH. Against the best,
      not the previous point, and twice in a row: one noisy point (a neighbour's burst on a shared
      node) neither ends the curve early nor, by being slow, lets a flat one go on.
      The rate the rule compares is batch / the point's MEDIAN batch latency (`decision_rate`), not
      its recorded samples/s (batches / summed seconds): on a shared node a few batches stalled by a
      neighbour (an OpenMP pool descheduled waits at every barrier: 2 s batches among 0.12 s ones,
      measured on this project's 2-core VM) drag the sum by 5x and decided the curve by noise. The
      median reads the device; every point still records its own samples/s and percentiles.

The events: `point` {batch} before each point's own first_batch ... run_end; `point_oom` {batch,
message} for the point the device could not hold; `search_end` {points, stopped} last. A first
point that runs out of memory ends the run as out_of_memory (there is no curve to keep).

Trainers run in Python 3.6 containers: this module stays 3.6-compatible.
"""
import argparse

from trainers.common import data as datasets
from trainers.common import inference
from trainers.common.errors import OUT_OF_MEMORY, InvalidArgument, classify
from trainers.common.pool import build_pool, pool_batches

AUTO = "auto"
#: a point gains where its samples/s is at least (1 + GAIN) x the best point's before it
GAIN = 0.05
#: the search stops after this many points in a row that did not gain
PATIENCE = 2
#: the largest batch tried: 2**16, beyond any network's served batch (a stop on unbounded memory)
MAX_BATCH = 1 << 16


def batch_size_arg(text):
    """--batch-size's type: a positive count, or `auto` (parsed here, checked by resolve)."""
    if text == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("--batch-size takes N (images per step) or auto "
                                         "(inference: doubled from 1), got %r" % text)


def check_args(args):
    """Where auto applies: inference on synthetic data, whose batches are made for each point."""
    if args.batch_size != AUTO:
        return
    if args.phase != inference.INFERENCE:
        raise InvalidArgument("--batch-size auto searches inference's batches; training takes "
                              "--batch-size N (or --phase inference)")
    if args.dataset != "synthetic":
        raise InvalidArgument("--batch-size auto makes each point's batches from random data; "
                              "use --dataset synthetic --like %s" % args.dataset)


def stop(rates, gain=GAIN, batches=None, patience=PATIENCE):
    """Why the search stops after these samples/s (of batch 1, 2, 4, ... unless `batches` says),
    or None to double again: the last `patience` points each under (1 + gain) x the best before them."""
    batches = batches or [1 << i for i in range(len(rates))]
    best, since = 0, 0  # the best point's index; the points since it that did not gain on it
    for i in range(1, len(rates)):
        if rates[i] >= (1 + gain) * rates[best] if rates[best] > 0 else rates[i] > 0:
            best, since = i, 0
        else:
            since += 1
    if since >= patience:
        return ("throughput (batch / median latency) gained under %g%% on batch %d's %.4g samples/s at the "
                "%d points after it (batch %s)"
                % (100 * gain, batches[best], rates[best], since, ", ".join(str(b) for b in batches[best + 1:])))
    if batches[-1] >= MAX_BATCH:
        return "batch %d is the largest the search tries" % batches[-1]
    return None


def decision_rate(batch, times):
    """The samples/s the stop rule compares: `batch` over the median of the point's batch seconds
    (0 where none was timed), by the rank rule the run's latency_p50_s states (orchestrator/job/latency.py,
    LoadGen's: the value at index n // 2, the upper middle of an even count), so that the point the
    search calls best is the point the run's headline names (batch_curve.steady_rate)."""
    median = sorted(times)[len(times) // 2] if times else 0.0
    return batch / median if median > 0 else 0.0


def at_batch(cfg, batch):
    """cfg for one point: the same run with `batch` images per step (one device: inference's)."""
    return type(cfg)(**dict(cfg.as_dict(), global_batch=batch, per_device_batch=batch))


def synthetic_pool(cfg, to_batch):
    """A point's pool: random images of the run's shape and seed, as protocol makes a fixed run's."""
    n = pool_batches(cfg.per_device_batch, cfg.input_shape, inference.pool_size(cfg))
    seq_len = cfg.input_shape[0] if len(cfg.input_shape) == 1 else None  # a sequence network's own
    dataset = datasets.synthetic(cfg.like, n * cfg.per_device_batch, seed=[cfg.seed, cfg.rank], seq_len=seq_len)
    return build_pool(dataset, n, cfg.per_device_batch, cfg.input_shape, to_batch)


def run(obj, cfg, events, make_pool, gain=GAIN):
    """Measure batch 1, 2, 4, ... of `obj.infer` until `stop` (at `gain`) or out of memory;
    make_pool(cfg) gives a point's batches. Returns the points [(batch, samples/s the rule compared:
    decision_rate)]."""
    points, batch, why = [], 1, None
    while why is None:
        point = at_batch(cfg, batch)
        events.emit("point", batch=batch)
        times = []
        try:
            inference.run(obj, point, events, make_pool(point), times)
        except Exception as exc:
            if not points or classify(exc, obj)[0] != OUT_OF_MEMORY:
                raise
            message = (str(exc) or type(exc).__name__).splitlines()[0][:300]
            events.emit("point_oom", batch=batch, message=message)
            why = "batch %d ran out of memory" % batch
            break
        points.append((batch, decision_rate(batch, times)))
        why = stop([rate for _, rate in points], gain, [b for b, _ in points])
        batch *= 2
    events.emit("search_end", points=len(points), stopped=why)
    return points
