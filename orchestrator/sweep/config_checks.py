"""Values from configuration that reach a batch script, a path or a module name, checked first:
the generic checks (one printable line, an integer or number in range, a plain name, one of
some choices, a module name), and the one format of every refusal.

A newline (or any other control character) in a value that reaches a batch script ends its
line, and what follows runs as a shell command on the compute node; so such values are one
printable line (`one_line`). The sbatch options' own policy (which options configuration may
set, the last gate before submitit) is the Slurm backend's: backends/sbatch.py. Names that become paths or
module names (config group choices, `name:` fields, a framework's `env:` and `trainer:`) are
plain names or dotted module names, so they resolve only inside conf/, containers/ and the
image directory, and import only modules.

`cluster.setup` and `cluster.python` are shell by design: lines the site writes to run in the
job before the orchestrator's (`module load apptainer`) and the command that starts Python on
the node. They are the site's own shell, as trusted as its YAML (an override can set them too,
as it can any command the user types); each is held only to one printable line.

Every refusal reads the same: `<key>=<value> <what is wrong>; <the way out>`, the value as
Python's repr (so a newline shows as `\\n`). `ConfigError` is a sweep-wide value (paths,
cluster, repeats ...); a cell's own values are refused per cell (orchestrator.sweep.cell.CellError).
"""
from __future__ import annotations

import math
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from orchestrator.setting_registry import NAME  # a plain name: a config choice, a `name:` field, a recipe...

CONF = Path(__file__).resolve().parents[2] / "conf"  # orchestrator/sweep/ -> the repository

#: The config groups whose choice names a file conf/<group>/<choice>.yaml.
GROUPS = ("framework", "model", "dataset", "hardware", "cluster")

#: The largest value an integer setting may have (a 32-bit signed int: what trainers and the DB hold).
INT_MAX = 2**31 - 1
#: The most runs of one cell a sweep may ask for (`repeats`): each is a job.
MAX_REPEATS = 1000
#: The runtimes a job runs its trainer in (conf/config.yaml's `runtime`): a closed choice.
RUNTIMES = ("venv", "apptainer", "container", "module")

#: A dotted Python module name (a framework's `trainer:`).
MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


#: monitor.KEY's (least, most): a period a sampler can keep (1 ms) up to one a run still has samples
#: of (a minute); an idle window up to 10 minutes (every GPU job waits through it before its trainer).
MONITOR_BOUNDS = {"period_s": (0.001, 60.0), "idle_s": (0.0, 600.0)}


class ConfigError(ValueError):
    """A sweep-wide value that cannot be used; the message names the key, the value and the way out."""


def refuse(key: str, value: Any, problem: str, way_out: str) -> ConfigError:
    """The one format of every refusal: `<key>=<value> <what is wrong>; <the way out>`."""
    return ConfigError(f"{key}={value!r} {problem}; {way_out}")


def one_line(key: str, value: Any, way_out: str, kind: str = "a string") -> str:
    """A string of printable characters: no newline, carriage return, NUL, tab or other control."""
    if not isinstance(value, str):
        raise refuse(key, value, f"must be {kind}", way_out)
    if not value.isprintable():
        bad = next(ch for ch in value if not ch.isprintable())
        raise refuse(key, value, f"holds the control character {bad!r} (a newline or NUL would end "
                                 f"its line and start a command)", way_out)
    return value


def integer(key: str, value: Any, minimum: int, maximum: int = INT_MAX, way_out: Optional[str] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise refuse(key, value, f"must be an integer from {minimum} to {maximum}",
                     way_out or f"use {key}=N with {minimum} <= N <= {maximum}")
    return value


def number(key: str, value: Any, minimum: float, way_out: Optional[str] = None,
           maximum: float = math.inf) -> float:
    """A finite number >= minimum and <= maximum (an int is a number too)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not minimum <= value <= maximum):
        said = f">= {minimum:g}" if maximum == math.inf else f"from {minimum:g} to {maximum:g}"
        raise refuse(key, value, f"must be a number {said}", way_out or f"use {key}=X with X {said}")
    return float(value)


def boolean(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise refuse(key, value, "must be true or false", f"use {key}=true or {key}=false")
    return value


def one_of(key: str, value: Any, choices: Iterable[str]) -> str:
    choices = tuple(choices)
    if value not in choices:
        raise refuse(key, value, f"is not one of {', '.join(choices)}", f"use {key}={choices[0]}")
    return value


def name(key: str, value: Any, way_out: Optional[str] = None, sep: Optional[str] = None) -> str:
    """A plain name (letters, digits, `_ . + -`; no slash, no leading dot): it can join a path
    only as one component inside the directory it is meant for. With `sep`, a list of them."""
    way_out = way_out or f"use a plain name (letters, digits, _ . + -) for {key}"
    parts = value.split(sep) if isinstance(value, str) and sep else [value]
    if not all(isinstance(p, str) and NAME.fullmatch(p) for p in parts) or len(value) > 200:
        raise refuse(key, value, "is not a plain name (no slashes, no leading dot, no spaces)", way_out)
    return value


def available(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def choice(group: str, value: Any) -> str:
    """A config group choice names a file inside conf/<group>/ (a sub-folder of it at most)."""
    parts = value.split("/") if isinstance(value, str) else [None]
    if not all(isinstance(p, str) and NAME.fullmatch(p) for p in parts):
        raise refuse(group, value, f"does not name a file in conf/{group}/",
                     f"use one of {', '.join(available(group))} (or add conf/{group}/<name>.yaml)")
    return value


def module(key: str, value: Any) -> str:
    if not isinstance(value, str) or not MODULE.fullmatch(value):
        raise refuse(key, value, "is not a dotted Python module name", f"use a module name such as trainers.torch "
                                 f"for {key} (or leave it out for trainers.<name>)")
    return value


# --- at the entry points --------------------------------------------------------------------

def check_database(url: str) -> Any:
    """That a sweep could use its results database, opened as a read opens it: never created
    (a dry run writes nothing); the same message a launch would give where it cannot be used.
    Returns its handle (db.open_db's sessionmaker; None where there is none yet): a dry run opens
    its database this once and reads the learned limits through it."""
    # lazy: SQLAlchemy only where a command checks its database (cell and expand import this module)
    from orchestrator.store import db

    try:
        return db.open_db(url, create=False)
    except db.NoDatabase:  # a launch makes it, where its directory exists
        path = db.sqlite_path(url)
        if path is not None and not path.parent.is_dir():
            raise db.Unusable(url, f"the SQLite file's directory {path.parent} does not exist",
                              f"make it, or point {db.Unusable.WHERE} elsewhere") from None
        return None


@contextmanager
def stop_on_bad_input() -> Iterator[None]:
    """Around an entry point's work before it writes: a sweep-wide bad value, or a database that
    cannot be used, ends the command with its message and exit status 1, never a traceback."""
    # lazy: SQLAlchemy only where a command checks its database (cell and expand import this module)
    from orchestrator.store import db, schema

    try:
        yield
    except (ConfigError, schema.SchemaError) as exc:
        raise SystemExit(f"refused: {exc}") from None
    except db.Unusable as exc:
        raise SystemExit(f"refused: cannot use database URL {exc.url!r}: {exc}") from None
