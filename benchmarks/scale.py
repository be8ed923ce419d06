"""The orchestrator at scale, one table from one run (issue 13, item 6).

Measures, on this machine, the orchestrator's own cost (never a trainer's):

- **submit**: `python -m orchestrator -m cluster=slurm hardware=cpu12,p100 seed=range(0,N/2)`
  for N = 100, 1,000, 5,000 cells, as a user types it (a new process, wall time from start to
  exit), against a fake Slurm on PATH: `sbatch` answers at once and counts its calls, `scontrol`
  describes a site of many nodes (MaxArraySize 10001), `sacct`/`squeue` know nothing. So only
  the orchestrator's work counts: expansion, the sweep's rows, the pickles, the sbatch text;
- the same 1,000 with `dry_run=true`, and typed again once submitted (every cell skipped);
- **collect**, **status**, **results** (`benchmarks/scale_read.py`: 1,000 and 10,000 result
  files; 100,000 runs);
- **trainer ratios** (`benchmarks/trainer_overhead.py`, only with `--only ...,trainers`: it
  takes minutes per framework).

Not a test: the figures go into docs/scale.md. `tests/test_sweep.py` asserts what may be
asserted (the sbatch counts, the fast and the plain expansion naming the same cells).

    .venv/bin/python benchmarks/scale.py [--submit 100,1000,5000] [--only submit,collect,status,results,help]
                                         [--db URL]

`--db URL` (a server such as `scripts/postgres.sh url` prints) measures collect, status and results
on databases made there (benchmarks/scale_read.py); submit stays on SQLite files.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import scale_read  # noqa: E402
from scale_read import Row, command_env  # noqa: E402

#: A site as `scontrol -a show partition -o` prints it: the hardware cpu12 and p100 name.
PARTITIONS = """\
PartitionName=cpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=2-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=cpu[001-064] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=3072 TotalNodes=64 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=3072,mem=12288000M,node=64,billing=3072
PartitionName=p100 AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=2-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=gpu[01-16] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=512 TotalNodes=16 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=512,mem=2048000M,node=16,billing=512,gres/gpu=32
"""
NODE = ("NodeName={name} Arch=x86_64 CoresPerSocket=24 CPUAlloc=0 CPUEfctv={cpus} CPUTot={cpus} CPULoad=0.01 "
        "AvailableFeatures=(null) ActiveFeatures=(null) Gres={gres} NodeAddr={name} NodeHostName={name} "
        "Version=22.05.8 RealMemory={mem} AllocMem=0 FreeMem={mem} Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 "
        "TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions={partition} CfgTRES=cpu={cpus},mem={mem}M,billing={cpus}")
CONFIG = """\
Configuration data as of 2026-11-23T15:40:16
MaxArraySize            = 10001
MaxJobCount             = 100000
SLURM_VERSION           = 22.05.8
"""


def fake_slurm(bin_dir: Path) -> tuple[dict[str, str], Path]:
    """PATH with a Slurm that answers at once: `sbatch` counts its calls (one line each in the
    returned file) and hands out job ids; `scontrol` describes the site above; `sacct`/`squeue`
    list nothing (no earlier submission to adopt); `srun` is there for submitit to find."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    calls = bin_dir / "sbatch.calls"
    nodes = [NODE.format(name=f"cpu{i:03d}", cpus=48, mem=192000, gres="(null)", partition="cpu") for i in range(1, 65)]
    nodes += [NODE.format(name=f"gpu{i:02d}", cpus=32, mem=128000, gres="gpu:p100:2", partition="p100")
              for i in range(1, 17)]
    (bin_dir / "partitions.txt").write_text(PARTITIONS)
    (bin_dir / "nodes.txt").write_text("\n".join(nodes) + "\n")
    (bin_dir / "config.txt").write_text(CONFIG)
    scripts = {
        "sbatch": f'echo "$@" >> {calls}\nn=$(wc -l < {calls})\necho "Submitted batch job $((1000 + n))"\n',
        "scontrol": (f'case "$*" in *partition*) cat {bin_dir}/partitions.txt;; *node*) cat {bin_dir}/nodes.txt;; '
                     f'*config*) cat {bin_dir}/config.txt;; esac\n'),
        "sacct": "exit 0\n", "squeue": "exit 0\n",
        # submitit looks for `srun` before it submits (it runs inside the job, never here)
        "srun": "echo 'srun: not on a fake cluster' >&2; exit 1\n",
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}, calls


def measure_submit(n: int, workdir: Path, env: dict[str, str], calls: Path) -> dict[str, float]:
    """A first submission of `n` cells (wall and CPU time, sbatch calls), its dry run before it
    and its retype after it (all skipped)."""
    workdir.mkdir(parents=True, exist_ok=True)
    base = ["cluster=slurm", "hardware=cpu12,p100", f"seed=range(0,{n // 2})"]
    cmd_env = {**env, "ORCHESTRATOR_DB": f"sqlite:///{workdir / 'results.db'}",
               "ORCHESTRATOR_RUNS": str(workdir / "runs"), "ORCHESTRATOR_CACHE": str(workdir / "cache")}
    out = {}
    for what, extra in (("dry", ["dry_run=true"]), ("submit", []), ("retype", [])):
        calls.write_text("")
        m = scale_read.time_command(scale_read.orchestrator_argv("-m", *base, *extra), env=cmd_env, cwd=workdir,
                                    repeat=1)
        out[what], out[f"{what}_cpu"] = m["median"], m["cpu"]
        out[f"{what}_sbatch"] = len(calls.read_text().splitlines())
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--submit", default="100,1000,5000", help="cell counts to submit (comma-separated)")
    ap.add_argument("--only", default="submit,collect,status,results,help",
                    help="which measurements (and `trainers` for the trainer ratios: minutes)")
    ap.add_argument("--keep", type=Path, help="work here and keep it (default: a temporary directory)")
    scale_read.add_read_arguments(ap)
    args = ap.parse_args(argv)
    only = set(args.only.split(","))

    def measure(work: Path) -> list[Row]:
        rows: list[Row] = []
        if "submit" in only:
            scale_read.warm_cache()
            env, calls = fake_slurm(work / "fake-slurm")
            measure_submit(2, work / "submit-warm", env, calls)  # compiles what a sweep imports, untimed
            shutil.rmtree(work / "submit-warm", ignore_errors=True)
            for n in (int(x) for x in args.submit.split(",") if x):
                m = measure_submit(n, work / f"submit-{n}", env, calls)
                how = "wall, new process, start → exit; fake sbatch"
                rows.append(Row(f"submit {n:,} cells", f"{m['submit']:.2f} s ({m['submit_cpu']:.2f} s CPU), "
                                f"{m['submit_sbatch']} sbatch calls", how))
                rows.append(Row("  the same, dry_run=true", f"{m['dry']:.2f} s ({m['dry_cpu']:.2f} s CPU)", how))
                rows.append(Row("  typed again (all skipped)", f"{m['retype']:.2f} s ({m['retype_cpu']:.2f} s CPU), "
                                f"{m['retype_sbatch']} sbatch calls", how))
                shutil.rmtree(work / f"submit-{n}", ignore_errors=True)
        rows += scale_read.rows_from_arguments(only, work, args)
        if "trainers" in only:
            done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "trainer_overhead.py")],
                                  env=command_env(), text=True, stdout=subprocess.PIPE)
            print(done.stdout)
        return rows

    return scale_read.print_measured(args.keep, "scale.", measure)


if __name__ == "__main__":
    sys.exit(main())
