"""Loading CNTK: its MPI libraries (`reexec_with_mpi_compat`) and its import (`import_cntk`).

CNTK's MPI libraries must be findable also when the interpreter was started without the
recipe's LD_LIBRARY_PATH (a test or a person running the venv's python directly).

The venv recipe (containers/cntk/env.yaml) passes LD_LIBRARY_PATH=<env>/mpi-compat to the
trainer. The dynamic loader reads LD_LIBRARY_PATH only when a process starts, so when the
directory exists but is not on the path, the only remedy is to start again with it:
`reexec_with_mpi_compat` replaces this process (os.execve) by the same command with the
directory prepended. It does nothing outside such a venv (the Apptainer image has a real
OpenMPI 1.10 on the default path) and never loops (the second start finds it on the path).
"""
import os
import sys

COMPAT_DIR = "mpi-compat"


def missing_compat_dir(prefix=None, environ=None):
    """<venv>/mpi-compat when it exists and is not on LD_LIBRARY_PATH, else None."""
    environ = os.environ if environ is None else environ
    compat = os.path.join(prefix or sys.prefix, COMPAT_DIR)
    if not os.path.isdir(compat):
        return None
    if compat in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        return None
    return compat


def reexec_with_mpi_compat(module, argv):
    """Start `python -m module argv` again with <venv>/mpi-compat on LD_LIBRARY_PATH if it
    is missing there; return only when nothing needs doing."""
    compat = missing_compat_dir()
    if compat is None:
        return
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [compat] + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", module] + list(argv), env)


def import_cntk():
    """`import cntk` without its start-up checks, and return the module.

    On Linux, `import cntk` runs cntk_py_init.cntk_check_libs(), which calls
    `ldconfig -N -v <each LD_LIBRARY_PATH directory>` about a dozen times only to decide
    whether to print advisory warnings (MKL, CUDA, OpenCV). As root, each call also writes
    soname links into those directories and the system library directories. The checks
    are replaced by no-ops before CNTK's package initialiser runs (its `from . import
    cntk_py_init` finds the stand-in in sys.modules); everything else imports as usual.
    """
    if "cntk" in sys.modules:
        return sys.modules["cntk"]
    import types
    import warnings
    checks = types.ModuleType("cntk.cntk_py_init")
    checks.cntk_check_distro_info = lambda: None
    checks.cntk_check_libs = lambda: None
    sys.modules["cntk.cntk_py_init"] = checks
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import cntk
    return cntk
