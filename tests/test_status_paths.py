"""`status` resolves each open run's directory (the database's word) to decide whether it is under
the command's runs folder; resultfile.realpath_via does it with each folder resolved once. It must
answer exactly what os.path.realpath answers, on a real tree with symlinks of every kind."""
import os

from orchestrator.results.resultfile import inside, realpath_via


def _tree(tmp_path):
    """runs/ with a sweep folder, a cell folder that is a symlink out of runs, a repeat that is a
    symlink back in, a loop, a relative link and a dangling one; and a folder outside runs."""
    runs, away = tmp_path / "runs", tmp_path / "away"
    (runs / "s1" / "c1" / "0").mkdir(parents=True)
    (away / "c9" / "0").mkdir(parents=True)
    (runs / "s1" / "c2").symlink_to(away / "c9")  # a cell folder pointing outside
    (runs / "s1" / "c1" / "1").symlink_to(runs / "s1" / "c1" / "0")  # a repeat pointing inside
    (runs / "s1" / "c3").symlink_to("c1")  # relative
    (runs / "s1" / "loop").symlink_to(runs / "s1" / "loop")  # a link to itself
    (runs / "s1" / "gone").symlink_to(tmp_path / "nothing")  # dangling
    (runs / "s2").symlink_to(away)  # a sweep folder pointing outside
    return runs


def test_realpath_via_answers_what_realpath_answers(tmp_path):
    runs = _tree(tmp_path)
    paths = [f"{runs}/{tail}" for tail in (
        "s1/c1/0", "s1/c1/1", "s1/c2/0", "s1/c3/0", "s1/loop/0", "s1/gone/0", "s2/c9/0", "s1/none/0", "s1/c1/0/x",
        "s1/../s2/c9/0", "s1/c1/./0", "s1/c1/0/", "s1//c1/0", "s1/c2/../c1/0")] + [
        "relative/path", "/", "//x", str(tmp_path)]
    folders: dict = {}
    for _ in range(2):  # the second time from the memo
        for path in paths:
            assert realpath_via(path, folders) == os.path.realpath(path), path
    assert folders  # the folders were kept


def test_a_run_directory_symlinked_out_of_runs_is_outside_with_the_memo_too(tmp_path):
    runs = _tree(tmp_path)
    folders: dict = {}
    verdicts = {tail: inside(runs, f"{runs}/{tail}", folders) for tail in ("s1/c1/0", "s1/c1/1", "s1/c3/0", "s1/c2/0", "s2/c9/0")}
    assert verdicts == {"s1/c1/0": True, "s1/c1/1": True, "s1/c3/0": True, "s1/c2/0": False, "s2/c9/0": False}
    assert verdicts == {tail: inside(runs, f"{runs}/{tail}") for tail in verdicts}
