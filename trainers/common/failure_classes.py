"""Every class a failed run can end with, declared once: its name, what it means, whether
`orchestrator rerun --failed` retries it unless asked, the way out shown to the user, and the
trainer's exit status for it.

Each part of the project that gives a run a class (the trainer's `classify`, the job, the
Slurm backend, the launcher, tracking) names it from here, and each part that reads one (the
result-file check, the collector, `status`, `rerun`, the report) looks it up here; a class no
entry declares is refused where it would enter a result file (tests/test_error_classes.py
checks that no other module spells one).

Trainers run in old containers (Python 3.6) where only `trainers/` is mounted, so this module
lives under trainers/common/ and imports nothing; the orchestrator imports it from here.
"""


class FailureClass(object):
    """One failure class.

    `retried`: `rerun --failed` picks a repeat that ended so without `--class`; False where
    running it again unchanged can only fail the same way (`--class NAME` still picks it).
    `exit_code`: the trainer's non-zero exit status for it, distinct per class so that the class
    survives a lost event stream (2 is left to argparse's usage errors); None where no trainer
    reports it. `by`: who gives a run this class.
    """

    __slots__ = ("name", "meaning", "retried", "way_out", "exit_code", "by")

    def __init__(self, name, meaning, retried, way_out, exit_code=None, by="job"):
        self.name = name
        self.meaning = meaning
        self.retried = retried
        self.way_out = way_out
        self.exit_code = exit_code
        self.by = by

    def __repr__(self):
        return "FailureClass(%r)" % (self.name,)


UNSUPPORTED = "unsupported"
OUT_OF_MEMORY = "out_of_memory"
DIVERGED = "diverged"
CRASH = "crash"
ENV = "env"
TIMEOUT = "timeout"
SIGNALLED = "signal"
CANCELLED = "cancelled"
NODE_FAIL = "node_fail"
RANK_FAILED = "rank_failed"
PREEMPTED = "preempted"
UNPLACEABLE = "unplaceable"
LOST = "lost"
BROKEN_RESULT = "broken_result"
IMPLAUSIBLE = "implausible"
RANKS_DIVERGED = "ranks_diverged"

#: What `status` and the report say of a failed run that recorded no class.
NO_CLASS = "no error recorded"

_RERUN = "orchestrator rerun --failed"

CLASSES = (
    FailureClass(
        UNSUPPORTED, "the configuration cannot run here (the framework's declaration, the data or "
        "the machine refuses it)", False,
        "change the cell, or fix what the message names (a dataset, an interpreter), then "
        "`%s --class unsupported`" % _RERUN, exit_code=3, by="trainer"),
    FailureClass(
        OUT_OF_MEMORY, "the device or the job ran out of memory", True,
        "lower batch_size, or give the job more memory: `%s --class out_of_memory --mem GB`" % _RERUN,
        exit_code=4, by="trainer or scheduler"),
    FailureClass(
        DIVERGED, "the loss became NaN, infinite or exploded", True,
        "a numerical result of these settings: try precision=fp32 or a smaller batch_size",
        exit_code=5, by="trainer"),
    FailureClass(
        CRASH, "the trainer or the job failed in a way no other class names: a bug", True,
        "read the traceback in the message and the run's log, fix it, then `%s --class crash`" % _RERUN,
        exit_code=1, by="trainer, job or scheduler"),
    FailureClass(
        ENV, "the framework's environment (venv or image) could not be made ready", True,
        "fix what the message names (containers/<framework>/, the image), then `%s --class env`"
        % _RERUN),
    FailureClass(
        TIMEOUT, "the cell's time limit ran out before the trainer finished", True,
        "raise hardware.time_min (or `%s --time MIN`) or lower iterations" % _RERUN,
        by="job or scheduler"),
    FailureClass(
        SIGNALLED, "the trainer was ended by a signal from outside (requeue, cancel, node loss); "
        "the scheduler's own record says which", True,
        "`orchestrator status` asks the scheduler why; then `%s`" % _RERUN, exit_code=6,
        by="trainer, job or scheduler"),
    FailureClass(
        CANCELLED, "a user or the scheduler cancelled the job", True,
        "`%s --class cancelled` runs it again" % _RERUN, by="scheduler"),
    FailureClass(
        NODE_FAIL, "the node failed (or did not boot) under the job", True,
        "`%s --class node_fail` runs it on another node" % _RERUN, by="scheduler"),
    FailureClass(
        RANK_FAILED, "in a cell across nodes, a rank on one node crashed or was killed, and the "
        "other nodes were stopped (the message names the node that failed first)", True,
        "read that node's log (node-<k>/trainer.log in the run directory), then `%s --class "
        "rank_failed`" % _RERUN, by="job"),
    FailureClass(
        PREEMPTED, "a job of higher priority took the node", True,
        "`%s --class preempted`, or a partition without preemption" % _RERUN, by="scheduler"),
    FailureClass(
        UNPLACEABLE, "no node of the cluster can ever hold the job's request", False,
        "ask for less (`%s --time MIN` or `--mem GB` below the request; or type the sweep again with "
        "fewer gpus or nodes, or another partition), or once drained nodes are back "
        "`%s --class unplaceable`" % (_RERUN, _RERUN), by="launcher or scheduler"),
    FailureClass(
        LOST, "the job ended without writing its result file, and the scheduler no longer knows it",
        True, "read the job's log under the sweep's .submitit folder, then `%s`" % _RERUN,
        by="tracking"),
    FailureClass(
        BROKEN_RESULT, "the run's result.json is present but fails the collector's check", True,
        "the message names the broken field; `%s` measures the repeat again" % _RERUN,
        by="tracking"),
    FailureClass(
        IMPLAUSIBLE, "the run measured more than its hardware can do by the algorithms production libraries use "
        "(images/s x the fewest FLOPs per image of direct, Winograd F(6x6,3x3) and FFT convolutions, "
        "trainers/common/flops.py, above the declared peak FLOP/s; larger Winograd tiles and Winograd on "
        "polyphase splits of strided convolutions are not counted; an mfu above 1 alone is not refused, "
        "and a run is refused only above an mfu of 1.5 (resnet50) to 5.3 (vgg16), docs/measurement.md), so a "
        "figure is wrong: "
        "the trainer's step timing (a step timed without waiting for the device) or the hardware's "
        "peak_tflops", False,
        "the message names the figures; fix the trainer's timing or conf/hardware/<name>.yaml's "
        "peak_tflops, then `%s --class implausible`" % _RERUN, by="job"),
    FailureClass(
        RANKS_DIVERGED, "the ranks of a data-parallel run ended with different parameters (their "
        "checksums differ), so their gradients were not exchanged: the figures are of separate "
        "trainings, not of one", False,
        "the message names each rank's checksum; fix the framework's gradient exchange "
        "(trainers/<framework>/: its all-reduce, its distribution strategy), then `%s --class "
        "ranks_diverged`" % _RERUN, by="job"),
)

#: name -> its FailureClass
BY_NAME = dict((c.name, c) for c in CLASSES)
#: every class name, in the order declared
NAMES = tuple(c.name for c in CLASSES)
#: class -> the trainer's exit status for it
EXIT_CODES = dict((c.name, c.exit_code) for c in CLASSES if c.exit_code is not None)
#: exit status -> the class a trainer that exited so reported
BY_EXIT_CODE = dict((code, name) for name, code in EXIT_CODES.items())
#: what `rerun --failed` retries without `--class`
RETRIED = tuple(c.name for c in CLASSES if c.retried)


def way_out(name):
    """The way out of a failure of class `name` ("" for None or an undeclared name)."""
    found = BY_NAME.get(name)
    return found.way_out if found is not None else ""


def from_exit_code(code):
    """The class a trainer's exit status stands for, or None (0, or no declared status)."""
    return BY_EXIT_CODE.get(code)
