"""What the test cluster can place, against the real four-node Slurm cluster of slurm/.

Its nodes behind p100 (each this machine's CPUs, ~95 % of its memory, 2 fake k20m and 2 fake
p100 GPUs) are smaller than conf/hardware/p100.yaml asks (16 CPUs, 64 GB): the README's Slurm example is refused
before sbatch, naming the node. A job that was let through anyway waits PENDING
(PartitionConfig) for ever: `status` says it can never start and ends it `unplaceable`.
Arrays are split at MaxArraySize (lowered here with `cluster.max_array_size`). Each test is a
few seconds to a minute: nothing here trains to the end.
"""
import shutil
import subprocess
import time

import pytest

from helpers import SMALL, orchestrator, rows

pytestmark = pytest.mark.slow


@pytest.fixture
def counted(slurm_workdir, tmp_path_factory):
    """The slurm_workdir with every sbatch going through a wrapper that records its arguments, and
    the `--array` and `--job-name` lines of the script it submits."""
    tmp, env = slurm_workdir
    bin_dir, calls = tmp_path_factory.mktemp("bin"), tmp / "sbatch-calls"
    real = shutil.which("sbatch", path=env["PATH"])
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\nfor last; do :; done\necho "$@" >> {calls}\n'
                                    f'grep -h -e "--array" -e "--job-name" "$last" >> {calls}.lines 2>/dev/null\n'
                                    f'exec {real} "$@"\n')
    (bin_dir / "sbatch").chmod(0o755)
    return (tmp, {**env, "PATH": f"{bin_dir}:{env['PATH']}"}), calls


def sbatch_calls(calls):
    return calls.read_text().splitlines() if calls.exists() else []


def test_the_readme_example_is_refused_at_once_naming_the_node(counted):
    slurm_workdir, calls = counted
    started = time.time()
    launched = orchestrator(["-m", "cluster=slurm", "framework=caffe,tf,torch", "gpus=1,2", "hardware=p100",
                             "dry_run=false"], slurm_workdir)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    out = " ".join(launched.stdout.split())  # (rich wraps long lines)
    assert "0 cells submitted" in out and "6 refused" in out, out
    assert out.count("partition p100 cannot run it: --cpus-per-task=16, but its largest node has") == 6, out
    p100_nodes = subprocess.run(["sinfo", "-h", "-N", "-p", "p100", "-o", "%N"], env=slurm_workdir[1],
                                capture_output=True, text=True, check=True).stdout.split()
    assert "--mem=64G, but its largest node has" in out and any(f"({n})" in out for n in p100_nodes), (p100_nodes, out)
    assert sbatch_calls(calls) == []  # never submitted
    failed = rows(slurm_workdir, "select state, error_class, error_message from runs")
    assert len(failed) == 6 and {(s, c) for s, c, _ in failed} == {("failed", "unplaceable")}, failed
    status = orchestrator(["status"], slurm_workdir)
    assert "unplaceable: partition p100 cannot run it" in status.stdout, status.stdout
    assert time.time() - started < 60


def test_a_group_bigger_than_the_array_limit_is_split_keeping_the_throttle(counted):
    slurm_workdir, calls = counted
    launched = orchestrator(["-m", *SMALL, "model=lenet", "seed=1,2,3", "cluster.max_array_size=2",
                             "cluster.array_parallelism=1", "hardware.time_min=2"], slurm_workdir)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert "3 cells submitted" in launched.stdout, launched.stdout
    assert len(sbatch_calls(calls)) == 2, calls.read_text()
    lines = calls.with_name(calls.name + ".lines").read_text().split()
    assert sorted(w for w in lines if w.startswith("--array")) == ["--array=0-0%1", "--array=0-1%1"], lines
    names = {w for w in lines if w.startswith("--job-name=orch-")}
    assert len(names) == 2, lines  # each its own recorded name
    jobs = [j for (j,) in rows(slurm_workdir, "select job_id from runs order by job_id")]
    assert len({j.split("_")[0] for j in jobs}) == 2 and len(jobs) == 3, jobs


def test_a_job_that_can_never_start_is_reported_then_ended_unplaceable(slurm_workdir):
    # let the request through (as a cluster without the check would), then follow it
    launched = orchestrator(["-m", "cluster=slurm", "hardware=p100", "hardware.mem_gb=1", "cluster.check_requests=false",
                             "model=lenet", "seed=1,2", "iterations=3", "warmup=1"], slurm_workdir)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    jobs = [j for (j,) in rows(slurm_workdir, "select job_id from runs order by job_id")]
    assert len(jobs) == 2, jobs
    deadline = time.time() + 30
    while True:  # Slurm gives its reason at its next scheduling pass
        status = orchestrator(["status"], slurm_workdir)
        if "PartitionConfig" in status.stdout or time.time() > deadline:
            break
        time.sleep(1)
    out = " ".join(status.stdout.split())
    assert "submitted: PENDING (PartitionConfig): can never start: the request breaks its partition's" in out, out
    assert "--cpus-per-task=16, but its largest node has" in out and "after its submission" in out, out

    # the user cancels one: unplaceable (rerunnable), not merely cancelled
    subprocess.run(["scancel", jobs[0]], env=slurm_workdir[1], check=True)
    deadline = time.time() + 20
    while True:  # (accounting may take a moment to record the cancellation)
        orchestrator(["status"], slurm_workdir)
        first = rows(slurm_workdir, f"select state, error_class from runs where job_id = '{jobs[0]}'")
        if first[0][0] != "submitted" or time.time() > deadline:
            break
        time.sleep(1)
    assert first == [("failed", "unplaceable")], first
    # the other one, once its time is up (here at once): cancelled by `status` and unplaceable
    now = (slurm_workdir[0], {**slurm_workdir[1], "ORCHESTRATOR_UNPLACEABLE_AFTER_MIN": "0"})
    status = orchestrator(["status"], now)
    ended = rows(slurm_workdir, f"select state, error_class, error_message from runs where job_id = '{jobs[1]}'")
    assert ended[0][:2] == ("failed", "unplaceable"), (ended, status.stdout)
    assert "could never start" in ended[0][2] and "--cpus-per-task=16" in ended[0][2], ended
    queued = subprocess.run(["squeue", "-h", "-r", "-j", jobs[1].split("_")[0], "-o", "%i"], env=slurm_workdir[1],
                            capture_output=True, text=True).stdout.split()
    assert queued == [], queued  # no longer waiting in Slurm's queue
    dry = orchestrator(["rerun", "--failed", "--class", "unplaceable", "--dry-run"], slurm_workdir)
    assert "would resubmit 2 repeat" in dry.stdout, dry.stdout
