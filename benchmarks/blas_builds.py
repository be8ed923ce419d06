"""The BLAS builds side by side (issue 39): one sweep over the builds numpy and Caffe declare
(containers/<fw>/builds.yaml: Debian's OpenBLAS, BLIS, ATLAS and netlib's reference BLAS, and Intel's
MKL from PyPI's `mkl` wheel), its images/s per build (median, min-max over the repeats) and each
build's ratio to `reference` and to `openblas` at the same threads, with the BLAS each run says it
loaded (run_start's `blas`, read from the process: the check that a build ran on its own library).

Each repeat is its own sweep (force=true) over every build, the builds' order rotated from one
repeat to the next, so a change in the machine's load falls on every build rather than on the one
that ran then; `uptime` is printed before and after (the machine is shared).

CI makes only numpy's `reference` build (orchestrator/envs/builds.py's CI_BUILDS); this makes the
others on first use (a numpy build: seconds; a Caffe build: its pip install, the compiled Caffe
copied from build_caffe.sh's cache; `mkl`: its 220 MB wheel). `--torch` adds a sweep of torch's `torch-2.14` build against
the default 2.13.0 (PyPI's CUDA wheel and its nvidia-* packages: gigabytes, many minutes) and the
per-cell verdict of `orchestrator compare --base build=default --new build=torch-2.14`.

    .venv/bin/python benchmarks/blas_builds.py [--frameworks numpy,caffe] [--models lenet] [--repeats 3]
        [--builds reference,openblas,blis,atlas,mkl] [--threads 1,2] [--batch-size N] [--iterations 20]
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
sys.path.insert(0, str(REPO))

from orchestrator.report.builds import blas_release  # noqa: E402

BUILDS = ("reference", "openblas", "blis", "atlas", "mkl")
#: the builds each one's figures are divided by
BASES = ("reference", "openblas")


def orchestrator(args, folder):
    """`python -m orchestrator ARGS` in the benchmark's own folder (its database, runs and data)."""
    env = dict(os.environ, ORCHESTRATOR_DB=f"sqlite:///{folder}/results.db", ORCHESTRATOR_RUNS=f"{folder}/runs",
               ORCHESTRATOR_DATA=f"{folder}/data", PYTHONPATH=str(REPO), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=folder, env=env, check=True,
                          stdout=subprocess.PIPE, universal_newlines=True).stdout


def sweep(folder, overrides):
    """One sweep, waited for and collected; its seconds."""
    start = time.monotonic()
    orchestrator(["-m", *overrides], folder)
    con = sqlite3.connect(str(folder / "results.db"))
    while True:  # `status` asks the backend and records the runs' states (tests/helpers.wait_until_final)
        orchestrator(["status"], folder)
        if not con.execute("select count(*) from runs where state in ('pending','submitted','running')").fetchone()[0]:
            break
        time.sleep(5)
    orchestrator(["collect"], folder)
    return time.monotonic() - start


def uptime():
    """The machine's load averages (1, 5, 15 min), as `uptime` prints them."""
    return subprocess.run(["uptime"], stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()


#: the settings a run's images/s depends on beside its build: only runs equal in all of them are pooled or
#: divided (a folder kept with --keep may hold sweeps at other batch sizes or iterations)
SAME = ("threads", "batch_size", "iterations", "warmup")


def figures(folder):
    """{(framework, model, (SAME's values), build): ([images/s of each done run], {BLAS each said it loaded})}."""
    con = sqlite3.connect(str(folder / "results.db"))
    found = {}
    for framework, model, *same, build, value, provenance in con.execute(
            "select re.framework, re.model, " + ", ".join("re." + s for s in SAME) + ", re.build, re.images_per_sec, "
            "ru.provenance from results re join runs ru on ru.uid = re.run where re.state = 'done'"):
        values, loaded = found.setdefault((framework, model, tuple(same), build or "default"), ([], set()))
        values.append(value)
        for lib in (json.loads(provenance or "{}").get("framework") or {}).get("blas") or []:
            loaded.add(blas_release(lib))  # named as the builds page names it
    return found


def show(found):
    """A row per framework, model, settings (SAME: threads, batch, iterations+warmup) and build: the median
    and range of its runs' images/s and the median's ratio to each of BASES' at the same settings."""
    print(f"{'framework/model':18} {'thr':>3} {'batch':>5} {'steps':>6} {'build':10} {'n':>2} {'images/s':>9} "
          f"{'min-max':>17} " + " ".join(f"{'x ' + base:>11}" for base in BASES) + "  BLAS loaded")
    for (framework, model, same, build), (values, loaded) in sorted(found.items(), key=str):
        ratios = []
        for base in BASES:
            other = found.get((framework, model, same, base))
            ratios.append(statistics.median(values) / statistics.median(other[0]) if other else float("nan"))
        threads, batch, iterations, warmup = same
        span = f"{min(values):.1f}-{max(values):.1f}"
        print(f"{framework + '/' + model:18} {threads or '-':>3} {batch or '-':>5} {f'{warmup}+{iterations}':>6} "
              f"{build:10} {len(values):>2} {statistics.median(values):>9.1f} {span:>17} "
              + " ".join(f"{r:>11.2f}" for r in ratios) + f"  {', '.join(sorted(loaded))}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frameworks", default="numpy,caffe")
    parser.add_argument("--models", default="lenet")
    parser.add_argument("--repeats", type=int, default=3, help="sweeps, each over every build in turn")
    parser.add_argument("--builds", default=",".join(BUILDS))
    parser.add_argument("--threads", default=None, help="threads=, e.g. 1,2 (default: the CPUs the job gets)")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="the folder to run in, kept (default: a temporary one)")
    parser.add_argument("--torch", action="store_true", help="also torch's torch-2.14 build against the default")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="blas-builds-"))
    folder.mkdir(parents=True, exist_ok=True)
    chosen = args.builds.split(",")
    fixed = [f"framework={args.frameworks}", f"model={args.models}", f"iterations={args.iterations}",
             f"warmup={args.warmup}", "force=true"] + (["threads=" + args.threads] if args.threads else []) \
        + ([f"batch_size={args.batch_size}"] if args.batch_size else [])
    print("load before:", uptime())
    for repeat in range(args.repeats):
        order = chosen[repeat % len(chosen):] + chosen[:repeat % len(chosen)]
        seconds = sweep(folder, [*fixed, f"build={','.join(order)}"])
        print(f"repeat {repeat + 1}: {seconds:.0f} s (environments built on first use included), load {uptime()}")
    print(f"load after: {uptime()}; in {folder}")
    show(figures(folder))
    if args.torch:
        seconds = sweep(folder, ["framework=torch", f"model={args.models}", "build=default,torch-2.14",
                                 f"repeats={args.repeats}", "iterations=20", "warmup=2"])
        print(f"torch builds: {seconds:.0f} s")
        print(subprocess.run([sys.executable, "-m", "orchestrator", "compare", "--base", "build=default",
                              "--new", "build=torch-2.14"], cwd=folder, universal_newlines=True,
                             env=dict(os.environ, ORCHESTRATOR_DB=f"sqlite:///{folder}/results.db",
                                      PYTHONPATH=str(REPO), COLUMNS="200"), stdout=subprocess.PIPE).stdout)


if __name__ == "__main__":
    main()
