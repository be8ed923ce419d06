"""The CNTK trainer: `python -m trainers.cntk --model ... --dataset ...` (Python 3.6).

Only what is CNTK's own lives here: the networks (models.py, cntk.layers) and the device
setup and training step (trainer.py, a cntk.Trainer with momentum SGD). The command line,
data, timing and events are `trainers.common`'s. Several GPUs train under MPI, one process
per GPU started by `mpiexec` (mpi.py), as CNTK's data-parallel learner requires. Inside
this package `import cntk` is the absolute import of CNTK.
"""
