"""Several GPUs in CNTK: one MPI rank per GPU, started by `mpiexec`.

CNTK's data-parallel learner (`data_parallel_distributed_learner`) aggregates gradients
over MPI, so its ranks must be one MPI job: `trainers.common.launch` (which starts ranks as
independent processes with a rendezvous address) cannot start them. Instead the launching
parent runs

    mpiexec -n N --tag-output --bind-to none [--allow-run-as-root] -x VAR ... \\
        python -m trainers.cntk <the same arguments>

and relays the ranks' event streams as `trainers.common.launch` does: rank 0's events
unchanged, its run_end only when every rank ended well, other ranks' events dropped except
errors, and one error for a failed run, a specific class preferred over a crash.
`--tag-output` prefixes each line of a rank's stdout with `[job,rank]<stdout>:`, which is
how the parent tells the ranks apart on mpiexec's single stdout. `--bind-to none` keeps
OpenMPI from pinning each rank to one core (its default for two ranks or fewer), which
would starve CNTK's CPU threads.

Each rank learns its place from OpenMPI's variables (OMPI_COMM_WORLD_RANK, _SIZE,
_LOCAL_RANK; PMI_RANK/PMI_SIZE under other launchers) and hands it to `trainers.common` as
TRAINER_RANK, TRAINER_WORLD_SIZE and TRAINER_LOCAL_RANK.

mpiexec must be the OpenMPI CNTK was built against (1.10: containers/cntk.def); set
CNTK_MPIEXEC to its path when it is not the `mpiexec` on PATH. The local venv maps CNTK's
OpenMPI 1.10 sonames onto OpenMPI 4 (containers/cntk/mpi_compat.sh), which is enough for
one process but not for MPI communication.
"""
import os
import re
import shutil
import subprocess
import sys
import threading

from trainers.common.events import Events
from trainers.common.launch import (LOCAL_RANK_ENV, RANK_ENV, WORLD_ENV, Relay,
                                    on_sigterm_raise, restore_sigterm, verdict)
from trainers.common.protocol import build_parser, report_error, resolve

MPIEXEC_ENV = "CNTK_MPIEXEC"
# what the ranks need from the parent's environment (-x exports them to every rank, on
# this node and others)
PASSED_VARIABLES = ("PATH", "PYTHONPATH", "PYTHONUNBUFFERED", "LD_LIBRARY_PATH",
                    "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "CUDA_CACHE_PATH", "HOME")
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


def trainer_rank_env(place):
    """The variables through which `trainers.common` learns a rank's place."""
    rank, world, local = place
    return {RANK_ENV: str(rank), WORLD_ENV: str(world), LOCAL_RANK_ENV: str(local)}


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


def wants_mpi(argv, environ=None):
    """Whether this process is the parent of a several-GPU run (it must start mpiexec)."""
    environ = os.environ if environ is None else environ
    if rank_from_mpi_env(environ) is not None or RANK_ENV in environ:
        return False
    try:
        args = build_parser().parse_args(list(argv))
    except Exception:  # run() reports bad arguments as an error event
        return False
    return args.gpus > 1


class _MPIRelay(Relay):
    """trainers.common.launch's relay, fed line by line from mpiexec's tagged stdout."""

    def feed(self, line):
        tagged = parse_tagged(line)
        if tagged is None:  # mpiexec's own words (or a rank's output without a tag)
            if line.strip():
                sys.stderr.write("mpiexec: %s\n" % line)
            return
        rank, stream, text = tagged
        if stream == "stderr" or not text.strip():
            if text.strip():
                sys.stderr.write("rank %d: %s\n" % (rank, text))
            return
        self.read(rank, _OneLine(text))


class _OneLine(object):
    def __init__(self, text):
        self._lines = [(text + "\n").encode("utf-8"), b""]

    def readline(self):
        return self._lines.pop(0) if self._lines else b""


def launch_mpi(trainer, argv, module, environ=None):
    """The launching parent of a several-GPU run: check, start mpiexec, relay, judge.
    Returns the exit status (the same classes and codes as trainers.common.protocol.run)."""
    environ = os.environ if environ is None else environ
    events = Events.claim_stdout()
    obj = None
    try:
        cfg = resolve(build_parser().parse_args(list(argv)))
        obj = trainer() if callable(trainer) and not hasattr(trainer, "step") else trainer
        obj.preflight(cfg)
        mpiexec = find_mpiexec(environ)
        command = mpiexec_command(mpiexec, cfg.devices, module, argv, environ=environ)
        sys.stderr.write("launching: %s\n" % " ".join(command))
        return _run_ranks(command, events, environ)
    except SystemExit:
        raise
    except BaseException as exc:
        return report_error(events, exc, obj)
    finally:
        events.close()


def _run_ranks(command, events, environ):
    relay = _MPIRelay(events)
    previous = on_sigterm_raise()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, env=dict(environ))
    try:
        def pump():
            for raw in iter(child.stdout.readline, b""):
                relay.feed(raw.decode("utf-8", "replace").rstrip("\n"))
        reader = threading.Thread(target=pump)
        reader.daemon = True
        reader.start()
        code = child.wait()
        reader.join(10.0)
    finally:
        if child.poll() is None:
            child.terminate()  # mpiexec forwards it to the ranks
            try:
                child.wait(10.0)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        restore_sigterm(previous)
    return verdict(relay, [("mpiexec", code)])


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
