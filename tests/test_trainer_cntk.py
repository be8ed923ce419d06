"""The CNTK trainer, for real: CNTK 2.7 on Python 3.6 in its venv (containers/cntk/).

The environment is the one the venv runtime builds for `framework=cntk` (first use: about a
minute; skipped, with the reason, where no Python 3.6 exists). Runs: LeNet on synthetic data
and on generated MNIST files, an ImageNet-shaped network at a tiny batch, the refusals
(fp16 and bf16 on the CPU, GPUs on the CPU build), a sweep through the orchestrator into
results.db, and the environment's own failure mode (no Python 3.6: `unsupported`).

The several-GPU path (MPI ranks under mpiexec) is checked without GPUs: its command line,
the ranks' place from OpenMPI's variables, the relay of tagged rank output, a real
`mpiexec` starting two trainer ranks (which refuse: no GPU) and CNTK's data-parallel learner
averaging two CPU ranks' gradients. Training several GPUs is not checked here.
"""
import io
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, framework_python, model_counts, recipe_env
from test_sweep import sweep_rows
from test_trainer_protocol import check_run as protocol_check_run, run_trainer

pytestmark = pytest.mark.slow

FAST = ["--iterations", "3", "--warmup", "1", "--threads", "2"]


@pytest.fixture(scope="module")
def cntk_python():
    return framework_python("cntk")


def trainer(python, args, timeout=600, env=None):
    """(finished process, events) of the CNTK trainer in its recipe's environment."""
    return run_trainer(python, "cntk", args, {**os.environ, **recipe_env("cntk"), **(env or {})}, timeout)


def model_count(python, model, channels, size, classes):
    return model_counts(python, "cntk", channels, size, classes, [model])[model]


def check_run(done, events, steps, batch):
    """A successful run of `steps` steps (the first one warm-up): the protocol's checks, then CNTK's."""
    assert done.returncode == 0, done.stderr[-3000:]
    start = protocol_check_run(events, warmup=1, iterations=steps - 1, global_batch=batch)
    assert start["framework"] == "cntk" and start["version"] == "2.7"
    assert start["python"].startswith("3.6.")
    assert start["build"]["gpu_build"] is False and start["build"]["max_cpu_threads"] == 2
    assert start["build"]["omp_num_threads"] == "2"
    assert start["build"]["mpi"].startswith("libmpi.so.")
    assert all(e["loss"] > 0 for e in events if e["event"] == "step")
    return start


def test_lenet_on_synthetic_mnist(cntk_python):
    done, events = trainer(cntk_python, ["--model", "lenet", "--dataset", "synthetic",
                                         "--like", "mnist", "--batch-size", "16"] + FAST)
    start = check_run(done, events, 4, 16)
    assert start["params"] == model_count(cntk_python, "lenet", 1, 28, 10) == 431080
    assert start["input_shape"] == [1, 28, 28] and start["devices"]
    assert "Selected CPU" in done.stderr  # CNTK's own output went to stderr, not the stream


def test_lenet_on_mnist_files(cntk_python, tmp_path):
    from trainers.common.data import write_mnist
    write_mnist(str(tmp_path / "mnist"), n=100, seed=1)
    done, events = trainer(cntk_python, ["--model", "lenet", "--dataset", "mnist",
                                         "--data-dir", str(tmp_path / "mnist"),
                                         "--batch-size", "8"] + FAST)
    start = check_run(done, events, 4, 8)
    assert start["dataset"] == "mnist" and start["params"] == 431080


def test_lenet_on_cifar10_shape(cntk_python):
    done, events = trainer(cntk_python, ["--model", "lenet", "--dataset", "synthetic",
                                         "--like", "cifar10", "--batch-size", "4"] + FAST)
    start = check_run(done, events, 4, 4)
    assert start["params"] == model_count(cntk_python, "lenet", 3, 32, 10) == 657080


def test_alexnet_at_a_tiny_batch(cntk_python):
    done, events = trainer(cntk_python, ["--model", "alexnet", "--dataset", "synthetic",
                                         "--like", "imagenet", "--batch-size", "2",
                                         "--iterations", "2", "--warmup", "1",
                                         "--threads", "2"])
    start = check_run(done, events, 3, 2)
    assert start["params"] == model_count(cntk_python, "alexnet", 3, 224, 1000) == 61100840
    assert start["input_shape"] == [3, 224, 224] and start["classes"] == 1000


@pytest.mark.parametrize("args, words", [
    (["--precision", "fp16"], "fp16"),
    (["--precision", "bf16"], "bfloat16"),
    (["--gpus", "1"], "GPU"),
    (["--gpus", "2"], "GPU"),  # the MPI-launching parent refuses before starting mpiexec
])
def test_refusals_end_unsupported(cntk_python, args, words):
    done, events = trainer(cntk_python, ["--model", "lenet", "--dataset", "synthetic",
                                         "--like", "mnist", "--batch-size", "4"] + FAST + args)
    assert done.returncode == 3, done.stderr[-2000:]
    assert [e["event"] for e in events] == ["error"], events
    assert events[0]["class"] == "unsupported" and words in events[0]["message"]


def test_sweep_lands_rows_in_results_db(cntk_python, tmp_path):
    assert sweep_rows("cntk", tmp_path) == [("cntk", "alexnet", "done", 1, 61100840),
                                           ("cntk", "lenet", "done", 1, 431080)]


def test_no_python_36_means_unsupported(tmp_path):
    from orchestrator.runtime import EnvironmentError_, VenvRuntime
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    shutil.copy(str(REPO / "containers" / "cntk" / "requirements.txt"), str(recipe))
    (recipe / "env.yaml").write_text(
        "python: [%s/no-such/python3.6]\nrequirements: requirements.txt\n" % tmp_path)
    runtime = VenvRuntime("cntk", cache=tmp_path / "cache", recipe_dir=recipe)
    with pytest.raises(EnvironmentError_) as caught:
        runtime.ensure(log=lambda line: None)
    assert caught.value.error_class == "unsupported"
    assert "no-such/python3.6" in str(caught.value)
    assert not runtime.is_ready()


# ------------------------------------------------------------ several GPUs: MPI ranks

def test_mpi_command_line_and_rank_place():
    from trainers.cntk import mpi
    env = {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/env/mpi-compat", "SECRET": "x"}
    argv = ["--model", "resnet50", "--dataset", "synthetic", "--like", "imagenet",
            "--batch-size", "64", "--gpus", "4"]
    command = mpi.mpiexec_command("/opt/openmpi/bin/mpiexec", 4, "trainers.cntk", argv,
                                  python="/env/bin/python", environ=env, root=True)
    assert command == ["/opt/openmpi/bin/mpiexec", "-n", "4", "--tag-output", "--bind-to",
                       "none", "--allow-run-as-root", "-x", "PATH", "-x", "LD_LIBRARY_PATH",
                       "/env/bin/python", "-m", "trainers.cntk"] + argv
    assert "--allow-run-as-root" not in mpi.mpiexec_command("mpiexec", 2, "m", [],
                                                            environ={}, root=False)
    assert mpi.rank_from_mpi_env({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
                                  "OMPI_COMM_WORLD_LOCAL_RANK": "1"}) == (3, 4, 1)
    assert mpi.rank_from_mpi_env({"PMI_RANK": "1", "PMI_SIZE": "2"}) == (1, 2, 1)
    assert mpi.rank_from_mpi_env({}) is None
    assert mpi.trainer_rank_env((3, 4, 1)) == {"TRAINER_RANK": "3", "TRAINER_WORLD_SIZE": "4",
                                               "TRAINER_LOCAL_RANK": "1"}
    assert mpi.wants_mpi(argv, environ={})
    assert not mpi.wants_mpi(argv, environ={"OMPI_COMM_WORLD_RANK": "0",
                                            "OMPI_COMM_WORLD_SIZE": "4"})
    assert not mpi.wants_mpi(argv[:-1] + ["1"], environ={})
    assert mpi.parse_tagged('[1,2]<stdout>:{"event": "step"}') == (2, "stdout",
                                                                   '{"event": "step"}')
    assert mpi.parse_tagged("plain") is None


def _relay_script(lines, code=0):
    """A stand-in for mpiexec: prints tagged lines, exits with `code`."""
    return [sys.executable, "-c", "import sys\nfor l in %r: print(l)\nsys.exit(%d)"
            % (list(lines), code)]


def _relayed(command):
    from trainers.common.events import Events
    from trainers.cntk import mpi
    out = io.StringIO()
    code = mpi._run_ranks(command, Events(out), dict(os.environ))
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def test_mpi_relay_forwards_rank_0_and_prefers_specific_errors():
    ev = lambda rank, record: "[1,%d]<stdout>:%s" % (rank, json.dumps(record))
    good = [ev(0, {"event": "run_start", "t": 1.0}), ev(1, {"event": "run_start", "t": 1.1}),
            ev(0, {"event": "step", "t": 2.0}), "[1,1]<stderr>:noise",
            ev(1, {"event": "run_end", "t": 3.1}), ev(0, {"event": "run_end", "t": 3.0})]
    code, events = _relayed(_relay_script(good))
    assert code == 0 and [(e["event"], e["t"]) for e in events] == [
        ("run_start", 1.0), ("step", 2.0), ("run_end", 3.0)]

    bad = [ev(0, {"event": "error", "t": 1.0, "class": "crash", "message": "peer gone"}),
           ev(1, {"event": "error", "t": 1.0, "class": "out_of_memory", "message": "oom"})]
    code, events = _relayed(_relay_script(bad, code=1))
    assert code == 4 and events[-1]["class"] == "out_of_memory"
    assert events[-1]["message"] == "rank 1: oom"

    code, events = _relayed(_relay_script([ev(0, {"event": "run_start", "t": 1.0})], code=9))
    assert code == 1 and events[-1]["class"] == "crash" and "exit status 9" in \
        events[-1]["message"]


def _real_mpiexec():
    from trainers.cntk import mpi
    found = mpi.find_mpiexec(os.environ)
    if found is None:
        pytest.skip("no mpiexec here (Debian: apt-get install openmpi-bin)")
    return found


def test_real_mpiexec_starts_trainer_ranks(cntk_python):
    """mpiexec starts two ranks of the trainer with the command line the parent builds; each
    takes its place from OpenMPI's variables and, on this CPU build, refuses --gpus 2; the
    relay reports rank 0's refusal. (Training on GPUs is what remains unchecked.)"""
    from trainers.cntk import mpi
    argv = ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist",
            "--batch-size", "4", "--gpus", "2"] + FAST
    env = dict(os.environ, **recipe_env("cntk"))
    command = mpi.mpiexec_command(_real_mpiexec(), 2, "trainers.cntk", argv,
                                  python=cntk_python, environ=env)
    from trainers.common.events import Events
    out = io.StringIO()
    code = mpi._run_ranks(command, Events(out), dict(env, PYTHONPATH=str(REPO)))
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert code == 3, events
    assert [e["event"] for e in events] == ["error"]
    assert events[0]["class"] == "unsupported" and "GPU" in events[0]["message"]


PROBE = r"""
import warnings; warnings.simplefilter("ignore")
import numpy as np, cntk as C
C.device.try_set_default_device(C.device.cpu())
x = C.input_variable(4); y = C.input_variable(2)
z = C.layers.Dense(2)(x)
learner = C.train.distributed.data_parallel_distributed_learner(C.momentum_sgd(
    z.parameters, C.learning_parameter_schedule(0.1, minibatch_size=4),
    C.momentum_schedule(0.9), unit_gain=False), num_quantization_bits=32)
trainer = C.Trainer(z, (C.cross_entropy_with_softmax(z, y), None), [learner])
rank = C.train.distributed.Communicator.rank()
for i in range(3):  # different data per rank: equal weights afterwards need the allreduce
    trainer.train_minibatch({x: np.full((2, 4), rank + 1.0, np.float32),
                             y: np.array([[1, 0], [0, 1]], np.float32)})
print("%d %d %.6f" % (rank, C.train.distributed.Communicator.num_workers(),
                      float(z.parameters[0].value.sum())), flush=True)
C.train.distributed.Communicator.finalize()
"""


def test_data_parallel_learner_aggregates_over_mpi_on_cpu(cntk_python, tmp_path):
    """CNTK's data-parallel learner over two CPU ranks through the venv's OpenMPI 4 stand-in
    libraries: a smoke test of the distributed code path only (the 1.10/4.x ABI mapping is
    not a supported way to train; the cluster image has the real OpenMPI 1.10)."""
    from trainers.cntk import mpi
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = dict(os.environ, **recipe_env("cntk"))
    command = mpi.mpiexec_command(_real_mpiexec(), 2, "unused", [], environ=env)
    command = command[:command.index(sys.executable)] + [cntk_python, str(script)]
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = sorted(mpi.parse_tagged(l)[2] for l in done.stdout.splitlines()
                   if mpi.parse_tagged(l) and mpi.parse_tagged(l)[1] == "stdout")
    assert [l.split()[:2] for l in lines] == [["0", "2"], ["1", "2"]], done.stdout
    assert lines[0].split()[2] == lines[1].split()[2], lines  # the same weights on both
