"""A collector that stops itself at its commit turn, for shared_fs.py's --stall rounds: run as
`python shared_fs_stall.py WHERE collect ...` it is `orchestrator collect ...` whose first write
commit stops the process (SIGSTOP, its lease's heartbeat too) until shared_fs.py continues it.

WHERE is `commit`: stopped before its fence, so that, continued past the lease's stale time, the
fence must find the lease broken and roll back (LeaseLost, said on stderr); or `fenced`: stopped
after its fence passed, in the gap the fence cannot cover, where on GlusterFS, CephFS and MooseFS
SQLite's own POSIX locks (shared between hosts) must keep the other host's commit apart. A stop
from outside (once the lease is held) mostly hit a read turn, where no fence runs."""
from __future__ import annotations

import os
import runpy
import signal
import sys
import time
from pathlib import Path
from typing import Callable

#: What the stopped collector's stderr says where its fence fired (sqlite_lease.fence says it).
FENCE_FIRED = "lost its writer lease"


def stopped(pid: int) -> bool:
    """Whether the process is stopped (its /proc state T)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def stall(seconds: float, said: list[str], where: str) -> Callable[[list[int]], None]:
    """A `during` for shared_fs.race: once the first collector has stopped itself, it is left
    stopped `seconds`, then continued; what happened goes into `said`."""
    def during(pids: list[int]) -> None:
        deadline = time.monotonic() + 60
        while not stopped(pids[0]):
            if time.monotonic() > deadline:
                said.append("loginA never stopped itself at a commit")
                return
            time.sleep(0.01)
        time.sleep(seconds)
        os.kill(pids[0], signal.SIGCONT)
        when = "before" if where == "commit" else "after"
        said.append(f"loginA stopped {seconds:g} s at a commit ({when} its fence) while it held the lease")
    return during


def fence_said(output: str) -> str:
    return f"loginA's fence fired (LeaseLost): {'yes' if FENCE_FIRED in output else 'no'}"


def _stop_at(where: str) -> None:
    from orchestrator.store import sqlite_lease  # only the stopped collector patches its own fence

    real, done = sqlite_lease._Lease.fence, []

    def fence(self: object) -> None:
        if where == "fenced":
            real(self)
        if not done:
            done.append(True)
            os.kill(os.getpid(), signal.SIGSTOP)
        if where == "commit":
            real(self)
    sqlite_lease._Lease.fence = fence


if __name__ == "__main__":
    _stop_at(sys.argv[1])
    sys.argv = ["orchestrator", *sys.argv[2:]]
    runpy.run_module("orchestrator", run_name="__main__", alter_sys=True)
