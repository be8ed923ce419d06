"""The TensorFlow and MXNet trainers, run for real as a job runs them, speak docs/protocol.md.

Each runs in the environment the orchestrator's venv runtime builds for it (first use:
minutes), as `python -m trainers.<fw>`, and must produce the same event stream as the
PyTorch trainer: run_start with the model's parameter count (the one `models --count`
prints), warm-up steps, warmup_end, measured steps, run_end, exit 0; and an impossible
configuration ends as one `unsupported` error event with exit status 3.
"""
import json
import os
import subprocess

import pytest

from conftest import REPO, framework_python, model_counts
from test_sweep import orchestrator, rows, workdir  # noqa: F401 (workdir is a fixture)
from test_trainer_protocol import check_run, run_trainer
from trainers.common import data
from trainers.common.errors import EXIT_CODES

pytestmark = pytest.mark.slow

FRAMEWORKS = ["tensorflow", "mxnet"]


@pytest.fixture(scope="module", params=FRAMEWORKS)
def fw(request):
    """(framework name, interpreter of its trainer environment)."""
    return request.param, framework_python(request.param)


def train(fw, *argv, **env):
    """Run `python -m trainers.<fw> argv`; return (exit status, events, stderr).
    Fails the test if any stdout line is not a JSON event with `event` and `t`."""
    name, python = fw
    proc, events = run_trainer(python, name, argv, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env))
    return proc.returncode, events, proc.stderr


def count(fw, model, channels, size, classes):
    name, python = fw
    return model_counts(python, name, channels, size, classes, [model])[model]


def test_lenet_synthetic_mnist(fw):
    rc, events, stderr = train(fw, "--model", "lenet", "--dataset", "synthetic", "--like",
                               "mnist", "--batch-size", 16, "--iterations", 4, "--warmup", 2,
                               "--threads", 1, "--seed", 5)
    assert rc == 0, stderr[-3000:]
    start = check_run(events, warmup=2, iterations=4, global_batch=16)
    assert start["framework"] == fw[0]
    assert start["params"] == count(fw, "lenet", 1, 28, 10) == 431080
    assert start["input_shape"] == [1, 28, 28] and start["classes"] == 10
    assert start["devices"] and start["gpus"] == 0 and start["threads"] == 1
    assert start["per_device_batch"] == 16 and start["seed"] == 5
    assert start["version"] and isinstance(start["build"], dict)
    if fw[0] == "tensorflow":
        assert start["build"]["intra_op_threads"] == 1
        assert start["build"]["inter_op_threads"] == 1
        assert start["build"]["xla"] is False and start["build"]["graph"] == "tf.function"
    else:
        assert start["build"]["omp_num_threads"] == "1"
        assert start["build"]["hybridize"] == {"static_alloc": True, "static_shape": True}
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert all(0.5 < loss < 5.0 for loss in losses), losses  # ~ln(10) at the start


def test_lenet_reads_mnist_files(fw, tmp_path):
    data.write_mnist(str(tmp_path), n=50, seed=2, gz=True)
    rc, events, stderr = train(fw, "--model", "lenet", "--dataset", "mnist", "--data-dir",
                               tmp_path, "--batch-size", 8, "--iterations", 3, "--warmup", 1,
                               "--threads", 1)
    assert rc == 0, stderr[-3000:]
    start = check_run(events, warmup=1, iterations=3, global_batch=8)
    assert (start["dataset"], start["like"], start["params"]) == ("mnist", "mnist", 431080)


def test_lenet_reads_cifar10_files_at_native_size(fw, tmp_path):
    data.write_cifar10(str(tmp_path), n=20, seed=4, files=2)
    rc, events, stderr = train(fw, "--model", "lenet", "--dataset", "cifar10", "--data-dir",
                               tmp_path, "--batch-size", 4, "--iterations", 2, "--warmup", 0,
                               "--threads", 1)
    assert rc == 0, stderr[-3000:]
    start = check_run(events, warmup=0, iterations=2, global_batch=4)
    assert start["input_shape"] == [3, 32, 32]
    assert start["params"] == count(fw, "lenet", 3, 32, 10) == 657080


def test_resnet50_synthetic_imagenet(fw):
    rc, events, stderr = train(fw, "--model", "resnet50", "--dataset", "synthetic", "--like",
                               "imagenet", "--batch-size", 2, "--iterations", 1, "--warmup", 1,
                               "--threads", 2)
    assert rc == 0, stderr[-3000:]
    start = check_run(events, warmup=1, iterations=1, global_batch=2)
    assert start["params"] == count(fw, "resnet50", 3, 224, 1000) == 25557032
    assert start["classes"] == 1000 and start["input_shape"] == [3, 224, 224]


def test_tensorflow_xla_is_switched_by_the_environment(fw):
    if fw[0] != "tensorflow":
        pytest.skip("XLA is TensorFlow's")
    rc, events, stderr = train(fw, "--model", "lenet", "--dataset", "synthetic", "--like",
                               "cifar10", "--batch-size", 8, "--iterations", 2, "--warmup", 1,
                               "--threads", 1, ORCH_TF_XLA="1")
    assert rc == 0, stderr[-3000:]
    assert check_run(events, warmup=1, iterations=2, global_batch=8)["build"]["xla"] is True


def test_bf16_on_cpu(fw):
    """TensorFlow trains in mixed bfloat16 on a CPU; MXNet refuses bf16 as unsupported."""
    rc, events, stderr = train(fw, "--model", "lenet", "--dataset", "synthetic", "--like",
                               "cifar10", "--batch-size", 8, "--iterations", 2, "--warmup", 1,
                               "--threads", 1, "--precision", "bf16")
    if fw[0] == "tensorflow":
        assert rc == 0, stderr[-3000:]
        start = check_run(events, warmup=1, iterations=2, global_batch=8)
        assert start["precision"] == "bf16"
        assert start["build"]["mixed_precision_policy"] == "mixed_bfloat16"
    else:
        assert rc == EXIT_CODES["unsupported"] == 3
        assert [e["event"] for e in events] == ["error"]
        assert events[0]["class"] == "unsupported" and "bf16" in events[0]["message"]


LENET = ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist",
         "--iterations", 2, "--warmup", 0, "--threads", 1]


@pytest.mark.parametrize("argv,says", [
    (["--batch-size", 4, "--precision", "fp16"], "fp16 on the CPU"),
    (["--batch-size", 4, "--gpus", 1], "needs CUDA"),
    (["--batch-size", 4, "--gpus", 2, "--scaling", "weak"], "needs CUDA"),
    (["--batch-size", 3, "--gpus", 2], "does not divide among 2 GPUs"),
])
def test_impossible_configuration_is_one_error_event(fw, argv, says):
    rc, events, stderr = train(fw, *(LENET + argv))
    assert rc == EXIT_CODES["unsupported"] == 3
    assert len(events) == 1, events
    assert events[0]["event"] == "error" and events[0]["class"] == "unsupported"
    assert says in events[0]["message"]
    assert "Traceback" not in stderr


OOM_CHECK = r"""
import json, sys
from trainers.common.errors import classify
if sys.argv[1] == "tensorflow":
    import tensorflow as tf
    from trainers.tensorflow.trainer import TensorFlowTrainer as T
    try:
        tf.zeros([1 << 50], tf.uint8)  # 1 PiB: refused by the allocator at once
    except Exception as exc:
        caught = exc
else:
    from trainers.mxnet.trainer import MXNetTrainer as T, _load_mxnet
    mx = _load_mxnet(1)
    # what MXNet raises when cudaMalloc or the host allocator fails (not provoked: a CPU
    # allocation MXNet refuses up front is a size check, and one it accepts is really made)
    caught = mx.base.MXNetError("cudaMalloc retry failed: out of memory")
print(json.dumps([classify(caught, T())[0], classify(ValueError("out of range"), T())[0]]))
"""


def test_allocation_failure_is_out_of_memory(fw):
    out = subprocess.check_output([fw[1], "-c", OOM_CHECK, fw[0]], cwd=str(REPO),
                                  universal_newlines=True, timeout=300,
                                  stderr=subprocess.DEVNULL)
    assert json.loads(out.strip().splitlines()[-1]) == ["out_of_memory", "crash"]


def test_sweep_over_three_frameworks_lands_a_row_per_cell(workdir):  # noqa: F811
    for name in ("tensorflow", "mxnet", "torch"):
        framework_python(name)  # build (or skip) before the jobs need the environments
    launched = orchestrator(["-m", "framework=tf,mxnet,torch", "model=lenet,resnet50",
                             "dataset=synthetic", "iterations=3", "warmup=1", "batch_size=4",
                             "wait=true"], workdir, timeout=1800)
    assert launched.returncode == 0, launched.stdout[-3000:] + launched.stderr[-3000:]
    results = rows(workdir, "select framework, model, params, state, images_per_sec "
                            "from results order by framework, model")
    assert [(r[0], r[1]) for r in results] == [
        ("mxnet", "lenet"), ("mxnet", "resnet50"), ("tensorflow", "lenet"),
        ("tensorflow", "resnet50"), ("torch", "lenet"), ("torch", "resnet50")], results
    assert all(r[3] == "done" and r[4] > 0 for r in results), results
    params = {}
    for framework, model, n, _, _ in results:
        params.setdefault(model, set()).add(n)
    # the same networks everywhere: synthetic data shaped like each model's own dataset
    assert params == {"lenet": {431080}, "resnet50": {25557032}}, params
