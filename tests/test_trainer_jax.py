"""What only the JAX trainer has; what every trainer must do is tests/test_conformance.py's.
Checked here: Flax's pooling reproduces PyTorch's output sizes (ceil mode by right padding,
the adaptive average pool by its bins), bf16 really computes in bfloat16 with float32
parameters, and XLA's allocation failure is classified as out_of_memory."""
import json
import subprocess

import pytest

pytestmark = pytest.mark.slow

POOLING_CHECK = r"""
import json
import numpy as np
import jax.numpy as jnp
from trainers.common import architectures as arch
from trainers.jax.models import _adaptive_avg_pool, _max_pool

# every max pool the tables hold, on sizes where ceil and floor modes differ and where not
pools = set(spec for spec in arch.LENET + arch.ALEXNET + arch.RESNET50_STEM + arch.vgg(arch.VGG16)
            if isinstance(spec, arch.MaxPool))
pools |= set(spec for _, spec in arch.GOOGLENET if isinstance(spec, arch.MaxPool))
pools |= set(branch[0] for branch in arch.inception_branches(arch.GOOGLENET[5][1])
             if isinstance(branch[0], arch.MaxPool))
wrong = []
for spec in sorted(pools):
    for size in range(max(spec.kernel, 3), 40):
        got = _max_pool(jnp.zeros((1, size, size + 1, 2)), spec).shape
        want = (1, arch.pool_size(size, spec), arch.pool_size(size + 1, spec), 2)
        if got != want:
            wrong.append([list(spec), size, got, want])

# PyTorch's adaptive average pool: bin i of n over size s is [floor(i*s/n), ceil((i+1)*s/n))
x = np.random.RandomState(0).rand(2, 13, 9, 3).astype(np.float32)
want = np.empty((2, 6, 6, 3), np.float32)
for i in range(6):
    for j in range(6):
        h0, h1 = i * 13 // 6, -(-(i + 1) * 13 // 6)
        w0, w1 = j * 9 // 6, -(-(j + 1) * 9 // 6)
        want[:, i, j] = x[:, h0:h1, w0:w1].mean(axis=(1, 2))
got = np.asarray(_adaptive_avg_pool(jnp.asarray(x), 6))
even = np.asarray(_adaptive_avg_pool(jnp.asarray(x[:, :12, :6]), 6))
print(json.dumps({"pools": len(pools), "wrong": wrong,
                  "adaptive": float(np.abs(got - want).max()),
                  "even": float(np.abs(even - x[:, :12, :6].reshape(2, 6, 2, 6, 1, 3).mean(axis=(2, 4))).max())}))
"""


def test_pooling_gives_pytorchs_sizes_and_bins(framework_env, repo_root):
    python, env = framework_env("jax")
    out = subprocess.check_output([python, "-c", POOLING_CHECK], cwd=str(repo_root), env=env,
                                  universal_newlines=True, timeout=300,
                                  stderr=subprocess.DEVNULL)
    found = json.loads(out.strip().splitlines()[-1])
    assert found["pools"] >= 5 and found["wrong"] == [], found
    assert found["adaptive"] < 1e-6 and found["even"] < 1e-6, found


def test_bf16_computes_in_bfloat16_with_float32_parameters(framework_run, run_checks):
    proc, events = framework_run("jax", [
        "--model", "lenet", "--dataset", "synthetic", "--like", "mnist", "--batch-size", 8,
        "--iterations", 2, "--warmup", 1, "--threads", 1, "--precision", "bf16"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    start = run_checks(events, 1, 2, 8)
    assert start["build"]["compute_dtype"] == "bfloat16" and start["params"] == 431080
    assert start["build"]["api"] == "flax.linen"


OOM_CHECK = r"""
import json
import jax.numpy as jnp
from trainers.common.errors import classify
from trainers.jax.trainer import JaxTrainer
try:
    jnp.zeros((1 << 50,), jnp.uint8).block_until_ready()  # 1 PiB: refused at once
except Exception as exc:
    caught = exc
print(json.dumps([classify(caught, JaxTrainer())[0],
                  classify(RuntimeError("INVALID_ARGUMENT: bad shape"), JaxTrainer())[0]]))
"""


def test_allocation_failure_is_out_of_memory(framework_env, repo_root):
    python, env = framework_env("jax")
    out = subprocess.check_output([python, "-c", OOM_CHECK], cwd=str(repo_root), env=env,
                                  universal_newlines=True, timeout=300,
                                  stderr=subprocess.DEVNULL)
    assert json.loads(out.strip().splitlines()[-1]) == ["out_of_memory", "crash"]
