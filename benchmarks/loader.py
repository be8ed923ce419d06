"""The ImageNet loader's images/s (trainers/common/imagenet.py): what input=pipeline can feed at most.

    python benchmarks/loader.py                          # a generated tree, 500x375 JPEGs, 1 and all CPUs' workers
    python benchmarks/loader.py --data data/imagenet     # your own ILSVRC tree (train/<wnid>/*.JPEG)
    python benchmarks/loader.py --workers 0,1,2,4 --batch 64 --batches 20 --split test

Prints, per worker count, images/s over `--batches` batches after the first (the pool's start and
the first batch are not counted), with the machine's load average beside it: a loader shares the
CPUs with whatever else runs. The generated images are a smooth gradient plus noise at quality 90
(~110 KB each, close to ImageNet's mean JPEG); real photographs decode at a similar rate for their
size, so use --data for the figure that matters.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from trainers.common import imagenet  # noqa: E402


def write_tree(root: Path, images: int, size: tuple[int, int], seed: int = 0) -> None:
    """`images` JPEGs over 10 classes: a gradient in a random colour plus noise (ImageNet-sized files)."""
    from PIL import Image

    rng = np.random.RandomState(seed)
    width, height = size
    ramp = np.linspace(0.2, 1.0, width)[None, :, None] * np.linspace(0.5, 1.0, height)[:, None, None]
    for k in range(images):
        folder = root / "train" / ("n%08d" % (k % 10))
        folder.mkdir(parents=True, exist_ok=True)
        pixels = ramp * rng.randint(64, 256, size=3) + rng.normal(0, 25, size=(height, width, 3))
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(str(folder / ("%d.JPEG" % k)), quality=90)


def measure(folder: imagenet.ImageFolder, workers: int, batch: int, batches: int) -> float:
    with imagenet.Loader(folder, batch, seed=0, workers=workers) as loader:
        next(loader)
        start = time.perf_counter()
        for _ in range(batches):
            next(loader)
        return batches * batch / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="an ILSVRC tree (default: a generated one in a temporary directory)")
    parser.add_argument("--split", default="train", choices=["train", "test"],
                        help="train: random-resized crop + flip; test: resize 256 + centre crop (val/)")
    parser.add_argument("--workers", default=None, help="comma-separated worker counts (default: 1 and the CPUs)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--images", type=int, default=320, help="generated tree: images")
    parser.add_argument("--size", default="500x375", help="generated tree: WIDTHxHEIGHT")
    args = parser.parse_args(argv)
    cpus = imagenet.default_workers()
    workers = [int(w) for w in args.workers.split(",")] if args.workers else sorted({1, cpus})
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.data) if args.data else Path(tmp)
        if not args.data:
            width, height = (int(v) for v in args.size.split("x"))
            write_tree(root, args.images, (width, height))
            if args.split == "test":
                raise SystemExit("--split test needs --data with a val/ split")
        folder = imagenet.read(str(root), args.split)
        sizes = [os.path.getsize(p) for p in folder.paths[:50]]
        print(f"{len(folder)} images in {root} ({args.split}), mean file {np.mean(sizes) / 1024:.0f} KB; "
              f"batch {args.batch}, {args.batches} batches timed; {os.cpu_count()} CPUs here")
        for n in workers:
            rate = measure(folder, n, args.batch, args.batches)
            print(f"workers={n}: {rate:7.1f} images/s   (load average {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
