"""runtime=module: a trainer run after `module load` of a site's module (orchestrator/envs/module_runtime.py).

Against the real thing: Lmod from Debian's package and a module tree over two of the project's own
trainer environments (scripts/modules.sh, started by scripts/test.sh as the `modules` part), loaded
in a step of the test Slurm cluster. Hostile module names and trees are refused before any shell.
"""
import os
import subprocess
from pathlib import Path

import pytest

from helpers import REPO
from orchestrator.envs import module_runtime
from orchestrator.envs.module_runtime import ModuleRuntime
from orchestrator.envs.runtime import make_runtime
from orchestrator.envs.venv_runtime import EnvironmentNotReady, VenvRuntime


@pytest.fixture(scope="module")
def module_tree():
    """The test module tree (scripts/modules.sh), or a loud skip (a failure under CI=true) saying how."""
    tree = os.environ.get("ORCHESTRATOR_TEST_MODULES", "").strip()
    if not tree:
        done = subprocess.run(["bash", str(REPO / "scripts" / "modules.sh"), "path"], capture_output=True, text=True)
        tree = done.stdout.strip()
    if not tree or not Path(tree).is_dir() or not os.path.isfile(module_runtime.INITS[0]):
        pytest.skip("MODULE TESTS SKIPPED: no Lmod or no test module tree; run scripts/modules.sh as root")
    return tree


def modules_of(tree):
    """Each module of the tree as (name/version, the environment directory its modulefile puts first)."""
    found = []
    for lua in sorted(Path(tree).glob("*/*.lua")):
        env_dir = next(line.split('"')[3] for line in lua.read_text().splitlines() if line.startswith("setenv(\"VIRTUAL_ENV\""))
        found.append((f"{lua.parent.name}/{lua.stem}", env_dir))
    return found


@pytest.mark.parametrize("hostile", ["", "../torch-env/2", "torch-env/../../x", "-f", "--force", "a b", "a;touch x",
                                     "$(touch x)", "a`id`", "a\nb", "/abs/path", "x/", ".hidden/1", None, 3])
def test_a_module_name_that_is_not_plain_words_is_refused_before_any_shell(hostile, module_tree):
    with pytest.raises(EnvironmentNotReady, match=r"is not a module name .* use the name `module avail` shows$"):
        ModuleRuntime("torch", hostile, {"path": [module_tree]})


def test_the_module_tree_must_be_existing_absolute_directories(tmp_path):
    for tree in (None, {}, {"path": []}, {"path": ["relative/dir"]}, {"path": [str(tmp_path / "none")]},
                 {"path": [f"{tmp_path}:/etc"]}):
        with pytest.raises(EnvironmentNotReady, match="modules"):
            module_runtime.module_path(tree)
    assert module_runtime.module_path({"path": [str(tmp_path), "/"]}) == f"{tmp_path}:/"


def test_runtime_module_needs_a_module_build():
    with pytest.raises(EnvironmentNotReady, match=r"^runtime=module needs the site module to load: build=module:"):
        make_runtime("module", "torch")
    assert module_runtime.module_of("module:torch-env/2.13.0") == "torch-env/2.13.0"
    assert module_runtime.module_of("openblas") is None and module_runtime.module_of(None) is None


def test_a_module_the_tree_lacks_is_refused_with_the_way_out(module_tree):
    runtime = ModuleRuntime("torch", "torch-env/0.0.0-absent", {"path": [module_tree]})
    with pytest.raises(EnvironmentNotReady, match=r"^module torch-env/0.0.0-absent is not available in the module tree "):
        runtime.ensure(log=lambda line: None)


def test_each_module_of_the_tree_runs_its_own_interpreter_in_a_step_of_the_test_cluster(module_tree, slurm_env):
    """The command a job runs, run in a real Slurm step: `module load` puts the module's interpreter
    first, so Python's own path (`python -m site`: sys.path) holds the module's environment's packages,
    one environment per module."""
    modules = modules_of(module_tree)
    assert {name.split("/")[0] for name, _ in modules} == {"numpy-env", "torch-env"}, modules
    assert {env_dir for _, env_dir in modules} == {str(VenvRuntime(fw).env_dir) for fw in ("numpy", "torch")}
    for name, env_dir in modules:
        runtime = make_runtime("module", name.split("-")[0], module=name, modules={"path": [module_tree]})
        assert runtime.ensure(log=lambda line: None) == name and runtime.identity() == f"module:{name}"
        argv, env = runtime.command([])
        argv[argv.index(runtime.trainer)] = "site"  # Python's own report of its paths, for the trainer
        done = subprocess.run(["srun", "-N1", "-p", "k20m", "--mem=100M", "-t", "2", *argv], capture_output=True,
                              text=True, timeout=180, env={**slurm_env, **env}, cwd=str(REPO))
        assert done.returncode == 0, (name, done.stdout, done.stderr)
        paths = [line.strip(" ',") for line in done.stdout.split("]")[0].splitlines()[1:]]
        assert any(p.startswith(f"{env_dir}/lib/python") and p.endswith("site-packages") for p in paths), (name, paths)
