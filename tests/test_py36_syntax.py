"""Everything under trainers/ stays Python 3.6 code, and trainers/common needs nothing
beyond the standard library and numpy: the Caffe and CNTK containers run Python 3.6 with
numpy 1.19 and will import trainers.common as it is."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TRAINERS = sorted((REPO / "trainers").rglob("*.py"))
COMMON = sorted((REPO / "trainers" / "common").rglob("*.py"))

# standard-library modules that appeared after 3.6
NEWER_STDLIB = {"dataclasses", "contextvars", "graphlib", "zoneinfo", "tomllib",
                "importlib.resources", "importlib.metadata"}
# attributes that appeared after 3.6, as (module name, attribute)
NEWER_ATTRIBUTES = {("contextlib", "nullcontext"), ("time", "perf_counter_ns"),
                    ("time", "time_ns"), ("math", "prod"), ("math", "isqrt"),
                    ("math", "dist"), ("functools", "cached_property"),
                    ("asyncio", "run"), ("shlex", "join"), ("sys", "stdlib_module_names")}
# keywords subprocess calls gained after 3.6
NEWER_KEYWORDS = {"capture_output", "text"}
GENERIC_BUILTINS = {"list", "dict", "tuple", "set", "frozenset", "type"}


def test_there_is_something_to_check():
    names = {p.relative_to(REPO).as_posix() for p in TRAINERS}
    assert {"trainers/common/protocol.py", "trainers/common/data.py",
            "trainers/torch/trainer.py", "trainers/torch/models.py"} <= names


@pytest.mark.parametrize("path", TRAINERS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_parses_as_python_36(path):
    tree = ast.parse(path.read_text(), filename=str(path), feature_version=(3, 6))
    problems = []
    for node in ast.walk(tree):
        where = "%s:%d" % (path.name, getattr(node, "lineno", 0))
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            if any(a.name == "annotations" for a in node.names):
                problems.append(where + " from __future__ import annotations (3.7)")
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                and node.value.id in GENERIC_BUILTINS:
            problems.append(where + " %s[...] (3.9)" % node.value.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and (node.value.id, node.attr) in NEWER_ATTRIBUTES:
            problems.append(where + " %s.%s" % (node.value.id, node.attr))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) \
                and node.func.value.id == "subprocess":
            for kw in node.keywords:
                if kw.arg in NEWER_KEYWORDS:
                    problems.append(where + " subprocess keyword %s= (3.7)" % kw.arg)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and \
                (isinstance(node.left, ast.Dict) or isinstance(node.right, ast.Dict)):
            problems.append(where + " dict | dict (3.9)")
        for name in _imported(node):
            if name in NEWER_STDLIB or name.split(".")[0] in NEWER_STDLIB:
                problems.append(where + " imports %s" % name)
    assert not problems


def _imported(node):
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module] + [node.module + "." + a.name for a in node.names]
    return []


# the exceptions: the ImageNet loader decodes JPEGs with Pillow, imported inside its functions
# (only a run that reads ImageNet files needs it: containers/<fw>/requirements.txt); SVHN's reader
# takes scipy.io where an environment has it (matfile.py where not), its writer needs it
LAZY = {"imagenet.py": {"PIL"}, "cifar100_svhn.py": {"scipy"}}


@pytest.mark.parametrize("path", COMMON, ids=lambda p: p.name)
def test_common_imports_only_stdlib_and_numpy(path):
    tree = ast.parse(path.read_text())
    outside = []
    for top_node in tree.body:  # a lazy import is inside a function, never at module level
        for name in _imported(top_node):
            if name.split(".")[0] in LAZY.get(path.name, ()):
                outside.append("%s at line %d (import it inside a function)" % (name, top_node.lineno))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            outside.append("relative import at line %d" % node.lineno)
            continue
        for name in _imported(node):
            top = name.split(".")[0]
            if name.startswith("trainers.common") or name == "trainers":
                continue
            if top == "numpy" or top in sys.stdlib_module_names or top in LAZY.get(path.name, ()):
                continue
            if isinstance(node, ast.ImportFrom) and name != node.module:
                continue  # `from x import y`: x is what matters, checked above
            outside.append("%s at line %d" % (name, node.lineno))
    assert not outside


def test_common_does_not_load_torch_when_imported():
    code = ("import sys; import trainers.common.protocol, trainers.common.data; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'tensorflow', 'mxnet', 'caffe', 'cntk')))")
    out = subprocess.check_output([sys.executable, "-c", code], cwd=str(REPO),
                                  universal_newlines=True)
    assert out.strip() == "[]"


@pytest.mark.skipif(not os.environ.get("PY36_PYTHON"),
                    reason="set PY36_PYTHON to a Python 3.6 with numpy 1.19")
def test_real_python_36_compiles_trainers_and_imports_common():
    code = (
        "import sys, pathlib, importlib\n"
        "assert sys.version_info[:2] == (3, 6), sys.version\n"
        "for p in sorted(pathlib.Path('trainers').rglob('*.py')):\n"
        "    compile(p.read_text(), str(p), 'exec')\n"
        "for p in sorted(pathlib.Path('trainers/common').glob('*.py')):\n"
        "    if p.stem != '__init__': importlib.import_module('trainers.common.' + p.stem)\n"
        "print('ok')\n")
    out = subprocess.check_output([os.environ["PY36_PYTHON"], "-c", code], cwd=str(REPO),
                                  universal_newlines=True)
    assert out.strip() == "ok"
