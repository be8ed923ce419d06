"""Fixed time limits against learned ones (issue 27), replayed over a history of run times.

Each cell's runs are replayed in order. A run's limit is either the fixed one (`--fixed`, the
old `hardware.time_min: 120`) or learned by orchestrator/time_limits.predict from that cell's
earlier runs (the first run of a cell, with nothing earlier, is left out of the figures: "with
one earlier run per cell"). For each policy: the fraction of runs that would have timed out
(run time > limit) and the median and 95th percentile of asked ÷ used (limit ÷ run time), for the limit and for the floor (`--time-min`, which a backfilled job gets
as its limit: the runs past it would time out there).

Similar cells apart: generated families of one composition swept over batch_size, iterations,
threads and gpus (strong scaling), one run of one variant predicting each other variant's limit
(orchestrator/time_limits.scaled); their ground truth is not the predictor's model (sublinear
batch cost, Amdahl's law over threads, communication), so the figures test its caution.

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

from orchestrator.time_limits import Past, predict


def generated(cells: int, runs: int, spread: float, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    out = {}
    for i in range(cells):
        typical = math.exp(rng.uniform(math.log(20), math.log(6 * 3600)))
        out[f"c{i}"] = [typical * rng.lognormvariate(0, spread) for _ in range(runs)]
    return out


def from_database(url: str) -> dict[str, list[float]]:
    from sqlalchemy import text

    from orchestrator import db

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
    backfilled job gets: timed out there), the median and p95 of asked ÷ used for each, and runs."""
    limits, floors = [], []
    for cell, walls in history.items():
        for n in range(1, len(walls)):
            limit, floor = limit_of(walls[:n], cell)
            limits.append((60 * limit, walls[n]))
            floors.append((60 * (floor or limit), walls[n]))
    return {**_figures("limit", limits), **_figures("floor", floors), "runs": len(limits)}


def _figures(name: str, asked_used: list[tuple[float, float]]) -> dict[str, float]:
    ratios = sorted(asked / used for asked, used in asked_used)
    if not ratios:
        return {f"{name}_out": float("nan"), f"{name}_median": float("nan"), f"{name}_p95": float("nan")}
    return {f"{name}_out": sum(used > asked for asked, used in asked_used) / len(ratios),
            f"{name}_median": statistics.median(ratios),
            f"{name}_p95": ratios[min(len(ratios) - 1, int(0.95 * len(ratios)))]}


#: The variants a generated family of similar cells sweeps (one composition, values only).
VARIANTS = {"batch_size": (16, 64, 256), "iterations": (50, 500, 5000), "threads": (1, 4, 12), "gpus": (1, 2)}


def _true_step_s(base_step: float, cell: dict, serial: float) -> float:
    """The ground truth of a generated step's time, not the predictor's model: the per-device
    batch costs sublinearly (batch^0.9: a bigger batch uses the device better), threads follow
    Amdahl's law with a `serial` fraction, and more than one device adds 5 % communication."""
    devices = cell["gpus"]
    per_device = cell["batch_size"] / devices
    amdahl = serial + (1 - serial) / cell["threads"]
    return base_step * (per_device / 64) ** 0.9 * amdahl / (serial + (1 - serial) / 12) * (1.05 if devices > 1 else 1)


def similar_families(families: int, spread: float, seed: int):
    """Generated families of similar cells: each a start-up (10 s to 5 min, compile included),
    a step time (1 ms to 2 s at batch 64 per device on 12 threads) and a serial fraction; one run
    of one random variant is the history, every other variant is predicted from it and run once.
    Yields (predicted Limit, the variant's real wall time in seconds)."""
    rng = random.Random(seed)
    for _ in range(families):
        start_up = math.exp(rng.uniform(math.log(10), math.log(300)))
        base = math.exp(rng.uniform(math.log(0.001), math.log(2)))
        serial = rng.uniform(0.02, 0.3)
        cells = [dict(zip(VARIANTS, values), framework="f", model="lenet", dataset="mnist", hardware="h",
                      warmup=10, scaling="strong", precision="fp32") for values in itertools.product(*VARIANTS.values())]

        def run(cell):
            step = _true_step_s(base, cell, serial) * rng.lognormvariate(0, spread)
            return start_up * rng.lognormvariate(0, spread) + step * (cell["warmup"] + cell["iterations"]), step

        known = rng.choice(cells)
        wall, step = run(known)
        past = [Past("known", wall, known, step_s=step)]
        for cell in cells:
            if cell is not known:
                yield predict(repr(cell), cell, past, 10 ** 6), run(cell)[0]


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
    print(f"{'policy':40} {'runs':>6} {'timed out':>10} {'asked÷used':>11} {'p95':>6} "
          f"{'past floor':>11} {'floor÷used':>11} {'p95':>6}")
    for name, policy in policies:
        f = replay(history, policy)
        print(f"{name:40} {f['runs']:6d} {f['limit_out']:10.2%} {f['limit_median']:11.2f} {f['limit_p95']:6.2f} "
              f"{f['floor_out']:11.2%} {f['floor_median']:11.2f} {f['floor_p95']:6.2f}")
    if args.db:
        print("similar cells: generated families only (a database's cells are not variants of one another)")
        return
    predicted = list(similar_families(args.families, args.spread, args.seed))
    f = _figures("limit", [(60 * limit.minutes, used) for limit, used in predicted])
    print(f"\nsimilar cells: {args.families} generated families × {len(predicted) // max(1, args.families)} variants "
          f"({', '.join(VARIANTS)}), each predicted from one run of another, spread {args.spread} (no --time-min)")
    print(f"{'x 1.5 + 1 min (default)':40} {len(predicted):6d} {f['limit_out']:10.2%} {f['limit_median']:11.2f} "
          f"{f['limit_p95']:6.2f}")


if __name__ == "__main__":
    main()
