"""Fixed time limits against learned ones (issue 27), replayed over a history of run times.

Each cell's runs are replayed in order. A run's limit is either the fixed one (`--fixed`, the
old `hardware.time_min: 120`) or learned by orchestrator/sweep/time_limits.predict from that cell's
earlier runs (the first run of a cell, with nothing earlier, is left out of the figures: "with
one earlier run per cell"). For each policy: the fraction of runs that would have timed out
(run time > limit) and the median and 95th percentile of asked ÷ used (limit ÷ run time), for the limit and for the floor (`--time-min`, which a backfilled job gets
as its limit: the runs past it would time out there).

Similar cells apart, by direction (the cell longer or shorter than its history): generated
families of one composition, one run of one random variant predicting 20 others
(orchestrator/sweep/time_limits.scaled), drawn over batch 1 to 4,096, iterations, threads, GPUs,
nodes, strong or weak scaling, the data's shape and epochs; a fifth of histories without a step
time, 30 % of families in accuracy mode. Their ground truth is not the predictor's model (a
per-step overhead, so per-sample cost rises at small batch; Amdahl's law over threads;
communication growing with devices and nodes; FLOP-true input costs), so the figures test its
caution: the share of cells found similar (the rest get the ceiling) and the % of those timed
out, also counting Slurm's early signal.

The history is a results database's successful runs (`--db sqlite:///results.db`), or a
generated one: `--cells` cells whose typical run time is log-uniform between 20 s and 6 h
(LeNet on MNIST to VGG16 on a CPU node), each run that time × a log-normal spread
(`--spread`, sigma; 0.05 is what repeated benchmark runs on a quiet node show, 0.2 a noisy one).

    .venv/bin/python benchmarks/time_limits.py [--cells 300] [--runs 4] [--spread 0.1] [--db URL]
"""
from __future__ import annotations

import argparse
import itertools
import math
import random
import statistics
from collections import defaultdict

from orchestrator.sweep.time_limits import CEILING, Past, predict

#: How much earlier than asked Slurm's end-of-time signal may come: slurmctld checks limits about
#: every 30 s (orchestrator/backends/sbatch.py signal_delay_s).
SIGNAL_CHECK_S = 30


def generated(cells: int, runs: int, spread: float, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    out = {}
    for i in range(cells):
        typical = math.exp(rng.uniform(math.log(20), math.log(6 * 3600)))
        out[f"c{i}"] = [typical * rng.lognormvariate(0, spread) for _ in range(runs)]
    return out


def from_database(url: str) -> dict[str, list[float]]:
    from sqlalchemy import text

    from orchestrator.store import db

    out: dict[str, list[float]] = defaultdict(list)
    with db.open_db(url, create=False)() as session:
        for cell_id, wall in session.execute(text(
                "SELECT cell_id, ended_at - started_at FROM runs WHERE state = 'done' AND started_at IS NOT NULL "
                "AND ended_at IS NOT NULL AND ended_at >= started_at ORDER BY ended_at")):  # as learn: no negative wall time
            out[cell_id].append(float(wall))
    return out


def replay(history: dict[str, list[float]], limit_of) -> dict[str, float]:
    """A policy `limit_of(earlier, cell) -> (limit, floor)` (minutes; floor None: not asked)
    replayed: the fraction of runs past the limit (timed out) and past the floor (what a
    backfilled job gets: timed out there), each also counted the way Slurm ends a job: its
    USR2 comes signal_delay_s (of the floor where one is asked, as sbatch sizes it) before the
    limit it really has, up to SIGNAL_CHECK_S earlier still, and submitit ends the run there
    (`*_early`); the median and p95 of asked ÷
    used for each, and runs."""
    from orchestrator.backends.sbatch import signal_delay_s

    limits, floors = [], []
    for cell, walls in history.items():
        for n in range(1, len(walls)):
            limit, floor = limit_of(walls[:n], cell)
            early = signal_delay_s(floor or limit) + SIGNAL_CHECK_S
            limits.append((60 * limit, walls[n], early))
            floors.append((60 * (floor or limit), walls[n], early))
    return {**_figures("limit", limits), **_figures("floor", floors), "runs": len(limits)}


def _figures(name: str, asked_used: list[tuple]) -> dict[str, float]:
    """The fraction past `asked` (and past `asked` less the early signal, a third item where
    given), and the median and p95 of asked ÷ used."""
    ratios = sorted(a[0] / a[1] for a in asked_used)
    if not ratios:
        return {f"{name}_{k}": float("nan") for k in ("out", "early", "median", "p95")}
    return {f"{name}_out": sum(a[1] > a[0] for a in asked_used) / len(ratios),
            f"{name}_early": sum(a[1] > a[0] - (a[2] if len(a) > 2 else 0) for a in asked_used) / len(ratios),
            f"{name}_median": statistics.median(ratios),
            f"{name}_p95": ratios[min(len(ratios) - 1, int(0.95 * len(ratios)))]}


#: The values a generated family of similar cells draws its variants from (one composition, values only).
VARIANTS = {"batch_size": (1, 4, 16, 64, 256, 1024, 4096), "iterations": (50, 500, 5000), "threads": (1, 4, 12),
            "gpus": (0, 1, 2, 4), "nodes": (1, 2), "scaling": ("strong", "weak"), "like": ("mnist", "cifar10", "imagenet"),
            "epochs": (1, 2, 5)}
#: Samples in one epoch of a generated accuracy-mode family.
EPOCH_SAMPLES = 60000


def _truth(family: dict, cell: dict) -> tuple[float, float]:
    """The ground truth of a generated cell (its steps' count and one step's seconds), not the
    predictor's model: a step costs a fixed overhead plus its per-device samples (so per-sample
    cost rises at small batch), each sample its FLOP-true cost (trainers/common/flops.py, which
    the predictor also reads: the FLOPs are the one thing it is meant to know), threads by
    Amdahl's law, and communication grows with devices and more with nodes, whatever the scaling."""
    devices = max(1, cell["gpus"]) * cell["nodes"]  # gpus=0: one process per node, on its CPUs
    per_device = cell["batch_size"] if cell["scaling"] == "weak" else cell["batch_size"] / devices
    step = family["base"] * (family["overhead"] + (1 - family["overhead"]) * per_device / 64)
    step *= family["flops"][cell["like"]] / family["flops"]["cifar10"]
    serial = family["serial"]
    step *= (serial + (1 - serial) / cell["threads"]) / (serial + (1 - serial) / 12)
    step *= family["cpu_slower"] if cell["gpus"] == 0 else 1
    step *= 1 + family["comm"] * math.log2(devices) + (family["comm"] * 3 if cell["nodes"] > 1 else 0)
    if cell.get("mode") == "accuracy":
        global_batch = cell["batch_size"] * (devices if cell["scaling"] == "weak" else 1)
        return cell["epochs"] * math.ceil(EPOCH_SAMPLES / global_batch), step
    return cell["warmup"] + cell["iterations"], step


def _family(rng: random.Random, flops_of) -> dict:
    model = rng.choice(("lenet", "alexnet", "resnet50"))
    return {"model": model, "flops": {like: flops_of(model, like) for like in VARIANTS["like"]},
            "start_up": math.exp(rng.uniform(math.log(10), math.log(300))),  # compile included
            "base": math.exp(rng.uniform(math.log(0.001), math.log(2))),  # a step at batch 64 per device
            "overhead": rng.uniform(0.02, 0.5), "serial": rng.uniform(0.02, 0.3), "comm": rng.uniform(0.02, 0.3),
            "cpu_slower": rng.uniform(3, 50),  # a CPU step against a GPU's, same batch
            "mode": "accuracy" if rng.random() < 0.3 else "throughput", "no_step_time": rng.random() < 0.2}


def similar_families(families: int, spread: float, seed: int, variants: int = 20):
    """Generated families of similar cells, each with its own start-up, step time, per-step
    overhead, serial fraction, communication and mode; one run of one random variant is the
    history (without a step time for a fifth of them, as an older result file), `variants` other
    random variants are predicted from it and run once. Yields (predicted Limit, the variant's
    real wall time in seconds, the known run's wall time)."""
    from trainers.common import flops, inputs

    def flops_of(model, like):
        return flops.training_flops(model, inputs.input_shape(model, like), inputs.DATASETS[like].classes)

    rng = random.Random(seed)
    for _ in range(families):
        family = _family(rng, flops_of)

        def draw():
            cell = {k: rng.choice(v) for k, v in VARIANTS.items()}
            return dict(cell, framework="f", model=family["model"], dataset="synthetic", hardware="h", warmup=10,
                        precision="fp32", mode=family["mode"])

        def run(cell):
            steps, step = _truth(family, cell)
            step *= rng.lognormvariate(0, spread)
            return family["start_up"] * rng.lognormvariate(0, spread) + step * steps, step

        known = draw()
        wall, step = run(known)
        past = [Past("known", wall, known, step_s=None if family["no_step_time"] else step)]
        for _ in range(variants):
            cell = draw()
            yield predict(repr(cell), cell, past, 10 ** 6), run(cell)[0], wall


def _similar_table(predicted, args) -> None:
    """The similar-cell figures by direction (the variant's real time above or below the known
    run's): how many were similar (the rest get the ceiling), and of those the % timed out at the
    limit, and at the limit less Slurm's early signal (signal_delay_s and its ~30 s check)."""
    from orchestrator.backends.sbatch import signal_delay_s

    print(f"\nsimilar cells: {args.families} generated families x 20 variants (batch 1-4096, iterations, threads, "
          f"gpus, nodes, strong/weak, like, accuracy mode, a fifth without step times), spread {args.spread}")
    print(f"{'direction':40} {'cells':>6} {'similar':>8} {'timed out':>10} {'with signal':>12} {'asked÷used':>11} "
          f"{'p95':>6}")
    for name, pick in (("scaling up (longer than the history)", lambda used, known: used >= known),
                       ("scaling down (shorter than the history)", lambda used, known: used < known)):
        rows = [(limit, used) for limit, used, known in predicted if pick(used, known)]
        learned = [(limit, used) for limit, used in rows if limit.source != CEILING]
        f = _figures("limit", [(60 * limit.minutes, used) for limit, used in learned])
        early = sum(used > 60 * limit.minutes - signal_delay_s(limit.minutes) - SIGNAL_CHECK_S for limit, used in learned)
        print(f"{name:40} {len(rows):6d} {len(learned) / max(1, len(rows)):8.1%} {f['limit_out']:10.2%} "
              f"{early / max(1, len(learned)):12.2%} {f['limit_median']:11.2f} {f['limit_p95']:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", help="replay this results database's runs instead of a generated history")
    parser.add_argument("--cells", type=int, default=300)
    parser.add_argument("--runs", type=int, default=4, help="runs per generated cell")
    parser.add_argument("--spread", type=float, default=0.1)
    parser.add_argument("--families", type=int, default=200, help="generated families of similar cells")
    parser.add_argument("--fixed", type=int, default=120, help="the fixed limit (minutes)")
    parser.add_argument("--max-time", type=int, default=2880, help="the partition's MaxTime (minutes)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    history = from_database(args.db) if args.db else generated(args.cells, args.runs, args.spread, args.seed)

    def learned(safety: float, allowance: float, floor_safety: float):
        def limit_of(earlier, cell):
            limit = predict(cell, {}, [Past(cell, w, {}) for w in reversed(earlier)], args.fixed, safety=safety,
                            allowance_min=allowance, max_time_min=args.max_time, floor_safety=floor_safety)
            return limit.minutes, limit.floor
        return limit_of

    policies = [(f"fixed {args.fixed} min", lambda earlier, cell: (min(args.fixed, args.max_time), None)),
                ("x 1.5 + 1 min, floor x 1.4 (default)", learned(1.5, 1.0, 1.4)),
                ("x 1.5 + 1 min, floor x 1 (the first)", learned(1.5, 1.0, 1.0)),
                ("x 1.5 + 1 min, floor x 1.3", learned(1.5, 1.0, 1.3)),
                ("x 1.75 + 1 min, floor x 1.5", learned(1.75, 1.0, 1.5)),
                ("x 2 + 1 min, floor x 1.8 (a noisy site)", learned(2.0, 1.0, 1.8))]
    source = args.db or f"generated: {args.cells} cells × {args.runs} runs, spread {args.spread}"
    print(f"same cell, history: {source} (a run's limit and floor from that cell's earlier runs)")
    print("(timed out, past floor: run time > limit; with signal: > limit less Slurm's early USR2 and its check)")
    print(f"{'policy':40} {'runs':>6} {'timed out':>10} {'w/ signal':>10} {'asked÷used':>11} {'p95':>6} "
          f"{'past floor':>11} {'w/ signal':>10} {'floor÷used':>11} {'p95':>6}")
    for name, policy in policies:
        f = replay(history, policy)
        print(f"{name:40} {f['runs']:6d} {f['limit_out']:10.2%} {f['limit_early']:10.2%} {f['limit_median']:11.2f} "
              f"{f['limit_p95']:6.2f} {f['floor_out']:11.2%} {f['floor_early']:10.2%} {f['floor_median']:11.2f} "
              f"{f['floor_p95']:6.2f}")
    if args.db:
        print("similar cells: generated families only (a database's cells are not variants of one another)")
        return
    _similar_table(list(similar_families(args.families, args.spread, args.seed)), args)


if __name__ == "__main__":
    main()
