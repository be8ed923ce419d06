"""Under CI=true a skip fails the run, except a GPU-only test's, and the closing line counts them
(tests/ci_skips.py): checked on a pytest run of its own, in a scratch directory, with deliberate skips."""
import os
import subprocess
import sys

import pytest

from helpers import FRAMEWORKS, REPO

SKIPPING = '''
import pytest

import ci_skips


@pytest.fixture
def server():
    pytest.skip("no server answers")

@pytest.fixture
def framework():
    pytest.skip("caffe cannot run here: no python3.6")

@pytest.fixture
def xserver():
    pytest.xfail("no server answers")

@pytest.fixture
def frameworks(request):
    ci_skips.dropped(request.config, "caffe cannot run here: no python3.6")
    return []

def test_passes():
    assert True

def test_skips_inside():
    pytest.skip("no server answers")

def test_skips_in_its_fixture(server):
    pass

@pytest.mark.skipif(True, reason="no chromium")
def test_skipif():
    pass

@pytest.mark.gpu(reason="needs an NVIDIA GPU")
def test_gpu_only():
    pytest.skip("needs an NVIDIA GPU")

@pytest.mark.gpu(reason="needs an NVIDIA GPU")
def test_gpu_marked_skips_for_another_reason(framework):
    pass

@pytest.mark.gpu
def test_gpu_marked_without_its_reason():
    pytest.skip("needs an NVIDIA GPU")

def test_xfails_in_its_fixture(xserver):
    assert False

@pytest.mark.xfail(run=False, reason="postgres not running")
def test_xfail_not_run():
    pass

def test_over_every_framework(frameworks):
    pass

@pytest.mark.container_all
def test_opt_in():
    pass

@pytest.mark.xfail(reason="known")
def test_expected_failure():
    assert False
'''


def _pytest(tmp_path, **env):
    """A pytest run of SKIPPING with the plugin, in tmp_path: (exit status, output lines)."""
    (tmp_path / "test_some.py").write_text(SKIPPING)
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", "CONTAINER_ALL")}
    environ.update(PYTHONPATH=str(REPO / "tests"), **env)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci_skips", "-p", "no:cacheprovider", "-ra",
                           "-o", "markers=gpu\ncontainer_all", "test_some.py"], cwd=str(tmp_path), env=environ,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    return done.returncode, done.stdout.strip().splitlines()


def test_under_ci_a_skip_fails_the_run_but_a_gpu_only_one(tmp_path):
    status, lines = _pytest(tmp_path, CI="true")
    text = "\n".join(lines)
    assert status == 1, text
    # pytest's own closing line stays the last: only the GPU skip for its declared reason, and the xfail
    # of a test that ran, pass; every other skip, unrun xfail and left-out framework fails
    assert lines[-1].startswith("=") and "1 passed" in lines[-1] and "1 skipped" in lines[-1], text
    assert "2 failed" in lines[-1] and "6 errors" in lines[-1] and "1 deselected" in lines[-1], text
    assert "1 xfailed" in lines[-1], text
    assert lines[-2] == ("[ci] 1 skipped (GPU-only, allowed): 1 x needs an NVIDIA GPU; 8 skip(s) FAILED the run "
                         "(CI=true): 3 x no server answers; 2 x caffe cannot run here: no python3.6; "
                         "1 x no chromium; 1 x needs an NVIDIA GPU; 1 x postgres not running"), text
    failed = sorted(line.split(" - ")[0] for line in lines if line.startswith(("FAILED", "ERROR"))
                    and ("skipped under CI=true, where only a test marked `gpu(reason=...)` may skip" in line
                         or "left out under CI=true" in line))
    assert failed == ["ERROR test_some.py::test_gpu_marked_skips_for_another_reason",
                      "ERROR test_some.py::test_over_every_framework", "ERROR test_some.py::test_skipif",
                      "ERROR test_some.py::test_skips_in_its_fixture", "ERROR test_some.py::test_xfail_not_run",
                      "ERROR test_some.py::test_xfails_in_its_fixture",
                      "FAILED test_some.py::test_gpu_marked_without_its_reason",
                      "FAILED test_some.py::test_skips_inside"], text


def test_without_ci_skips_pass_and_the_closing_line_says_why(tmp_path):
    status, lines = _pytest(tmp_path)
    text = "\n".join(lines)
    assert status == 0, text
    assert "2 passed, 6 skipped, 1 deselected, 3 xfailed" in lines[-1], text
    assert lines[-2] == ("[skips] 9 skipped or left out: 3 x no server answers; 2 x needs an NVIDIA GPU; "
                         "2 x caffe cannot run here: no python3.6; 1 x no chromium; 1 x postgres not running"), text


def test_an_opt_in_suite_runs_where_its_variable_is_set(tmp_path):
    status, lines = _pytest(tmp_path, CONTAINER_ALL="1")
    assert "3 passed, 6 skipped, 3 xfailed" in lines[-1], "\n".join(lines)


def test_this_suite_runs_with_the_plugin(request):
    assert request.config.pluginmanager.has_plugin("ci_skips")


def test_a_named_postgresql_server_that_does_not_answer_fails_not_skips(tmp_path):
    """ORCHESTRATOR_TEST_POSTGRES set means a server is meant to be there: one that does not answer
    (a port nothing listens on) fails the PostgreSQL tests, with or without CI."""
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    environ = {k: v for k, v in os.environ.items() if k != "CI"}
    environ["ORCHESTRATOR_TEST_POSTGRES"] = "postgresql+psycopg://bench@127.0.0.1:%d/bench" % port
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "tests/test_db.py::test_run_state_must_be_a_known_state"], cwd=str(REPO), env=environ,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 passed, 1 error" in done.stdout.splitlines()[-1], done.stdout[-3000:]
    assert "ORCHESTRATOR_TEST_POSTGRES names a server that does not answer" in done.stdout, done.stdout[-3000:]
    assert "127.0.0.1:%d" % port in done.stdout, done.stdout[-3000:]


UNSUPPORTED_HERE = '''
from orchestrator.envs.venv_runtime import EnvironmentNotReady, VenvRuntime


def _ensure(self, *args, **kwargs):
    raise EnvironmentNotReady("%s needs an interpreter this machine lacks" % self.framework, "unsupported")


VenvRuntime.ensure = _ensure
'''


@pytest.mark.parametrize("ci", ["true", ""])
def test_a_framework_ready_frameworks_leaves_out_fails_under_ci_and_is_counted_elsewhere(tmp_path, ci):
    """tests/conftest.py's ready_frameworks, with every framework `unsupported` here (a plugin says so):
    under CI=true its test errs naming the first one; elsewhere the closing line counts each one."""
    (tmp_path / "unsupported_here.py").write_text(UNSUPPORTED_HERE)
    environ = {k: v for k, v in os.environ.items() if k != "CI"}
    environ.update(PYTHONPATH=str(tmp_path), CI=ci)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "unsupported_here", "-p", "no:cacheprovider",
                           "--setup-only", "-q", "tests/test_conformance.py::"
                           "test_a_sweep_over_every_framework_lands_one_row_each"], cwd=str(REPO), env=environ,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    lines = done.stdout.strip().splitlines()
    first = "%s cannot run here: %s needs an interpreter this machine lacks" % ((FRAMEWORKS[0]["name"],) * 2)
    if ci:
        assert done.returncode == 1 and "1 error" in lines[-1], done.stdout[-3000:]
        assert "left out under CI=true, where only GPU-only tests may skip: %s" % first in done.stdout, done.stdout
    else:
        assert done.returncode == 0, done.stdout[-3000:]
        assert lines[-2].startswith("[skips] %d skipped or left out: 1 x %s" % (len(FRAMEWORKS), first)), lines[-2]
