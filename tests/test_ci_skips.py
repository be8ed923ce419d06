"""Under CI=true a skip fails the run, except a GPU-only test's, and the closing line counts them
(tests/ci_skips.py): checked on a pytest run of its own, in a scratch directory, with deliberate skips."""
import os
import subprocess
import sys

from helpers import REPO

SKIPPING = '''
import pytest

@pytest.fixture
def server():
    pytest.skip("no server answers")

def test_passes():
    assert True

def test_skips_inside():
    pytest.skip("no server answers")

def test_skips_in_its_fixture(server):
    pass

@pytest.mark.skipif(True, reason="no chromium")
def test_skipif():
    pass

@pytest.mark.gpu
def test_gpu_only():
    pytest.skip("needs an NVIDIA GPU")

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
    # pytest's own closing line stays the last: 1 passed, 3 errors (the skips), 1 skipped (GPU), 1 xfailed
    assert lines[-1].startswith("=") and "1 passed" in lines[-1] and "1 skipped" in lines[-1], text
    assert "1 failed" in lines[-1] and "2 errors" in lines[-1] and "1 deselected" in lines[-1], text
    assert lines[-2] == ("[ci] 1 skipped (GPU-only, allowed): 1 x needs an NVIDIA GPU; 3 skip(s) FAILED the run "
                         "(CI=true): 2 x no server answers; 1 x no chromium"), text
    failed = [line.split(" - ")[0] for line in lines if line.startswith(("FAILED", "ERROR"))
              and "skipped under CI=true, where only tests marked `gpu` may skip" in line]
    assert sorted(failed) == ["ERROR test_some.py::test_skipif", "ERROR test_some.py::test_skips_in_its_fixture",
                              "FAILED test_some.py::test_skips_inside"], text


def test_without_ci_skips_pass_and_the_closing_line_says_why(tmp_path):
    status, lines = _pytest(tmp_path)
    text = "\n".join(lines)
    assert status == 0, text
    assert "1 passed, 4 skipped, 1 deselected, 1 xfailed" in lines[-1], text
    assert lines[-2] == "[skips] 4 skipped: 2 x no server answers; 1 x no chromium; 1 x needs an NVIDIA GPU", text


def test_an_opt_in_suite_runs_where_its_variable_is_set(tmp_path):
    status, lines = _pytest(tmp_path, CONTAINER_ALL="1")
    assert "2 passed, 4 skipped, 1 xfailed" in lines[-1], "\n".join(lines)


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
