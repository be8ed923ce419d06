"""How an exception that ended a trainer is sorted into one of the trainer's failure classes
(unsupported, out_of_memory, diverged, signal, crash; declared with the others, their meaning,
way out and exit status, in trainers/common/failure_classes.py).

The orchestrator treats the classes differently (an `unsupported` cell is not retried unless
asked, an `out_of_memory` one marks the batch size as too large, a `diverged` one is a
numerical result, a `crash` is a bug to look at), so the sorting must not depend on each
framework author's taste: it is done here, once. A framework only teaches it how its own
out-of-memory errors look (`Trainer.is_out_of_memory`).
"""
import traceback

from trainers.common.failure_classes import (CRASH, DIVERGED, EXIT_CODES, OUT_OF_MEMORY,  # noqa: F401
                                             SIGNALLED, UNSUPPORTED)


class Unsupported(Exception):
    """The configuration cannot run here: raise it for an impossible combination (a batch
    that does not divide among the GPUs; what a framework's declaration does not hold is
    refused by trainers/common/support.py in its own words)."""


class InvalidArgument(Unsupported):
    """A command-line value that no run could satisfy (batch size 0, an unknown model)."""


class DataError(Unsupported):
    """A dataset file that is missing, truncated or not in the expected format.

    It is bad input, not a bug in the trainer, so it ends as `unsupported` rather than
    `crash`; the message names the file and the way out."""


class Terminated(Exception):
    """The run was told to stop from outside (SIGTERM: the scheduler requeueing, cancelling or
    losing a node): class `signal`, whose cause the scheduler's record names, never a crash."""


class Diverged(Exception):
    """The loss became NaN, infinite or exploded (accuracy.diverged)."""


def classify(exc, trainer=None):
    """Return (class, message, traceback or None) for an exception that ended a run.

    `trainer` is the framework's trainer object, asked through `is_out_of_memory(exc)`
    whether the exception is its way of saying the device ran out of memory.
    """
    message = str(exc) or type(exc).__name__
    if isinstance(exc, Unsupported):
        return UNSUPPORTED, message, None
    if isinstance(exc, Diverged):
        return DIVERGED, message, None
    if isinstance(exc, Terminated):
        return SIGNALLED, message, None
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if isinstance(exc, MemoryError) or _trainer_says_oom(trainer, exc):
        return OUT_OF_MEMORY, message, tb
    if isinstance(exc, KeyboardInterrupt):
        return CRASH, "interrupted", tb
    return CRASH, "%s: %s" % (type(exc).__name__, message), tb


def _trainer_says_oom(trainer, exc):
    check = getattr(trainer, "is_out_of_memory", None)
    if check is None:
        return False
    try:
        return bool(check(exc))
    except Exception:  # a broken check must not hide the original error
        return False
