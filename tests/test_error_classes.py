"""Failure classes are declared once (trainers/common/failure_classes.py): every part that gives
a run a class names it from there, and a class no entry declares never reaches the database."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from orchestrator.store import db, schema
from orchestrator.job import run as job, job_result
from orchestrator.launch import rerun
from orchestrator import runstate
from orchestrator.backends.slurm_states import STATES
from orchestrator.sweep.cell import cell_id
from orchestrator.launch.rerun_config import Site
from orchestrator.results.resultfile import BadResult, read_result
from orchestrator.launch.tracking import Evidence, decide
from trainers.common import errors
from trainers.common import failure_classes as fc

from helpers import REPO, record_failed
from result_factory import make_result, make_settings

#: Modules that may spell a class name: the registry, and the run states' own module (a run
#: whose job the scheduler cancelled or forgot is in the state of the same word).
DECLARING = {REPO / "trainers" / "common" / "failure_classes.py", REPO / "orchestrator" / "runstate.py"}


def test_every_class_is_declared_whole():
    assert len(set(fc.NAMES)) == len(fc.CLASSES) and set(fc.BY_NAME) == set(fc.NAMES)
    for klass in fc.CLASSES:
        assert klass.meaning and "\n" not in klass.meaning, klass
        assert klass.way_out and "\n" not in klass.way_out, klass
        assert isinstance(klass.retried, bool), klass
    codes = [c.exit_code for c in fc.CLASSES if c.exit_code is not None]
    assert len(set(codes)) == len(codes) and not {0, 2} & set(codes)  # 2: argparse's usage errors
    assert fc.NO_CLASS not in fc.NAMES


def test_the_run_states_of_the_same_word_are_the_same_word():
    assert (fc.LOST, fc.CANCELLED) == (runstate.LOST, runstate.CANCELLED)


def _spelled(path: Path) -> list[tuple[int, str]]:
    """String constants of `path` equal to a class name, outside the positions of a key (a dict
    key, a subscript, `.get`'s argument, a path segment: `framework["env"]` is a config key)."""
    tree = ast.parse(path.read_text())
    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys.update(id(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Subscript):
            keys.add(id(node.slice))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            keys.update(id(a) for a in node.args[:1])
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            keys.update((id(node.left), id(node.right)))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in fc.BY_NAME and id(node) not in keys]


def test_no_module_but_the_registry_spells_a_class():
    found = [f"{path.relative_to(REPO)}:{line}: {word!r}"
             for root in ("orchestrator", "trainers") for path in sorted((REPO / root).rglob("*.py"))
             if path not in DECLARING for line, word in _spelled(path)]
    assert not found, "name these from trainers/common/failure_classes.py:\n" + "\n".join(found)


def test_the_scan_would_see_a_class_spelled_in_a_class_position(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('error = {"class": "timeout"}\nif seen.error_class == "cancelled": pass\n'
                      'cfg.get("env"); d["signal"]; p / "env"; {"env": 1}\n')
    assert _spelled(sample) == [(1, "timeout"), (2, "cancelled")]


def test_the_trainers_classes_are_those_with_an_exit_status():
    assert errors.EXIT_CODES == {c.name: c.exit_code for c in fc.CLASSES if c.exit_code is not None}
    outcomes = [errors.classify(e)[0] for e in (errors.Unsupported("x"), errors.DataError("x"),
                                                 errors.Diverged("nan"), MemoryError(), ValueError("bug"))]
    assert outcomes == [fc.UNSUPPORTED, fc.UNSUPPORTED, fc.DIVERGED, fc.OUT_OF_MEMORY, fc.CRASH]
    assert all(fc.from_exit_code(errors.EXIT_CODES[c]) == c for c in outcomes)
    assert fc.from_exit_code(0) is None and fc.from_exit_code(2) is None


def test_every_class_slurm_gives_is_declared():
    assert {klass for _, klass in STATES.values() if klass} <= set(fc.NAMES)


def test_every_class_tracking_decides_is_declared():
    from orchestrator.backends.base import SchedulerView

    verdicts = [decide(e, s, job_id="7", backend="slurm", submitted_at=0.0, now=1000.0, grace_s=0.0,
                       previous="PENDING: can never start: too big")
                for e in (Evidence(), Evidence(broken="truncated"))
                for s in (SchedulerView("unknown"), SchedulerView("ended", "CANCELLED", None, fc.CANCELLED, True),
                          SchedulerView("ended", "NODE_FAIL", None, fc.NODE_FAIL, True))]
    classes = {v["error_class"] for v in verdicts}
    assert {fc.LOST, fc.BROKEN_RESULT, fc.UNPLACEABLE, fc.NODE_FAIL} <= classes <= set(fc.NAMES)


def test_a_result_file_with_an_undeclared_class_is_refused(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(make_result(state="failed", error={"class": "monitor", "message": "x"})))
    with pytest.raises(BadResult, match=r"error.class 'monitor' is not a failure class \(one of unsupported"):
        read_result(path)
    path.write_text(json.dumps(make_result(state="failed", error={"class": fc.NODE_FAIL, "message": "x"})))
    assert read_result(path)["error"]["class"] == fc.NODE_FAIL


def test_the_job_turns_a_trainers_undeclared_class_into_a_crash_that_names_it():
    assert job_result.trainer_error({"class": fc.DIVERGED, "message": "nan"}) == {"class": fc.DIVERGED, "message": "nan"}
    own = job_result.trainer_error({"class": "gremlins", "message": "it broke"})
    assert own["class"] == fc.CRASH and "'gremlins'" in own["message"] and own["message"].endswith("it broke")
    assert job.MORE_TIME == fc.way_out(fc.TIMEOUT)


@pytest.fixture
def failed_repeats(tmp_path):
    """A database whose three cells' latest attempts failed unsupported, out_of_memory and lost."""
    url = "sqlite:///%s" % (tmp_path / "results.db")
    cells = [(["framework=numpy", "batch_size=%d" % (8 * (n + 1))], klass, None)
             for n, klass in enumerate([fc.UNSUPPORTED, fc.OUT_OF_MEMORY, fc.LOST])]
    ids = dict(zip([c[1] for c in cells], record_failed(url, cells)))
    return db.open_db(url, create=False), ids, Site([], url, str(tmp_path / "runs"))


def test_rerun_leaves_out_what_is_not_retried_unless_named(failed_repeats):
    factory, ids, site = failed_repeats
    # the same cell on the same hardware can only fail the same way again
    assert fc.RETRIED == tuple(n for n in fc.NAMES
                               if n not in (fc.UNSUPPORTED, fc.IMPLAUSIBLE, fc.RANKS_DIVERGED, fc.UNPLACEABLE))
    with factory() as s:
        picks, problems = rerun.pick(s, site)
        assert {p.last.cell_id for p in picks} == {ids[fc.OUT_OF_MEMORY], ids[fc.LOST]}
        (said,) = problems
        assert said.startswith("1 repeat(s) of class unsupported") and fc.way_out(fc.UNSUPPORTED) in said
        picks, problems = rerun.pick(s, site, classes=[fc.UNSUPPORTED])
        assert [p.last.cell_id for p in picks] == [ids[fc.UNSUPPORTED]] and not problems
        picks, problems = rerun.pick(s, site, classes=["oom"])
        assert not picks and problems == [f"--class oom: not a failure class; one of {', '.join(fc.NAMES)}"]
