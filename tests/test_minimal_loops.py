"""The minimal loops' forward-only form (benchmarks/minimal, issue 38 item 7), which
benchmarks/trainer_overhead.py --phase inference runs beside the inference trainer: each times
`warmup + iterations` forward passes of LeNet at batch 4 (~3-8 s a framework here, mostly its import)."""
import json
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = ["--model", "lenet", "--like", "mnist", "--batch-size", "4", "--iterations", "5", "--warmup", "2",
        "--threads", "1"]


def _loop(framework_env, name, *more):
    python, env = framework_env(name)
    return subprocess.run([python, "-m", "benchmarks.minimal.%s_loop" % name, *ARGS, *more], cwd=REPO,
                          env=dict(env, PYTHONPATH=REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=300)


@pytest.mark.parametrize("name", ["torch", "tensorflow", "jax"])
def test_the_forward_only_loop_times_each_batch_and_reports_it(framework_env, name):
    done = _loop(framework_env, name, "--forward-only")
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["forward_only"] is True and len(record["dt"]) == 7 and all(dt > 0 for dt in record["dt"])
    assert record["images_per_sec"] == pytest.approx(4 * 5 / sum(record["dt"][2:]))


def test_the_jax_loop_refuses_training_with_the_way_out(framework_env):
    done = _loop(framework_env, "jax")
    assert done.returncode != 0 and "add --forward-only" in done.stderr, done.stderr[-2000:]


def test_process_clock_runs_the_module_as_main_with_the_cpu_clock(monkeypatch):
    """trainer_overhead.py --clock process: the module runs as `python -m` would run it, with
    time.perf_counter reading the process's CPU time; the wall clock is back afterwards."""
    import runpy
    import sys
    import time
    from benchmarks.minimal import process_clock

    seen = {}

    def run_module(name, run_name, alter_sys):
        seen.update(name=name, run_name=run_name, alter_sys=alter_sys, argv=list(sys.argv),
                    clock=time.perf_counter)

    wall = time.perf_counter
    monkeypatch.setattr(runpy, "run_module", run_module)
    assert process_clock.main(["trainers.numpy", "--model", "lenet"]) == 0
    assert seen == {"name": "trainers.numpy", "run_name": "__main__", "alter_sys": True,
                    "argv": ["trainers.numpy", "--model", "lenet"], "clock": time.process_time}
    assert time.perf_counter is wall


def test_process_clock_runs_a_trainer_and_refuses_other_modules(framework_env):
    python, env = framework_env("numpy")
    done = subprocess.run([python, "-m", "benchmarks.minimal.process_clock", "os"], cwd=REPO,
                          env=dict(env, PYTHONPATH=REPO), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "trainers.<framework>" in done.stderr
    done = subprocess.run(
        [python, "-m", "benchmarks.minimal.process_clock", "trainers.numpy", "--model", "lenet",
         "--dataset", "synthetic", "--like", "mnist", "--batch-size", "4", "--threads", "1", "--gpus", "0",
         "--warmup", "1", "--phase", "inference", "--min-batches", "3", "--min-seconds", "0"],
        cwd=REPO, env=dict(env, PYTHONPATH=REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        universal_newlines=True, timeout=300)
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0, done.stderr[-3000:]
    assert [e["event"] for e in events][-1] == "run_end" and events[-1]["steps"] == 3
