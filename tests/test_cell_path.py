"""benchmarks/cell_path.py, the tool that follows one cell through the project's files (issue 36's
closing note): its counting on canned call sequences, its grouping by the architecture page's
layers, and its wrapper tracing a real process and the Python child that process starts."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
import cell_path  # noqa: E402 - the benchmark's own functions


def test_a_return_is_a_call_into_a_file_the_thread_left_before():
    # a -> b leaves a; back into a is a return; c is new; b again (left at b -> a) is one;
    # a second call in b stays in b; a again is one
    assert cell_path.returns(["a", "b", "a", "c", "b", "b", "a"]) == [False, False, True, False, True, False, True]
    assert cell_path.returns(["a", "a", "a"]) == [False, False, False]


def test_threads_are_followed_apart_and_the_window_counts_the_first_calls_in_time_order():
    # each thread stays in its own file: interleaved in time, one sequence would see a, b, a, b
    apart = {"t1": [(1, "a"), (3, "a")], "t2": [(2, "b"), (4, "b")]}
    assert cell_path.summary(apart, first=100) == (["a", "b"], 0, 0)
    # in time order a b d b c a: t2 returns to b (4th call), t1 to a (6th); t1's c lies between
    back = {"t1": [(1, "a"), (5, "c"), (7, "a")], "t2": [(2, "b"), (3, "d"), (4, "b")]}
    assert [cell_path.summary(back, first=n)[1] for n in (3, 4, 5, 6, 100)] == [0, 1, 1, 2, 2]
    assert cell_path.summary(back, first=100) == (["a", "b", "d", "c"], 2, 2)


def test_a_file_lies_in_the_layer_the_architecture_page_draws_else_in_its_folder():
    drawn = cell_path.layers((REPO / "docs" / "architecture.md").read_text())
    stages = {path: cell_path.stage_of(path, drawn) for path in (
        "orchestrator/cli.py", "hydra_plugins/orchestrator_launcher/orchestrator_launcher.py",
        "orchestrator/private_files.py", "orchestrator/store/db.py", "orchestrator/store/__init__.py",
        "orchestrator/job/monitor/loop.py", "trainers/torch/models.py", "trainers/common/__init__.py")}
    assert stages == {
        "orchestrator/cli.py": "front door", "hydra_plugins/orchestrator_launcher/orchestrator_launcher.py": "front door",
        "orchestrator/private_files.py": "registries", "orchestrator/store/db.py": "store",
        "orchestrator/store/__init__.py": "store", "orchestrator/job/monitor/loop.py": "job",
        "trainers/torch/models.py": "trainers/torch/", "trainers/common/__init__.py": "trainers/common/"}


def test_only_a_python_started_with_dash_m_is_wrapped():
    wrapped = cell_path.traced_argv(["/env/bin/python3", "-u", "-m", "submitit.core._submit", "f"], "/t")
    assert wrapped == ["/env/bin/python3", "-u", cell_path.__file__, "--trace", "/t", "-m", "submitit.core._submit", "f"]
    for other in (["ch-run", "-m", "x"], ["/env/bin/python", "script.py"], "python -m x"):
        assert cell_path.traced_argv(other, "/t") == other


def test_the_wrapper_traces_its_process_and_the_python_child_it_starts(tmp_path):
    # a module outside the project (not counted) that starts a project module as `python -m`
    (tmp_path / "starter.py").write_text(
        "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'orchestrator.runstate'], check=True)\n")
    traces = tmp_path / "traces"
    traces.mkdir()
    subprocess.run(cell_path.traced_argv([sys.executable, "-m", "starter"], str(traces)), cwd=str(tmp_path),
                   env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, check=True, timeout=120)
    processes = {tuple(argv): calls for argv, _, calls in cell_path.read_traces(str(traces), wait_s=0)}
    assert list(processes) == [("-m", "starter"), ("-m", "orchestrator.runstate")]
    assert processes[("-m", "starter")] == []
    child = processes[("-m", "orchestrator.runstate")]
    assert child[0][2] == "orchestrator/__init__.py" and "orchestrator/runstate.py" in {c[2] for c in child}
    assert all(not name.endswith(".tmp") for name in (p.name for p in traces.iterdir()))
    assert json.loads((traces / next(p.name for p in traces.iterdir() if p.name.endswith(".json"))).read_text())
