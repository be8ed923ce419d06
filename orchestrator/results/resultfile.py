"""Reading a job's `result.json` (docs/protocol.md §3) and refusing one that is not well formed.

The collector trusts nothing it reads: a file may be truncated by a full disk, edited by hand,
or written by a job of another schema. `read_result` checks every field the database needs,
with its type, and raises BadResult naming the first problem, so the collector can report the
file and move on while the file stays where it is for someone to look at.
"""
from __future__ import annotations

import functools
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from orchestrator import runstate, setting_registry
from trainers.common import failure_classes

#: The result.json layout jobs write and this collector reads.
RESULT_SCHEMA = 1
RESULT_STATES = (runstate.DONE, runstate.FAILED)
#: The file a job writes per run, in the run's directory.
RESULT_NAME = "result.json"


def run_uid(sweep_id: str, cell_id: str, repeat: int, attempt: int) -> str:
    """A run's key, shared by its DB row and its result.json: `<sweep>:<cell>:<repeat>:<attempt>`."""
    return f"{sweep_id}:{cell_id}:{repeat}:{attempt}"

#: result["cell"] keys that become columns of `cells`, with their JSON types (setting_registry) ...
CELL_COLUMNS: dict[str, tuple[type, ...]] = {
    s.name: s.json_types for s in setting_registry.SETTINGS if s.hashed == setting_registry.ALWAYS}
#: ... and those a result file may leave out (settings added later, which older cells lack).
OPTIONAL_CELL_COLUMNS: dict[str, tuple[type, ...]] = {
    s.name: s.json_types for s in setting_registry.SETTINGS if s.hashed != setting_registry.ALWAYS}
#: ... of which these take only these words (where not None).
CELL_WORDS: dict[str, tuple[str, ...]] = {s.name: s.choices for s in setting_registry.SETTINGS if s.choices}


class BadResult(ValueError):
    """A result file that cannot be ingested; the message says what is wrong with it."""


#: A job's result.json is a few KB; anything this large was not written by one.
MAX_BYTES = 8 * 1024 * 1024
#: Nesting deeper than this is not a result.json (ours nest 4 deep).
MAX_DEPTH = 32
#: What the database's INTEGER holds.
INT_RANGE = (-(2 ** 63), 2 ** 63 - 1)


def inside(top: Path | str, path: Path | str, folders: dict[str, str] | None = None) -> bool:
    """Whether `path` (a run directory, the database's word) resolves, symlinks followed, to
    somewhere under `top` (the command's runs folder): the one test rerun and tracking share.
    os.path, not pathlib, and `top` resolved once per command: `status` asks it for every open
    run (10,000 of a million runs: half its lookups were of the same folder). `folders`: a caller's
    memo of folders resolved already (realpath_via), for many paths under the same folders."""
    path = os.fspath(path)
    real = os.path.realpath(path) if folders is None else realpath_via(path, folders)
    return real.startswith(_resolved_top(os.fspath(top), os.getcwd()))


def realpath_via(path: str, folders: dict[str, str]) -> str:
    """os.path.realpath(path), each folder of it resolved once into `folders` (folder -> its real
    path): 10,000 run directories under a few sweeps' folders cost two lstat calls each, not one per
    component. The caller keeps `folders` only while nothing may move (one reconciliation): a folder
    made a symlink afterwards would not be seen. A relative or unnormalised path (`..`) is resolved
    by realpath itself (and `//x`, which normpath keeps and realpath does not)."""
    if not os.path.isabs(path) or os.path.normpath(path) != path or path.startswith("//"):
        return os.path.realpath(path)
    head, tail = os.path.split(path)
    if not tail:  # the root
        return path
    real_head = folders.get(head)
    if real_head is None:
        real_head = folders[head] = realpath_via(head, folders)
    joined = os.path.join(real_head, tail)
    try:
        link = stat.S_ISLNK(os.lstat(joined).st_mode)
    except OSError:  # nothing there: kept as written, as realpath keeps it
        return joined
    return os.path.realpath(joined) if link else joined


@functools.lru_cache(maxsize=16)
def _resolved_top(top: str, cwd: str) -> str:
    """`top` resolved (a relative one from `cwd`, which is why that is part of the key), with a
    trailing separator."""
    return os.path.realpath(os.path.join(cwd, top)).rstrip(os.sep) + os.sep


def read_regular(path: Path | str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; BadResult for anything else. Opened
    without blocking and checked on its descriptor: a FIFO (or device) planted where a run
    directory recorded in the database points would otherwise hang every `status` that reads it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadResult("not a regular file (a FIFO, device or folder): not read")
        if info.st_size > max_bytes:
            raise BadResult(f"{info.st_size:,} bytes, more than the {max_bytes:,} a result file may have")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(max_bytes + 1)
    finally:
        os.close(fd)


def read_result(path: Path) -> dict[str, Any]:
    """The parsed, checked contents of one result.json; raises BadResult saying what is wrong."""
    try:
        raw = read_regular(path, MAX_BYTES)
    except OSError as exc:
        raise BadResult(f"cannot read: {exc.strerror or exc}") from None
    if not raw.strip():
        raise BadResult("empty file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadResult("not JSON: not UTF-8 text") from None
    try:
        result = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise BadResult(f"nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        # A prefix of valid JSON fails at its very end, or inside a string it never closes.
        truncated = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        raise BadResult(
            f"{'truncated JSON' if truncated else 'not JSON'}: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    if _depth(result) > MAX_DEPTH:
        raise BadResult(f"nested deeper than {MAX_DEPTH} levels")
    if "\\u0000" in text:  # JSON holds a NUL only as this escape
        _replace_nul(result)
    check_result(result)
    return result


#: What a NUL in a result file's text becomes: PostgreSQL's text holds none (the run never landed:
#: "1 broken"), and SQLite's printf ended a CSV field at one; U+FFFD says a character was there.
NUL_STANDS_IN = "\ufffd"


def _replace_nul(value: Any) -> None:
    """Every NUL in the strings (keys too) of a result just parsed (so this function's own to
    change), in place, without recursion."""
    def clean(item: Any) -> Any:
        return item.replace("\x00", NUL_STANDS_IN) if isinstance(item, str) else item

    stack = [value]
    while stack:
        item = stack.pop()
        pairs = list(item.items()) if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        if isinstance(item, dict):
            item.clear()
        for key, child in pairs:
            item[clean(key)] = clean(child)
            stack.append(child)


def _no_constant(name: str) -> Any:
    raise BadResult(f"not JSON: {name} is not a JSON number")


def _depth(value: Any) -> int:
    """How deep arrays and objects nest (without recursion: the file may nest thousands deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if deepest > MAX_DEPTH:
                return deepest
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def check_result(result: Any) -> None:
    """Raises BadResult for the first field that is missing or of the wrong type: the run's
    identity, its error, its cell, the optional parts (OPTIONAL_PARTS), then its metrics."""
    _check_identity(result)
    _check_error(result)
    _check_cell(_need(result, "cell", dict))
    for part, fields in OPTIONAL_PARTS:
        where = _optional(result, part, dict) or {} if part else result
        for key, types in fields.items():
            _optional(where, key, *types, where=part)
    for key in ("nodes", "ranks"):  # a cell across nodes: each node's record, each rank's checksum
        for i, item in enumerate(_optional(result, key, list) or []):
            _typed(item, f"{key}[{i}]", (dict,))
    metrics = _optional(result, "metrics", dict) or {}
    for name, value in metrics.items():
        if not _is_number(value):
            raise BadResult(f"metrics.{name} is {value!r}; metric values must be finite numbers")


#: What a result may hold besides its identity, cell and metrics, in the order it is checked:
#: (the part, "" for the top level; each of its fields and the JSON types it may have).
OPTIONAL_PARTS: tuple[tuple[str, dict[str, tuple[type, ...]]], ...] = (
    ("", {"node": (str,), "job_id": (str,), "executor": (str,), "started_at": (int, float),
          "ended_at": (int, float)}),
    ("paths", {key: (str,) for key in ("run_dir", "events", "stdout", "stderr", "samples")}),
    ("trainer", {"params": (int,), "version": (str,), "build": (dict,)}),
    ("energy", {"method": (str,)}),
    ("", {"monitor": (list,)}),
    ("provenance", {"node": (str,), "environment": (str,), "exclusive": (bool,),
                    **{key: (dict,) for key in ("cpu", "gpu", "framework", "git", "slurm")}}),
)


def _check_identity(result: Any) -> None:
    """An object of this collector's schema, whose run_uid is its sweep, cell, repeat and attempt."""
    if not isinstance(result, dict):
        raise BadResult(f"the top level is {_json_type(result)}, expected an object")
    if "schema" not in result:
        raise BadResult("missing key 'schema' (not a result.json of this orchestrator?)")
    if result["schema"] != RESULT_SCHEMA:
        raise BadResult(f"schema {result['schema']!r} is not {RESULT_SCHEMA}, the one this collector reads; "
                        f"collect it with the orchestrator version that wrote it")
    for key, kind in (("run_uid", str), ("sweep_id", str), ("cell_id", str), ("repeat", int), ("attempt", int),
                      ("state", str)):
        _need(result, key, kind)
    if result["state"] not in RESULT_STATES:
        raise BadResult(f"state {result['state']!r} is not one of {', '.join(RESULT_STATES)}")
    expected = run_uid(result["sweep_id"], result["cell_id"], result["repeat"], result["attempt"])
    if result["run_uid"] != expected:
        raise BadResult(f"run_uid {result['run_uid']!r} does not match sweep_id:cell_id:repeat:attempt ({expected!r})")


def _check_error(result: dict[str, Any]) -> None:
    """`error`: null, or a failure class trainers/common/failure_classes.py declares and a message."""
    error = _need(result, "error", dict, type(None))
    if error is not None:
        if _need(error, "class", str, where="error") not in failure_classes.BY_NAME:
            raise BadResult(f"error.class {error['class']!r} is not a failure class (one of "
                            f"{', '.join(failure_classes.NAMES)}: trainers/common/failure_classes.py)")
        _need(error, "message", str, where="error")


def _check_cell(cell: dict[str, Any]) -> None:
    """`cell`: every setting the `cells` table keeps, of its type, a choice among its words."""
    for key, types in CELL_COLUMNS.items():
        _need(cell, key, *types, where="cell")
    for key, types in OPTIONAL_CELL_COLUMNS.items():
        _optional(cell, key, *types, where="cell")
    for key, values in CELL_WORDS.items():
        if cell.get(key) not in (None, *values):
            raise BadResult(f"cell.{key} is {cell[key]!r}, not one of {', '.join(values)}")


def _need(obj: dict[str, Any], key: str, *types: type, where: str = "") -> Any:
    """obj[key], which must be present and of one of `types` (a bool is not an int here)."""
    label = f"{where}.{key}" if where else key
    if key not in obj:
        raise BadResult(f"missing key '{label}'")
    return _typed(obj[key], label, types)


def _optional(obj: dict[str, Any], key: str, *types: type, where: str = "") -> Any:
    """obj.get(key), which may be absent or null, else of one of `types`."""
    value = obj.get(key)
    if value is None:
        return None
    return _typed(value, f"{where}.{key}" if where else key, types)


def _typed(value: Any, label: str, types: tuple[type, ...]) -> Any:
    if isinstance(value, bool) and bool not in types:
        ok = False
    else:
        ok = isinstance(value, types)
    if isinstance(value, float) and not math.isfinite(value):
        ok = False
    if ok and isinstance(value, int) and not isinstance(value, bool) and not INT_RANGE[0] <= value <= INT_RANGE[1]:
        raise BadResult(f"'{label}' is {_short(value)}, outside the database's integer range")
    if not ok:
        wanted = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
        shown = "" if value is None else " " + _short(value)
        raise BadResult(f"'{label}' is {_json_type(value)}{shown}, expected {wanted}")
    return value


def _is_number(value: Any) -> bool:
    """A finite number the database's REAL holds (an integer too large for a double is not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", dict: "an object",
               list: "an array", type(None): "null", bool: "a boolean"}


def _json_type(value: Any) -> str:
    for t, name in ((bool, "a boolean"), (str, "a string"), (int, "an integer"), (float, "a number"),
                    (dict, "an object"), (list, "an array"), (type(None), "null")):
        if isinstance(value, t):
            return name
    return type(value).__name__


def _short(value: Any) -> str:
    try:
        text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    except (ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."
