"""scripts/services.sh, frameworks.sh and apt.sh for real: under CI=true a real part that does not
start fails the run naming it and why (a second, private PostgreSQL server here, never the shared
one), a framework that fails does not stop the others, and apt-get waits for another's lock."""
import fcntl
import os
import re
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers import REPO


def _bash(script, timeout=300, **env):
    """`bash -c script` in the repository, ROOT set as test.sh sets it: (exit status, stdout, stderr)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", "ORCHESTRATOR_TEST_POSTGRES")}
    environ.update(ROOT=str(REPO), **env)
    done = subprocess.run(["bash", "-c", script], cwd=str(REPO), env=environ, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def postgres_dir():
    """A private state directory for a second PostgreSQL server (its owner, `postgres`, may enter)."""
    path = tempfile.mkdtemp(prefix="orchestrator-postgres-test-", dir="/tmp")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


START_POSTGRES = 'source scripts/services.sh; start_parts postgres; echo "rc=$? url=${ORCHESTRATOR_TEST_POSTGRES:-}"'


@pytest.mark.parametrize("ci", ["true", ""])
def test_a_part_that_does_not_start_fails_the_run_under_ci_naming_why(postgres_dir, ci):
    with socket.socket() as busy:  # the port taken by something that is not PostgreSQL
        busy.bind(("127.0.0.1", 0))
        busy.listen(8)
        port = busy.getsockname()[1]
        status, out, err = _bash(START_POSTGRES, CI=ci, POSTGRES_TEST_DIR=postgres_dir, POSTGRES_TEST_PORT=str(port))
    why = "127.0.0.1:%d is already in use by another process; pick another port with POSTGRES_TEST_PORT" % port
    assert status == 0, err
    if ci:
        assert out.strip() == "rc=1 url=", out + err
        assert "[test] ERROR: postgres did not start: %s\n" % why in err, err
        assert err.strip().splitlines()[-1] == ("[test] CI=true: 1 real part(s) did not start, so their tests "
                                               "cannot prove them: postgres (%s)" % why), err
    else:
        assert out.strip() == "rc=0 url=", out + err
        assert err.strip().splitlines()[-1] == "[test] WARNING: postgres did not start: %s; its tests will skip" % why


def test_a_stopped_server_is_started_under_ci_and_only_what_was_started_is_stopped(postgres_dir):
    """The CI path with no server running: a second, private server (its own directory and port)
    is started, answers, and is stopped at the end; the shared one is never touched."""
    port = _free_port()
    script = START_POSTGRES + '; [ -z "${ORCHESTRATOR_TEST_POSTGRES:-}" ] || psql -X -tAc "SELECT 42" ' \
        '"postgresql://bench@127.0.0.1:%d/bench"; stop_parts; bash scripts/postgres.sh url' % port
    status, out, err = _bash(script, CI="true", POSTGRES_TEST_DIR=postgres_dir, POSTGRES_TEST_PORT=str(port),
                             PATH="%s:%s" % ("/usr/lib/postgresql/15/bin", os.environ["PATH"]))
    lines = out.strip().splitlines()
    assert lines[:2] == ["rc=0 url=postgresql+psycopg://bench@127.0.0.1:%d/bench" % port, "42"], out + err
    assert status == 1 and "no server answers on 127.0.0.1:%d" % port in err, out + err  # stopped again


def test_one_framework_that_fails_does_not_stop_the_others_and_is_named_last():
    status, out, err = _bash("scripts/frameworks.sh nosuchfw numpy")
    said = (out + err).strip().splitlines()
    assert status == 1, out + err
    assert any(re.match(r"\[frameworks\] numpy: ready \(", line) for line in said), out + err
    assert said[-1].startswith("[frameworks] not ready: nosuchfw (env: no venv recipe for framework 'nosuchfw'"), \
        said[-1]


def _apt_root(path):
    """An empty apt tree of its own (no sources), so that its locks are not the machine's."""
    for d in ("var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/lib/dpkg", "etc/apt"):
        (path / d).mkdir(parents=True, exist_ok=True)
    (path / "var/lib/dpkg/status").touch()
    return ["-o", "Dir=%s" % path, "-o", "Dir::State::status=%s" % (path / "var/lib/dpkg/status"),
            "-o", "Dir::Etc::sourcelist=/dev/null", "-o", "Dir::Etc::sourceparts=/nonexistent"]


def test_apt_get_waits_for_a_lock_another_holds(tmp_path):
    """`apt-get update` fails at once on the package lists' lock whatever DPkg::Lock::Timeout says:
    apt_get waits for it, says so, and goes on when the holder lets go."""
    options = " ".join(_apt_root(tmp_path))
    lock = os.open(str(tmp_path / "var/lib/apt/lists/lock"), os.O_RDWR | os.O_CREAT, 0o640)
    fcntl.lockf(lock, fcntl.LOCK_EX)
    environ = dict(os.environ, ROOT=str(REPO), APT_LOCK_TIMEOUT="120")
    proc = subprocess.Popen(["bash", "-c", "source scripts/apt.sh; apt_get %s update" % options], cwd=str(REPO),
                            env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, universal_newlines=True)
    try:
        first = proc.stderr.readline()  # it says it waits, once, before the lock is let go
        assert first.startswith("[apt] waiting up to 120 s: E: Could not get lock %s" % (
            tmp_path / "var/lib/apt/lists/lock")), first
    finally:
        os.close(lock)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, first + rest
    assert "[apt] waiting" not in rest, rest


def _commands(line):
    """A shell line's code: its comment and quoted strings taken out (`command -v apt-get` asks, not calls)."""
    line = re.sub(r'"(\\.|[^"\\])*"' + r"|'[^']*'", "", line)
    return re.sub(r"(^|\s)#.*", "", line)


def test_every_apt_get_of_the_scripts_goes_through_apt_sh():
    scripts = sorted((REPO / "scripts").glob("*.sh")) + sorted((REPO / "slurm").glob("*.sh"))
    direct = ["%s:%d" % (path.relative_to(REPO), n) for path in scripts if path.name != "apt.sh"
              for n, line in enumerate(path.read_text().splitlines(), 1) if re.search(r"(?<!command -v )\bapt-get\b", _commands(line))]
    assert direct == [], "apt-get called directly (use scripts/apt.sh's apt_get/apt_install): %s" % direct
