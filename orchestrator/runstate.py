"""A run's life: its states, the moves between them, and which states mean what.

Every write of `Run.state` passes `check_move` (schema.Run validates it), so a state no one
defined, or a move no one allowed, is a bug that raises where it happens instead of a row
that other code misreads later. The groups below (open, final, failed, rerunnable) are the
only lists of states in the project; everything else asks this module.

    pending ──► submitted ──► running ──► done | failed
       │            ▲  │         │
       │            └──┼─────────┘ (requeued: Slurm runs it again)
       └──► cancelled  └──► lost | cancelled | failed (the scheduler's word, no result file)

- pending: recorded by the launcher, not yet handed to an executor.
- submitted: the executor holds it (queued, or requeued).
- running: the job has started (its job.json, or the scheduler, says so).
- done / failed: its result file says so (failed: with an error class), or the scheduler ended
  it before it wrote one (failed: timeout, out_of_memory, node_fail, preempted ...).
- lost: the scheduler answered and no longer knows the job, and no result file exists.
- cancelled: the user or the scheduler cancelled it, or its submission never reached the
  scheduler.
"""
from __future__ import annotations

from typing import Optional

PENDING, SUBMITTED, RUNNING = "pending", "submitted", "running"
DONE, FAILED, LOST, CANCELLED = "done", "failed", "lost", "cancelled"

#: Every state, in the order a run passes through them (and tables show them).
STATES = (PENDING, SUBMITTED, RUNNING, DONE, FAILED, LOST, CANCELLED)
#: Not yet ended: tracking follows these.
OPEN = (PENDING, SUBMITTED, RUNNING)
#: Handed to an executor and not ended: a repeat in one of these is measured already.
IN_FLIGHT = (SUBMITTED, RUNNING)
#: Ended, whatever the outcome.
FINAL = (DONE, FAILED, LOST, CANCELLED)
#: Ended without a measurement.
UNSUCCESSFUL = (FAILED, LOST, CANCELLED)
#: What `rerun --failed` offers (a repeat whose latest attempt ended in one of these).
RERUNNABLE = UNSUCCESSFUL

#: A new row may start in these: pending (the launcher), or a result's state (a collector that
#: finds a run the launcher never recorded).
INITIAL = (PENDING, DONE, FAILED)

#: state -> the states it may move to (staying is always allowed).
MOVES = {
    PENDING: {SUBMITTED, RUNNING, FAILED, CANCELLED, DONE},
    SUBMITTED: {RUNNING, DONE, FAILED, LOST, CANCELLED},
    RUNNING: {SUBMITTED, DONE, FAILED, LOST, CANCELLED},
    DONE: set(),
    FAILED: set(),
    # A late result file, or the scheduler's final word, corrects a verdict reached by absence.
    LOST: {DONE, FAILED, CANCELLED},
    CANCELLED: set(),
}


class IllegalMove(ValueError):
    """A state no one defined, or a move the run-state model does not allow: a bug."""


def can_move(old: Optional[str], new: str) -> bool:
    """Whether a run in `old` (None: a new row) may be put in `new`."""
    if new not in STATES:
        return False
    if old is None:
        return new in INITIAL
    return old == new or new in MOVES.get(old, ())


def check_move(old: Optional[str], new: str) -> str:
    """`new`, if a run in `old` may move there; raises IllegalMove otherwise."""
    if new not in STATES:
        raise IllegalMove(f"run state {new!r} is not one of {', '.join(STATES)}")
    if not can_move(old, new):
        raise IllegalMove(f"a run cannot move from {old or 'nothing'} to {new}")
    return new
