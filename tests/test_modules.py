"""runtime=module: a trainer run after `module load` of a site's module (orchestrator/envs/module_runtime.py).

Against the real thing: Lmod from Debian's package and a module tree over two of the project's own
trainer environments (scripts/modules.sh, started by scripts/test.sh as the `modules` part), loaded
in a step of the test Slurm cluster. Hostile module names and trees are refused before any shell.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, SMALL, composed, orchestrator, rows, wait_until_final
from orchestrator.envs import builds, module_runtime
from orchestrator.envs.module_runtime import ModuleRuntime
from orchestrator.envs.runtime import make_runtime
from orchestrator.envs.venv_runtime import EnvironmentNotReady, VenvRuntime
from orchestrator.sweep.cell import CellError, resolve_settings


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
    with pytest.raises(EnvironmentNotReady, match=r"^runtime=module runs a site module: name it as build=module:<name>/<version> "):
        make_runtime("module", "torch")
    assert builds.module_of("module:torch-env/2.13.0") == "torch-env/2.13.0"
    assert builds.module_of("openblas") is None and builds.module_of(None) is None


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
        runtime = make_runtime("module", name.split("-")[0], build="module:" + name, modules={"path": [module_tree]})
        assert runtime.ensure(log=lambda line: None) == name and runtime.identity() == f"module:{name}"
        argv, env = runtime.command([])
        argv[argv.index(runtime.trainer)] = "site"  # Python's own report of its paths, for the trainer
        done = subprocess.run(["srun", "-N1", "-p", "k20m", "--mem=100M", "-t", "2", *argv], capture_output=True,
                              text=True, timeout=180, env={**slurm_env, **env}, cwd=str(REPO))
        assert done.returncode == 0, (name, done.stdout, done.stderr)
        paths = [line.strip(" ',") for line in done.stdout.split("]")[0].splitlines()[1:]]
        assert any(p.startswith(f"{env_dir}/lib/python") and p.endswith("site-packages") for p in paths), (name, paths)


@pytest.fixture(scope="module")
def module_cell():
    """numpy's LeNet composed once with runtime=module (Hydra's compose); each test copies it."""
    return composed(["framework=numpy", "model=lenet", "runtime=module", "+cluster.modules={path:[/tmp]}"])


@pytest.mark.parametrize("build,refused", [
    ("default", r"runtime=module runs a site module: name it as build=module:<name>/<version> "),
    ("blis", r"runtime=module runs a site module: name it as build=module:<name>/<version> .*not build=blis"),
    ("module:../numpy-env/1", r"module '\.\./numpy-env/1' is not a module name"),
    ("module:-f", r"module '-f' is not a module name"),
    ("module:a;id", r"module 'a;id' is not a module name"),
])
def test_runtime_module_is_refused_at_expansion_without_a_plain_module_build(module_cell, build, refused):
    with pytest.raises(CellError, match=refused):
        resolve_settings({**module_cell, "build": build})
    assert resolve_settings({**module_cell, "build": "module:numpy-env/2"})["build"] == "module:numpy-env/2"


def test_a_sweep_over_two_modules_lands_a_run_of_each_on_the_test_cluster(module_tree, slurm_workdir):
    """`runtime=module build=module:A,module:B` through the real launcher, sbatch and a node's job: the
    numpy trainer runs in each module's interpreter (the numpy and the torch environment, both with
    numpy), and each run's provenance names its module and the BLAS its process loaded from that
    module's environment."""
    modules = dict(modules_of(module_tree))
    launched = orchestrator(["-m", "framework=numpy", "model=lenet", "runtime=module", "batch_size=8",
                             f"build={','.join('module:' + name for name in modules)}",
                             f"cluster.modules={{path:[{module_tree}]}}", *SMALL], slurm_workdir)
    assert launched.returncode == 0, launched.stderr
    wait_until_final(slurm_workdir)
    assert orchestrator(["collect"], slurm_workdir).returncode == 0
    found = rows(slurm_workdir, "select c.build, r.state, r.environment, r.provenance from runs r "
                                "join cells c on c.id = r.cell_id")
    assert sorted(build for build, *_ in found) == sorted(f"module:{name}" for name in modules), found
    for build, state, environment, provenance in found:
        assert state == "done" and environment == build, (build, state, environment)
        env_dir = modules[build[len("module:"):]]
        paths = {blas["path"] for blas in json.loads(provenance)["framework"]["blas"]}
        assert paths and all(path.startswith(env_dir + "/") for path in paths), (build, paths)


def test_rewriting_the_test_tree_never_leaves_it_missing_for_a_reader(tmp_path, module_tree):
    """scripts/modules.sh run again (a second CI run, another shell) while a job reads the tree: the tree
    is never absent, whether the new tree is the same (left as it is) or differs (a link renamed over)."""
    import threading

    env = {**os.environ, "MODULES_TEST_DIR": str(tmp_path / "mods")}
    script = ["bash", str(REPO / "scripts" / "modules.sh")]
    tree = Path(subprocess.run(script, env=env, capture_output=True, text=True, check=True).stdout.strip())
    lua = sorted(tree.glob("*/*.lua"))[0].relative_to(tree)
    misses, done = [], threading.Event()

    def read():
        while not done.is_set():
            if not (tree / lua).is_file():
                misses.append(1)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(3):
            (tree / f"stray{i}").write_text("")  # a tree that differs from what the script writes
            runs = [subprocess.Popen(script, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    for _ in range(2)]
            assert [p.wait(timeout=120) for p in runs] == [0, 0]
    finally:
        done.set()
        reader.join()
    assert not misses and (tree / lua).is_file() and not list(tree.glob("stray*"))


def test_a_module_that_puts_no_python_first_is_refused_not_run_in_the_jobs_own_python(tmp_path, module_tree):
    """A modulefile that sets no interpreter would leave `python` the job's own (the orchestrator's venv):
    the run would be recorded as the module's while measuring another environment. It stops, saying so;
    a module of the test tree still runs its own interpreter."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "1.lua").write_text('whatis("sets nothing")\n')
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    runtime = ModuleRuntime("numpy", "empty/1", {"path": [str(tmp_path)]})
    assert runtime.ensure(log=lambda line: None) == "empty/1"
    argv, extra = runtime.command(["--help"])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**env, **extra}, cwd=str(REPO))
    assert done.returncode == 2 and "module empty/1 puts no python of its own first on PATH" in done.stderr, done
    name, env_dir = modules_of(module_tree)[0]
    argv, extra = ModuleRuntime(name.split("-")[0], name, {"path": [module_tree]}).command([])
    argv[-1] = "site"  # the trainer's module: Python's own report of its paths instead
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**env, **extra}, cwd=str(REPO))
    assert done.returncode == 0 and f"{env_dir}/lib/python" in done.stdout, done


def test_runtime_module_without_the_clusters_module_tree_is_refused_at_expansion_not_in_the_job(module_cell):
    """A cluster YAML without `modules.path` would let the job wait in the queue and then fail at
    `module load`: the cell is refused before it is submitted, with the way out."""
    bare = {**module_cell, "cluster": {k: v for k, v in module_cell["cluster"].items() if k != "modules"},
            "build": "module:numpy-env/2"}
    with pytest.raises(CellError, match=r"runtime=module needs the site's module tree: add `modules: \{path: "):
        resolve_settings(bare)


def test_a_module_already_loaded_where_the_job_was_submitted_still_runs_as_that_module(module_tree):
    """sbatch carries the submitting shell's environment: a user who had loaded the module there gives the
    job a PATH whose python is already the module's. The job purges the modules first, so loading it again
    puts its python first anew (not the refusal of a module that brings no python of its own)."""
    name, env_dir = modules_of(module_tree)[0]
    runtime = make_runtime("module", "numpy", build="module:" + name, modules={"path": [module_tree]})
    argv, env = runtime.command([])
    argv[argv.index(runtime.trainer)] = "site"
    preloaded = ['bash', '--noprofile', '--norc', '-c', '. "$1"; export MODULEPATH="$2"; module load "$3"; shift 3; '
                 'exec "$@"', "preload", module_runtime.init_script(), module_tree, name, *argv]
    done = subprocess.run(preloaded, capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    assert f"'{env_dir}/lib/python" in done.stdout, done.stdout
