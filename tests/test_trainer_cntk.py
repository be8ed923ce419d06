"""What only the CNTK trainer has; what every trainer must do is tests/test_conformance.py's.

CNTK 2.7 runs on Python 3.6 in its venv (containers/cntk/; skipped, with the reason, where no
Python 3.6 exists). Checked here: --threads reaches CNTK's own pools and the build it reports,
the environment's failure mode (no Python 3.6: `unsupported`), and the several-GPU path (MPI
ranks under mpiexec) without GPUs: its command line, the ranks' place from OpenMPI's
variables, mpiexec's tagged output relayed by the common launcher, and CNTK's data-parallel
learner averaging two CPU ranks' gradients. (A CPU-replica run through mpiexec is the
conformance suite's.) Training several GPUs is not checked here.
"""
import io
import json
import os
import shutil
import subprocess
import sys

import pytest

from trainers.common.events import Events
from trainers.common.launch import launch, start
from trainers.cntk import mpi

pytestmark = pytest.mark.slow


def test_threads_reach_cntk_and_the_build_says_so(framework_run, run_checks):
    proc, events = framework_run("cntk", [
        "--model", "lenet", "--dataset", "synthetic", "--like", "mnist", "--batch-size", "4",
        "--iterations", "1", "--warmup", "1", "--threads", "2"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    start_event = run_checks(events, 1, 1, 4)
    assert start_event["version"] == "2.7" and start_event["python"].startswith("3.6.")
    build = start_event["build"]
    assert build["gpu_build"] is False and build["max_cpu_threads"] == 2
    assert build["omp_num_threads"] == "2" and build["mpi"].startswith("libmpi.so.")
    assert "Selected CPU" in proc.stderr  # CNTK's own output went to the log


def test_no_python_36_means_unsupported(tmp_path, repo_root):
    from orchestrator.envs.venv_runtime import EnvironmentNotReady, VenvRuntime
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    shutil.copy(str(repo_root / "containers" / "cntk" / "requirements.txt"), str(recipe))
    (recipe / "env.yaml").write_text(
        "python: [%s/no-such/python3.6]\nrequirements: requirements.txt\n" % tmp_path)
    runtime = VenvRuntime("cntk", cache=tmp_path / "cache", recipe_dir=recipe)
    with pytest.raises(EnvironmentNotReady) as caught:
        runtime.ensure(log=lambda line: None)
    assert caught.value.error_class == "unsupported"
    assert "no-such/python3.6" in str(caught.value)
    assert not runtime.is_ready()


# ------------------------------------------------------------ several GPUs: MPI ranks

def test_mpi_command_line_and_rank_place():
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
    assert mpi.parse_tagged('[1,2]<stdout>:{"event": "step"}') == (2, "stdout",
                                                                   '{"event": "step"}')
    assert mpi.parse_tagged("plain") is None


class _StandIn(mpi.MPIRanks):
    """mpiexec's part played by a script that prints tagged lines and exits with `code`."""

    def __init__(self, lines, code):
        mpi.MPIRanks.__init__(self)
        self.script = "import sys\nfor l in %r: print(l)\nsys.exit(%d)" % (list(lines), code)

    def start(self, module, argv, nprocs):
        return [("mpiexec", start([sys.executable, "-c", self.script], dict(os.environ)), None)]


def _relayed(lines, code=0):
    out = io.StringIO()
    status = launch("unused", [], 2, Events(out), ranks=_StandIn(lines, code))
    return status, [json.loads(line) for line in out.getvalue().splitlines()]


def test_mpiexec_output_is_relayed_by_the_common_launcher():
    ev = lambda rank, record: "[1,%d]<stdout>:%s" % (rank, json.dumps(record))
    good = [ev(0, {"event": "run_start", "t": 1.0}), ev(1, {"event": "run_start", "t": 1.1}),
            ev(0, {"event": "step", "t": 2.0}), "[1,1]<stderr>:noise",
            ev(1, {"event": "run_end", "t": 3.1}), ev(0, {"event": "run_end", "t": 3.0})]
    code, events = _relayed(good)
    assert code == 0 and [(e["event"], e["t"]) for e in events] == [
        ("run_start", 1.0), ("step", 2.0), ("run_end", 3.0)]

    bad = [ev(0, {"event": "error", "t": 1.0, "class": "crash", "message": "peer gone"}),
           ev(1, {"event": "error", "t": 1.0, "class": "out_of_memory", "message": "oom"})]
    code, events = _relayed(bad, code=1)
    assert code == 4 and events[-1]["class"] == "out_of_memory"
    assert events[-1]["message"] == "rank 1: oom"

    code, events = _relayed([ev(0, {"event": "run_start", "t": 1.0}), "[1,1]<stderr>:boom"],
                            code=9)
    assert code == 1 and events[-1]["class"] == "crash"
    assert events[-1]["message"] == "mpiexec ended (exit status 9) without reporting an error"
    assert events[-1]["traceback"] == "boom"


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


def test_data_parallel_learner_aggregates_over_mpi_on_cpu(framework_env, tmp_path):
    """CNTK's data-parallel learner over two CPU ranks through the venv's OpenMPI 4 stand-in
    libraries: the ranks end with the same weights from different data (the 1.10/4.x ABI
    mapping is not a supported way to train; the cluster image has the real OpenMPI 1.10)."""
    python, env = framework_env("cntk")
    mpiexec = mpi.find_mpiexec(env)
    if mpiexec is None:
        pytest.skip("no mpiexec here (Debian: apt-get install openmpi-bin)")
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    command = mpi.mpiexec_command(mpiexec, 2, "unused", [], python=python, environ=env)
    command = command[:command.index(python)] + [python, str(script)]
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = sorted(t[2] for t in map(mpi.parse_tagged, done.stdout.splitlines())
                   if t and t[1] == "stdout")
    assert [l.split()[:2] for l in lines] == [["0", "2"], ["1", "2"]], done.stdout
    assert lines[0].split()[2] == lines[1].split()[2], lines  # the same weights on both
