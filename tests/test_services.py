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
        assert err.strip().splitlines()[-1] == "[test] WARNING: postgres did not start: %s; its tests will skip or fail, each saying why" % why


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


@pytest.mark.parametrize("value", ["true", " TRUE ", "Yes", "1", "\ttrue\n", "0", "false", "", "on", "t rue"])
def test_bash_and_python_read_ci_by_one_rule(value):
    """services.sh's under_ci and tests/ci_skips.py's agree on every value (trimmed, lower-cased)."""
    import ci_skips

    status, out, err = _bash('source scripts/services.sh; under_ci && echo yes || echo no', CI=value)
    os.environ["CI"], saved = value, os.environ.get("CI")
    try:
        python = ci_skips.under_ci()
    finally:
        os.environ.pop("CI") if saved is None else os.environ.__setitem__("CI", saved)
    assert (status, out.strip()) == (0, "yes" if python else "no"), (value, out, err)


def test_ci_run_of_a_fresh_clone_says_ci_true(tmp_path):
    """.ci/run exports CI=true where nothing set it (so no part may be skipped), and keeps a CI's own value."""
    (tmp_path / ".ci").mkdir()
    (tmp_path / "scripts").mkdir()
    shutil.copy(str(REPO / ".ci/run"), str(tmp_path / ".ci/run"))
    (tmp_path / "scripts/test.sh").write_text('#!/bin/sh\necho "CI=$CI"\n')
    os.chmod(str(tmp_path / "scripts/test.sh"), 0o755)
    for env, said in (({}, "CI=true"), ({"CI": "1"}, "CI=1")):
        environ = dict({k: v for k, v in os.environ.items() if k != "CI"}, **env)
        done = subprocess.run(["bash", str(tmp_path / ".ci/run")], env=environ, stdout=subprocess.PIPE,
                              universal_newlines=True, timeout=60)
        assert (done.returncode, done.stdout.strip()) == (0, said)


def _answers(port):
    return subprocess.call(["psql", "-X", "-tAc", "SELECT 1", "postgresql://bench@127.0.0.1:%d/bench" % port],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0


def test_two_runs_side_by_side_the_last_user_stops_what_one_started_even_on_sigterm(postgres_dir):
    """Run A starts a private PostgreSQL server, run B finds it running; A ending leaves it to B
    (it still answers), and B, ended by SIGTERM, is the last user and stops it."""
    port = _free_port()
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", "ORCHESTRATOR_TEST_POSTGRES")}
    environ.update(ROOT=str(REPO), POSTGRES_TEST_DIR=postgres_dir, POSTGRES_TEST_PORT=str(port),
                   PATH="/usr/lib/postgresql/15/bin:" + os.environ["PATH"])
    script = ('source scripts/services.sh; stop_parts_at_exit; start_parts postgres; '
              'echo "url=${ORCHESTRATOR_TEST_POSTGRES:-}"; read _; stop_parts; echo stopped; read _')
    runs = [subprocess.Popen(["bash", "-c", script], cwd=str(REPO), env=environ, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True)
            for _ in range(2)]
    a, b = runs
    try:
        url = "url=postgresql+psycopg://bench@127.0.0.1:%d/bench" % port
        assert a.stdout.readline().strip() == url
        assert b.stdout.readline().strip() == url
        assert os.path.exists(os.path.join(postgres_dir, "started-by-test.sh"))  # A started it
        a.stdin.write("\n")
        a.stdin.flush()
        assert a.stdout.readline().strip() == "stopped"
        assert _answers(port), "A stopped the server B still uses"
        b.terminate()
        assert b.wait(timeout=120) == 143
        assert not _answers(port), "B, the last user, did not stop the server a test.sh started"
    finally:
        for run in runs:
            run.kill()
            run.wait()
        subprocess.call(["bash", "scripts/postgres.sh", "stop"], cwd=str(REPO), env=environ,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
