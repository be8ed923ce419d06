"""A pytest plugin (tests/conftest.py loads it): under CI=true, a skipped test fails the run.

Why: pytest exits 0 on skips, and every real part this project tests against (the test Slurm
cluster, PostgreSQL, GlusterFS, Chromium, the container images, the trainer environments) makes
its tests skip, loudly, where it is missing. A green CI run with them skipped proves nothing, so
under CI=true a skip becomes a failure that keeps its reason; so does an xfail that did not run the
test (`xfail(run=False)`, or `pytest.xfail` called in a fixture or the test), which passes just as
quietly; an xfail of a test that ran and failed as expected stays one. The one exception is a test
marked `gpu(reason=...)` (pyproject.toml's markers) that skips for exactly that reason: it needs a
GPU and its driver, or their absence, which no CI machine can provide both of. Any other skip of
such a test (a fixture's "caffe cannot run here") fails like any other. A closing line, just above
pytest's own last line, says how many tests skipped and why (the GPU-only ones that may, those
that failed the run for it, and what a fixture left out: `dropped`).
"""
import os
from collections import Counter

import pytest

#: The marker of the only tests that may skip under CI=true.
ALLOWED = "gpu"
#: The variable CI services set to `true`.
CI_VARIABLE = "CI"
#: Opt-in suites: a test with the marker is collected only where the variable is set (deselected, never
#: skipped, elsewhere: it is not part of that run).
OPT_IN = {"container_all": "CONTAINER_ALL"}
#: The values of CI_VARIABLE, trimmed and lower-cased, that make a CI run (scripts/services.sh's
#: `under_ci` reads it by the same rule).
CI_VALUES = ("true", "1", "yes")
#: Every skip of the session, as (allowed, reason).
SKIPS = pytest.StashKey()


def under_ci():
    """Whether this is a CI run: CI_VARIABLE, trimmed and lower-cased, is one of CI_VALUES (GitHub,
    GitLab and most services set CI=true)."""
    return os.environ.get(CI_VARIABLE, "").strip().lower() in CI_VALUES


def dropped(config, reason):
    """A fixture leaves something out of its test (a framework this machine cannot hold): under
    CI=true that fails the test, as a skip would; elsewhere the closing line counts it."""
    config.stash[SKIPS].append((not under_ci(), reason))
    if under_ci():
        pytest.fail("left out under %s=true, where only GPU-only tests may skip: %s" % (CI_VARIABLE, reason),
                    pytrace=False)


def pytest_configure(config):
    config.stash[SKIPS] = []


def pytest_collection_modifyitems(config, items):
    """Leaves out the opt-in suites whose variable is unset (OPT_IN), saying so as pytest's `deselected`."""
    off = [marker for marker, variable in OPT_IN.items() if not os.environ.get(variable)]
    kept, left = [], []
    for item in items:
        (left if any(item.get_closest_marker(marker) for marker in off) else kept).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


def _reason(report):
    """A skip report's reason, without pytest's `Skipped: ` prefix (an xfail's, without `[NOTRUN] `)."""
    if hasattr(report, "wasxfail"):
        text = report.wasxfail
        return text[len("[NOTRUN] "):] if text.startswith("[NOTRUN] ") else text
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text[len("Skipped: "):] if text.startswith("Skipped: ") else text


def _unrun(report, call):
    """Whether a report is a skip, or an xfail that never ran the test to its expected failure
    (run=False, or pytest.xfail called in a fixture or in the test)."""
    if not report.skipped:
        return False
    if not hasattr(report, "wasxfail"):
        return True
    return report.when != "call" or (call.excinfo is not None and call.excinfo.errisinstance(pytest.xfail.Exception))


def _gpu_reason(item, reason):
    """Whether `reason` is the GPU reason the test declares (`@pytest.mark.gpu(reason=...)`)."""
    marker = item.get_closest_marker(ALLOWED)
    return marker is not None and bool(marker.kwargs.get("reason")) and marker.kwargs["reason"] == reason


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Records each skip (and unrun xfail); under CI=true turns one into a failure that says why,
    unless the test is marked `gpu` with that very reason."""
    outcome = yield
    report = outcome.get_result()
    if not _unrun(report, call):
        return
    reason = _reason(report)
    allowed = _gpu_reason(item, reason)
    item.config.stash[SKIPS].append((allowed or not under_ci(), reason))
    if under_ci() and not allowed:
        report.outcome = "failed"
        report.longrepr = ("skipped under %s=true, where only a test marked `%s(reason=...)` may skip, for that "
                           "reason; start what it needs (scripts/test.sh does as root): %s" % (CI_VARIABLE, ALLOWED, reason))
        if hasattr(report, "wasxfail"):
            del report.wasxfail


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A whole module skipped at collection (pytest.skip(allow_module_level=True)) fails the same."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and under_ci():
        collector.config.stash[SKIPS].append((False, _reason(report)))
        report.outcome = "failed"
        report.longrepr = "module skipped under %s=true: %s" % (CI_VARIABLE, _reason(report))


def summary(skips, ci):
    """The closing line: how many tests skipped, and why (each reason with its count)."""
    def listed(reasons):
        return "; ".join("%d x %s" % (n, why) for why, n in Counter(reasons).most_common())

    allowed = [why for ok, why in skips if ok]
    failed = [why for ok, why in skips if not ok]
    if not ci:
        return "[skips] %d skipped or left out%s" % (len(allowed), (": " + listed(allowed)) if allowed else "")
    line = "[ci] %d skipped (GPU-only, allowed)%s" % (len(allowed), (": " + listed(allowed)) if allowed else "")
    if failed:
        line += "; %d skip(s) FAILED the run (CI=true): %s" % (len(failed), listed(failed))
    return line


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    """The closing line, after pytest's short summary and before its last line (`N passed ...`),
    which stays the last for whatever reads it."""
    yield
    skips = terminalreporter.config.stash.get(SKIPS, [])
    if skips or under_ci():
        terminalreporter.write_line(summary(skips, under_ci()))
