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
