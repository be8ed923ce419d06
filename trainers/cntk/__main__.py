"""Entry point: `python -m trainers.cntk` (arguments in docs/protocol.md).

One process per run, except with several GPUs: then `trainers.common.protocol.run` starts
the ranks under mpiexec (trainers/cntk/mpi.py) and relays their events, and each rank,
started by mpiexec, takes its place from MPI's variables and runs the ordinary protocol loop.
"""
import os
import sys

from trainers.common.launch import rank_env
from trainers.common.protocol import run
from trainers.cntk import mpi
from trainers.cntk.libpath import reexec_with_mpi_compat

MODULE = "trainers.cntk"


def make_trainer():
    # imported here, after stdout is claimed, so that what CNTK prints while loading (its
    # C++ banners and warnings) goes to stderr and not into the event stream
    from trainers.cntk.trainer import CNTKTrainer
    return CNTKTrainer()


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    reexec_with_mpi_compat(MODULE, argv)  # a no-op when started as a job starts it
    place = mpi.rank_from_mpi_env(os.environ)
    if place is not None:  # a rank started by mpiexec
        os.environ.update(rank_env(*place))
    return run(make_trainer, argv=argv, module=MODULE)


if __name__ == "__main__":
    sys.exit(main())
