"""What every minimal loop shares: its command line, its input batches and its report.

A minimal loop (`benchmarks/minimal/<framework>_loop.py`) is the training loop a user of the
framework would write by hand to time it (with `--forward-only`, the inference loop: the network in
evaluation form, no gradients, each batch's outputs read back to the host, as the inference trainer
reads them; JAX's loop is forward-only alone): the trainer's own model (trainers/<fw>/models.py),
the recipe's optimizer and constants (trainers/common/recipe.py), the same input batches
already turned into the framework's tensors, the same thread count, a clock started before
and stopped after each step, the device synchronised by reading the loss back (and waiting
for the update where the framework queues it). Nothing else: no events, no protocol, no
checks. `benchmarks/trainer_overhead.py` runs it beside the trainer and compares images/s.

    python -m benchmarks.minimal.torch_loop --model resnet50 --like imagenet --batch-size 8 \
        --iterations 10 --warmup 3 --threads 2

prints one JSON line last on stdout: the per-step times and images/s over the steps after
warm-up (images ÷ summed step times, the trainer's definition). Runs in the framework's own
environment with PYTHONPATH at the repository, so it parses as Python 3.6 (CNTK).
"""
import argparse
import json
import os
import sys

from trainers.common import data
from trainers.common.inputs import DATASETS, MODELS, input_shape, network_shape
from trainers.common.pool import build_pool, pool_batches


def parse(framework, argv=None):
    """The loop's settings: the trainer's flags that a CPU run of one process uses."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.minimal.%s_loop" % framework)
    parser.add_argument("--model", required=True, choices=MODELS)
    parser.add_argument("--like", required=True, choices=list(DATASETS),
                        help="the dataset whose shape the synthetic input takes")
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--forward-only", action="store_true",
                        help="time forward passes in evaluation form (the inference trainer's work)")
    for flag in ("--seq-len", "--layers", "--width", "--heads"):  # a sequence network's, as the trainer's
        parser.add_argument(flag, type=int)
    args = parser.parse_args(argv)
    args.framework = framework
    args.input_shape = tuple(input_shape(args.model, args.like, args.seq_len))
    args.network = network_shape(args.model, args.layers, args.width, args.heads)
    args.classes = DATASETS[args.like].classes
    args.steps = args.warmup + args.iterations
    return args


def host_batches(args):
    """The batches the trainer's pool holds for these settings (same seed, same number of
    distinct batches, cycled): float32 NCHW images in [0, 1] and int64 labels."""
    n = pool_batches(args.batch_size, args.input_shape, args.steps)
    dataset = data.synthetic(args.like, n * args.batch_size, seed=[args.seed, 0], seq_len=args.input_shape[0] if len(args.input_shape) == 1 else None)
    return build_pool(dataset, n, args.batch_size, args.input_shape,
                      lambda images, labels: (images, labels))


def report(args, times, loss):
    """Print the loop's figures as the last stdout line (a framework may have printed before)."""
    measured = times[args.warmup:]
    record = {"framework": args.framework, "model": args.model, "batch_size": args.batch_size,
              "threads": args.threads, "warmup": args.warmup, "iterations": args.iterations,
              "forward_only": args.forward_only, "dt": times, "loss": float(loss),
              "images_per_sec": args.batch_size * len(measured) / sum(measured)}
    sys.stdout.flush()
    os.write(1, (json.dumps(record) + "\n").encode())
