"""Values from configuration that reach a batch script, a path or a module name, checked first.

submitit writes every sbatch option as a line `#SBATCH --<name>=<value>` of the batch script:
the name unquoted, the value through `shlex.quote`, which keeps a newline. A newline (or any
other control character) in either ends the `#SBATCH` line, and what follows runs as a shell
command on the compute node. So every option that comes from a site's YAML or an override is
checked here before it reaches submitit: a name is a long option spelt as Slurm spells them
(`mail-type`), not one the orchestrator sets itself nor one that changes what runs or where
(`export`, `chdir`, `wrap` ...); a value is one printable line. Names that become paths or
module names (config group choices, `name:` fields, a framework's `env:` and `trainer:`) are
plain names or dotted module names, so they resolve only inside conf/, containers/ and the
image directory, and import only modules.

`cluster.setup` and `cluster.python` are shell by design: lines the site writes to run in the
job before the orchestrator's (`module load apptainer`) and the command that starts Python on
the node. They are the site's own shell, as trusted as its YAML (an override can set them too,
as it can any command the user types); each is held only to one printable line.

Every refusal reads the same: `<key>=<value> <what is wrong>; <the way out>`, the value as
Python's repr (so a newline shows as `\\n`). `ConfigError` is a sweep-wide value (paths,
cluster, repeats ...); a cell's own values are refused per cell (orchestrator.cell.CellError).
"""
from __future__ import annotations

import math
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional

CONF = Path(__file__).resolve().parent.parent / "conf"

#: The config groups whose choice names a file conf/<group>/<choice>.yaml.
GROUPS = ("framework", "model", "dataset", "hardware", "cluster")

#: The largest value an integer setting may have (a 32-bit signed int: what trainers and the DB hold).
INT_MAX = 2**31 - 1
#: The most runs of one cell a sweep may ask for (`repeats`): each is a job.
MAX_REPEATS = 1000

#: A plain name: a config choice, a `name:` field, a recipe, a partition or GPU type.
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
#: A dotted Python module name (a framework's `trainer:`).
MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
#: An sbatch long option as Slurm spells them, after submitit turns `_` into `-`.
OPTION = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")

#: sbatch options the orchestrator (or submitit under it) sets, and the config key that sets each.
SET_HERE = {
    "partition": "hardware.partition", "time": "hardware.time_min", "cpus-per-task": "hardware.cpus",
    "mem": "hardware.mem_gb", "gres": "hardware.gpu_type and gpus", "gpus-per-node": "hardware.gpu_type and gpus",
    "exclusive": "cluster.exclusive", "account": "cluster.account", "qos": "cluster.qos",
    "constraint": "cluster.constraint", "array": "cluster.array_parallelism", "nodes": None,
    "ntasks-per-node": None, "job-name": None, "output": None, "error": None, "open-mode": None, "signal": None,
}
#: sbatch options that change what runs, as whom, or where: never from configuration.
CHANGES_WHAT_RUNS = ("wrap", "export", "export-file", "get-user-env", "chdir", "uid", "gid", "container",
                     "container-id", "bb", "bbf", "input", "parsable", "wait", "test-only")


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


def number(key: str, value: Any, minimum: float, way_out: Optional[str] = None) -> float:
    """A finite number >= minimum (an int is a number too)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value < minimum):
        raise refuse(key, value, f"must be a number >= {minimum:g}", way_out or f"use {key}=X with X >= {minimum:g}")
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


# --- sbatch -------------------------------------------------------------------------------------

SITE = "the cluster's YAML (conf/cluster/<site>.yaml) or the override that set it"


def sbatch_value(key: str, value: Any) -> Any:
    """What submitit writes after `--<option>=`: one printable line (True: the bare flag)."""
    if value is True or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    if value is None or value is False:
        raise refuse(key, value, "is no sbatch value", f"remove {key} from {SITE} to leave the option out")
    return one_line(key, value, f"write {key} as one line in {SITE}", kind="one value (a string or a number)")


def sbatch_options(key: str, options: Any) -> dict[str, Any]:
    """A site's extra sbatch options (`cluster.sbatch`): {option-name: value}."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise refuse(key, options, "must be a mapping of sbatch option names to values",
                     f"write it as {key}: {{reservation: bench, mail-type: END}} in {SITE}")
    for option, value in options.items():
        spelt = option.replace("_", "-") if isinstance(option, str) else option
        if not isinstance(spelt, str) or not OPTION.fullmatch(spelt) or len(spelt) < 2:
            raise refuse(f"{key} option name", option, "is not an sbatch long option (lower-case letters, "
                         "digits and dashes, as in mail-type)", f"fix or remove it in {SITE}")
        if spelt in SET_HERE:
            where = SET_HERE[spelt]
            raise refuse(f"{key}.{option}", value, "is an option the orchestrator sets itself",
                         f"set {where} instead" if where else f"remove it from {SITE}")
        if spelt in CHANGES_WHAT_RUNS:
            raise refuse(f"{key}.{option}", value, "would change what the job runs, as whom or where",
                         f"remove it from {SITE}; put environment set-up in cluster.setup")
        sbatch_value(f"{key}.{option}", value)
    return dict(options)


def shell_lines(key: str, lines: Any) -> list[str]:
    """`cluster.setup`: the site's own shell lines, run in the job by design; one line each."""
    if lines is None:
        return []
    if isinstance(lines, str) or not isinstance(lines, (list, tuple)):
        raise refuse(key, lines, "must be a list of shell lines", f"write it as {key}: [module load apptainer]")
    for i, line in enumerate(lines):
        one_line(f"{key}[{i}]", line, f"split it into one list item per line in {SITE}", kind="a line of shell")
    return list(lines)


def cluster(config: Mapping[str, Any]) -> None:
    """The sweep-wide cluster keys that reach the scheduler (raises ConfigError)."""
    from orchestrator.backends import BACKENDS

    one_of("cluster.executor", config.get("executor") or "local", BACKENDS)
    if config.get("name") is not None:
        name("cluster.name", config["name"])
    for key in ("exclusive", "check_requests"):
        if config.get(key) is not None:
            boolean(f"cluster.{key}", config[key])
    if config.get("gpu_request") is not None:
        one_of("cluster.gpu_request", config["gpu_request"], ("gres", "gpus_per_node"))
    for key in ("account", "qos", "constraint"):
        if config.get(key) is not None:
            sbatch_value(f"cluster.{key}", config[key])
    for key, minimum in (("array_parallelism", 1), ("time_min", 1), ("max_array_size", 1),
                         ("unplaceable_after_min", 0)):
        if config.get(key) is not None:
            integer(f"cluster.{key}", config[key], minimum)
    sbatch_options("cluster.sbatch", config.get("sbatch"))
    shell_lines("cluster.setup", config.get("setup"))
    if config.get("python") is not None:
        one_line("cluster.python", config["python"], f"write the command that starts Python on the node as one "
                                                     f"line in {SITE}", kind="a command")


def sbatch_request(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """The last gate before submitit: every option a backend's resource request will write.

    Called by the Slurm backend's `resources()` on what it built from hardware and cluster
    keys; the keys above are checked earlier with their config names, this catches whatever
    reaches submitit by another road (a rerun's recorded config, a new backend option)."""
    for key, value in params.items():
        if key == "additional_parameters":
            sbatch_options("cluster.sbatch", value)
        elif key == "setup":
            shell_lines("cluster.setup", value)
        else:
            if not isinstance(key, str) or not OPTION.fullmatch(key.replace("_", "-")):
                raise refuse("sbatch option name", key, "is not an sbatch long option", f"fix {SITE}")
            source = SET_HERE.get(key.replace("_", "-")) or ""
            sbatch_value(source if " " not in source and source else f"sbatch option {key}", value)
    return params


# --- at the entry points --------------------------------------------------------------------

def check_request(backend: Any, config: Mapping[str, Any], label: str) -> None:
    """A cell's request as its backend will hand it to the scheduler (on Slurm: every sbatch
    option, through `sbatch_request`); a bad one refuses that cell only (CellError)."""
    from orchestrator.cell import CellError

    try:
        backend.resources(config)
    except ConfigError as exc:
        raise CellError(f"{label}: {exc}") from None


def check_database(url: str) -> None:
    """That a sweep could use its results database, opened as a read opens it: never created
    (a dry run writes nothing); the same message a launch would give where it cannot be used."""
    from orchestrator import db

    try:
        db.open_db(url, create=False).kw["bind"].dispose()
    except db.NoDatabase:  # a launch makes it, where its directory exists
        path = db.sqlite_path(url)
        if path is not None and not path.parent.is_dir():
            raise db.Unusable(url, f"the SQLite file's directory {path.parent} does not exist",
                              f"make it, or point {db.Unusable.WHERE} elsewhere") from None


@contextmanager
def stop_on_bad_input() -> Iterator[None]:
    """Around an entry point's work before it writes: a sweep-wide bad value, or a database that
    cannot be used, ends the command with its message and exit status 1, never a traceback."""
    from orchestrator import db

    try:
        yield
    except (ConfigError, db.SchemaError) as exc:
        raise SystemExit(f"refused: {exc}") from None
    except db.Unusable as exc:
        raise SystemExit(f"refused: cannot use database URL {exc.url!r}: {exc}") from None
