"""Several GPUs in CNTK: one MPI rank per GPU, started by `mpiexec`.

CNTK's data-parallel learner (`data_parallel_distributed_learner`) aggregates gradients
over MPI, so its ranks must be one MPI job: they cannot be started as independent
processes with a rendezvous address. `MPIRanks` is the starter `trainers.common.launch`
uses for this trainer instead (`CNTKTrainer.ranks`): the launching parent runs

    mpiexec -n N --tag-output --bind-to none [--allow-run-as-root] -x VAR ... \\
        python -m trainers.cntk <the same arguments>

and the common launcher relays the ranks' events and judges the run as for any other
multi-process run. `--tag-output` prefixes each line of a rank's output with
`[job,rank]<stdout>:`, which is how the ranks are told apart on mpiexec's single stdout
(`MPIRanks.split`). `--bind-to none` keeps OpenMPI from pinning each rank to one core (its
default for two ranks or fewer), which would starve CNTK's CPU threads.

Each rank learns its place from OpenMPI's variables (OMPI_COMM_WORLD_RANK, _SIZE,
_LOCAL_RANK; PMI_RANK/PMI_SIZE under other launchers) and hands it to `trainers.common` as
TRAINER_RANK, TRAINER_WORLD_SIZE and TRAINER_LOCAL_RANK (trainers/cntk/__main__.py).

mpiexec must be the OpenMPI CNTK was built against (1.10: the image of containers/cntk/gpu.yaml); set
CNTK_MPIEXEC to its path when it is not the `mpiexec` on PATH. The local venv maps CNTK's
OpenMPI 1.10 sonames onto OpenMPI 4 (containers/cntk/mpi_compat.sh), which is enough for
one process but not for MPI communication.
"""
import os
import re
import shutil
import sys

from trainers.common.errors import Unsupported
from trainers.common.launch import Ranks, start
from trainers.common.support import CPU_REPLICAS_ENV

MPIEXEC_ENV = "CNTK_MPIEXEC"
# what the ranks need from the parent's environment (-x exports them to every rank, on
# this node and others)
PASSED_VARIABLES = ("PATH", "PYTHONPATH", "PYTHONUNBUFFERED", "LD_LIBRARY_PATH",
                    "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "CUDA_CACHE_PATH", "HOME", CPU_REPLICAS_ENV)
TAG = re.compile(r"^\[(\d+),(\d+)\]<(stdout|stderr)>:(.*)$")


def rank_from_mpi_env(environ):
    """(rank, world_size, local_rank) when this process is an MPI rank, else None."""
    for rank, size, local in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                               "OMPI_COMM_WORLD_LOCAL_RANK"),
                              ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID")):
        if rank in environ and size in environ:
            r = int(environ[rank])
            return r, int(environ[size]), int(environ.get(local, r))
    return None


def find_mpiexec(environ):
    """$CNTK_MPIEXEC, else mpiexec or mpirun on PATH; None when there is none."""
    explicit = environ.get(MPIEXEC_ENV)
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for name in ("mpiexec", "mpirun"):
        found = shutil.which(name, path=environ.get("PATH"))
        if found:
            return found
    return None


def mpiexec_command(mpiexec, nprocs, module, argv, python=None, environ=None, root=None):
    """The argv that starts `python -m module argv` as `nprocs` MPI ranks (OpenMPI)."""
    environ = os.environ if environ is None else environ
    root = (os.geteuid() == 0) if root is None else root
    command = [mpiexec, "-n", str(nprocs), "--tag-output", "--bind-to", "none"]
    if root:  # OpenMPI refuses to run as root without it (containers often are root)
        command.append("--allow-run-as-root")
    for name in PASSED_VARIABLES:
        if name in environ:
            command += ["-x", name]
    return command + [python or sys.executable, "-m", module] + list(argv)


def parse_tagged(line):
    """(rank, 'stdout' or 'stderr', text) of a `--tag-output` line; None if untagged."""
    match = TAG.match(line)
    if not match:
        return None
    return int(match.group(2)), match.group(3), match.group(4)


class MPIRanks(Ranks):
    """The ranks of a several-GPU run, started by one mpiexec whose stdout they share."""

    def __init__(self, environ=None):
        self.environ = os.environ if environ is None else environ

    def start(self, module, argv, nprocs):
        mpiexec = find_mpiexec(self.environ)
        if mpiexec is None:
            raise Unsupported("--gpus %d trains one MPI rank per GPU, but no mpiexec was "
                              "found (set %s or put OpenMPI 1.10's mpiexec on PATH)"
                              % (nprocs, MPIEXEC_ENV))
        command = mpiexec_command(mpiexec, nprocs, module, argv, environ=self.environ)
        sys.stderr.write("launching: %s\n" % " ".join(command))
        return [("mpiexec", start(command, dict(self.environ)), None)]

    def split(self, line):
        return parse_tagged(line)


def mpi_description():
    """The MPI library this process has loaded (its real file), for run_start's build:
    shows whether CNTK runs on a real OpenMPI 1.10 or the 4.x compatibility links."""
    try:
        with open("/proc/self/maps") as f:
            paths = set(line.split()[-1] for line in f
                        if "/libmpi.so" in line and line.split()[-1].startswith("/"))
    except OSError:
        return None
    if not paths:
        return None
    # the kernel lists the file itself, so links (mpi-compat) are already resolved
    described = os.path.basename(sorted(paths)[0])
    if not described.startswith("libmpi.so.12"):
        described += " (stands in for OpenMPI 1.10's libmpi.so.12: one process only)"
    return described
