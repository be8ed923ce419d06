"""Fixed time limits against learned ones (issue 27), replayed over a history of run times.

Each cell's runs are replayed in order. A run's limit is either the fixed one (`--fixed`, the
old `hardware.time_min: 120`) or learned by orchestrator/time_limits.predict from that cell's
earlier runs (the first run of a cell, with nothing earlier, is left out of the figures: "with
one earlier run per cell"). For each policy: the fraction of runs that would have timed out
(run time > limit) and the median and 95th percentile of asked ÷ used (limit ÷ run time).

The history is a results database's successful runs (`--db sqlite:///results.db`), or a
generated one: `--cells` cells whose typical run time is log-uniform between 20 s and 6 h
(LeNet on MNIST to VGG16 on a CPU node), each run that time × a log-normal spread
(`--spread`, sigma; 0.05 is what repeated benchmark runs on a quiet node show, 0.2 a noisy one).

    .venv/bin/python benchmarks/time_limits.py [--cells 300] [--runs 4] [--spread 0.1] [--db URL]
"""
from __future__ import annotations

import argparse
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
                "AND ended_at IS NOT NULL ORDER BY ended_at")):
            out[cell_id].append(float(wall))
    return out


def replay(history: dict[str, list[float]], limit_of) -> tuple[float, float, float, int]:
    """(timed-out fraction, median and p95 of asked ÷ used, runs) of a policy `limit_of(earlier, cell)`."""
    ratios, timeouts = [], 0
    for cell, walls in history.items():
        for n in range(1, len(walls)):
            asked_s = 60 * limit_of(walls[:n], cell)
            timeouts += walls[n] > asked_s
            ratios.append(asked_s / walls[n])
    ratios.sort()
    p95 = ratios[min(len(ratios) - 1, int(0.95 * len(ratios)))] if ratios else float("nan")
    return timeouts / max(1, len(ratios)), statistics.median(ratios) if ratios else float("nan"), p95, len(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", help="replay this results database's runs instead of a generated history")
    parser.add_argument("--cells", type=int, default=300)
    parser.add_argument("--runs", type=int, default=4, help="runs per generated cell")
    parser.add_argument("--spread", type=float, default=0.1)
    parser.add_argument("--fixed", type=int, default=120, help="the fixed limit (minutes)")
    parser.add_argument("--max-time", type=int, default=2880, help="the partition's MaxTime (minutes)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    history = from_database(args.db) if args.db else generated(args.cells, args.runs, args.spread, args.seed)

    def learned(safety: float, allowance: float):
        return lambda earlier, cell: predict(cell, {}, [Past(cell, w, {}) for w in reversed(earlier)], args.fixed,
                                             safety=safety, allowance_min=allowance,
                                             max_time_min=args.max_time).minutes

    policies = [(f"fixed {args.fixed} min", lambda earlier, cell: min(args.fixed, args.max_time)),
                ("learned: × 1.5 + 1 min (default)", learned(1.5, 1.0)),
                ("learned: × 1.75 + 1 min", learned(1.75, 1.0)),
                ("learned: × 2 + 1 min (a noisy site)", learned(2.0, 1.0)),
                ("learned: × 2 + 3 min (the first default)", learned(2.0, 3.0))]
    source = args.db or f"generated: {args.cells} cells × {args.runs} runs, spread {args.spread}"
    print(f"history: {source}")
    print(f"{'policy':40} {'runs':>6} {'timed out':>10} {'asked÷used median':>18} {'p95':>8}")
    for name, policy in policies:
        out, median, p95, n = replay(history, policy)
        print(f"{name:40} {n:6d} {out:10.2%} {median:18.2f} {p95:8.2f}")


if __name__ == "__main__":
    main()
