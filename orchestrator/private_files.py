"""Files that hold the results database's URL are the user's alone: created 0600, never widened.

A PostgreSQL URL carries its password (`postgresql://alice:secret@db/bench`), and what a sweep
leaves on a shared file system travels with it: every job's pickle (its spec holds the cell's
resolved config, `paths.db` included), an array's bundle of them (backends/slurm_task.py),
retry.timeout's follow-up job (its spec is the URL itself, orchestrator/launch/retry.py), each
run's `config.yaml` (orchestrator/job/run.py) and Hydra's `multirun.yaml` (the overrides typed,
`paths.db=` among them: hydra_plugins/orchestrator_sweeper). Each is created with mode 0600 from its first byte:
a chmod after writing leaves a window in which another user on the login node can read it, and
the umask of a shared account is often 022.

This module imports only the standard library: the Slurm task's first step (slurm_task.py) and
the job on a compute node use it.
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

#: The mode of every file this module writes: read and write for its owner only.
MODE = 0o600


def write_bytes(path: Path, data: bytes) -> None:
    """`data` at `path`, 0600, whole or not at all: written under a random temporary name of the
    same directory (mkstemp: O_EXCL, 0600 from creation, so no name another user planted, a
    symlink or a readable file, is ever opened) and renamed over `path`."""
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def keep_private(path: Path) -> None:
    """`path` 0600 before a library writes it by truncating it (Hydra's multirun.yaml): made
    empty and 0600 where it is not there, an existing one set 0600 (its content so far was
    written the same way). Opened with O_NOFOLLOW and changed through its descriptor: a symlink
    planted there is refused (OSError), never followed to another file whose mode would change."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, MODE)
    try:
        os.fchmod(fd, MODE)
    finally:
        os.close(fd)


@contextmanager
def umask() -> Iterator[int]:
    """Around a library's own writes that hold the URL (submitit's local pickles): what is
    created meanwhile is its owner's alone (files 0600, folders 0700). Process-wide while it
    lasts, so only around a submission, which is single-threaded; yields the mask it replaced,
    for the processes started meanwhile (their own files keep the user's mask)."""
    old = os.umask(0o077)
    try:
        yield old
    finally:
        os.umask(old)
