"""The BLAS builds side by side (issue 39): one sweep over the builds numpy and Caffe declare
(containers/<fw>/builds.yaml: Debian's OpenBLAS, BLIS, ATLAS and netlib's reference BLAS), its
images/s per build and each build's ratio to `reference`, with the BLAS each run says it loaded
(run_start's `blas`, read from the process: the check that a build ran on its own library).

CI makes only numpy's `reference` build (orchestrator/envs/builds.py's CI_BUILDS); this makes the
others on first use (a numpy build: seconds; a Caffe build: its pip install, the compiled Caffe
copied from build_caffe.sh's cache). `--torch` adds a sweep of torch's `torch-2.14` build against
the default 2.13.0 (PyPI's CUDA wheel and its nvidia-* packages: gigabytes, many minutes) and the
per-cell verdict of `orchestrator compare --base build=default --new build=torch-2.14`.

    .venv/bin/python benchmarks/blas_builds.py [--frameworks numpy,caffe] [--models lenet] [--repeats 3]
        [--keep DIR] [--torch]
"""
import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILDS = ("reference", "openblas", "blis", "atlas")


def orchestrator(args, folder):
    """`python -m orchestrator ARGS` in the benchmark's own folder (its database, runs and data)."""
    env = dict(os.environ, ORCHESTRATOR_DB=f"sqlite:///{folder}/results.db", ORCHESTRATOR_RUNS=f"{folder}/runs",
               ORCHESTRATOR_DATA=f"{folder}/data", PYTHONPATH=str(REPO), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=folder, env=env, check=True,
                          stdout=subprocess.PIPE, universal_newlines=True).stdout


def sweep(folder, overrides):
    """One sweep, waited for and collected; its seconds."""
    start = time.monotonic()
    orchestrator(["-m", *overrides, "iterations=20", "warmup=2"], folder)
    con = sqlite3.connect(str(folder / "results.db"))
    while True:  # `status` asks the backend and records the runs' states (tests/helpers.wait_until_final)
        orchestrator(["status"], folder)
        if not con.execute("select count(*) from runs where state in ('pending','submitted','running')").fetchone()[0]:
            break
        time.sleep(5)
    orchestrator(["collect"], folder)
    return time.monotonic() - start


def figures(folder):
    """{(framework, model, build): ([images/s of each done run], {BLAS each said it loaded})}."""
    con = sqlite3.connect(str(folder / "results.db"))
    found = {}
    for framework, model, build, value, provenance in con.execute(
            "select re.framework, re.model, re.build, re.images_per_sec, ru.provenance from results re "
            "join runs ru on ru.uid = re.run where re.state = 'done'"):
        values, loaded = found.setdefault((framework, model, build or "default"), ([], set()))
        values.append(value)
        for lib in (json.loads(provenance or "{}").get("framework") or {}).get("blas") or []:
            loaded.add(f"{lib['library']} {lib['version'] or ''}".strip())
    return found


def show(found):
    print(f"{'framework/model':22} {'build':12} {'n':>2} {'images/s':>10} {'x reference':>12}  BLAS loaded")
    for (framework, model, build), (values, loaded) in sorted(found.items()):
        base = found.get((framework, model, "reference"))
        ratio = statistics.median(values) / statistics.median(base[0]) if base else float("nan")
        print(f"{framework + '/' + model:22} {build:12} {len(values):>2} {statistics.median(values):>10.1f} "
              f"{ratio:>12.2f}  {', '.join(sorted(loaded))}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frameworks", default="numpy,caffe")
    parser.add_argument("--models", default="lenet")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="the folder to run in, kept (default: a temporary one)")
    parser.add_argument("--torch", action="store_true", help="also torch's torch-2.14 build against the default")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="blas-builds-"))
    folder.mkdir(parents=True, exist_ok=True)
    seconds = sweep(folder, [f"framework={args.frameworks}", f"model={args.models}", f"build={','.join(BUILDS)}",
                             f"repeats={args.repeats}"])
    print(f"BLAS builds: {seconds:.0f} s for the sweep (environments built on first use included), in {folder}")
    show(figures(folder))
    if args.torch:
        seconds = sweep(folder, ["framework=torch", f"model={args.models}", "build=default,torch-2.14",
                                 f"repeats={args.repeats}"])
        print(f"torch builds: {seconds:.0f} s")
        print(subprocess.run([sys.executable, "-m", "orchestrator", "compare", "--base", "build=default",
                              "--new", "build=torch-2.14"], cwd=folder, universal_newlines=True,
                             env=dict(os.environ, ORCHESTRATOR_DB=f"sqlite:///{folder}/results.db",
                                      PYTHONPATH=str(REPO), COLUMNS="200"), stdout=subprocess.PIPE).stdout)


if __name__ == "__main__":
    main()
