"""Trainer environments: the venv recipe and the Apptainer command line."""

from pathlib import Path

import pytest

from orchestrator.envs.runtime import ApptainerRuntime, make_runtime
from orchestrator.envs.venv_runtime import REPO, EnvironmentNotReady, VenvRuntime


def test_venv_is_keyed_by_its_recipe(tmp_path):
    recipe = tmp_path / "recipes" / "toy"
    recipe.mkdir(parents=True)
    (recipe / "env.yaml").write_text("python: [python3]\nrequirements: requirements.txt\n")
    (recipe / "requirements.txt").write_text("six==1.16.0\n")
    first = VenvRuntime("toy", cache=tmp_path / "cache", recipe_dir=recipe)
    before = first.env_dir
    (recipe / "requirements.txt").write_text("six==1.17.0\n")
    assert VenvRuntime("toy", cache=tmp_path / "cache", recipe_dir=recipe).env_dir != before
    assert before.parent == tmp_path / "cache" / "envs" and before.name.startswith("toy-")


def test_venv_is_created_once_with_a_progress_line_and_reused(tmp_path):
    recipe = tmp_path / "toy"
    recipe.mkdir()
    (recipe / "env.yaml").write_text("python: [python3]\n")
    (recipe / "requirements.txt").write_text("# nothing to install\n")
    runtime = VenvRuntime("toy", cache=tmp_path / "cache", recipe_dir=recipe)
    lines = []
    python = runtime.ensure(lines.append)
    assert python.exists() and runtime.is_ready()
    assert any("creating the toy environment" in line for line in lines)
    lines.clear()
    assert runtime.ensure(lines.append) == python and lines == []  # reused, silently
    assert runtime.identity().startswith("venv:sha256:")


def test_a_broken_recipe_fails_with_the_step_and_the_way_out(tmp_path):
    recipe = tmp_path / "toy"
    recipe.mkdir()
    (recipe / "env.yaml").write_text("python: [python3]\n")
    (recipe / "requirements.txt").write_text("this-package-does-not-exist-anywhere==0.0.1\n")
    runtime = VenvRuntime("toy", cache=tmp_path / "cache", recipe_dir=recipe)
    with pytest.raises(EnvironmentNotReady, match="creating the environment failed at .*pip install"):
        runtime.ensure(lambda line: None)
    assert not runtime.is_ready()


def test_missing_recipe_and_missing_interpreter_are_named(tmp_path):
    with pytest.raises(EnvironmentNotReady, match="no venv recipe for framework 'nope'.*torch"):
        VenvRuntime("nope")
    recipe = tmp_path / "toy"
    recipe.mkdir()
    (recipe / "env.yaml").write_text("python: [python9.99]\n")
    (recipe / "requirements.txt").write_text("")
    with pytest.raises(EnvironmentNotReady, match=r"python9\.99.*env\.yaml"):
        VenvRuntime("toy", cache=tmp_path, recipe_dir=recipe).interpreter()


def test_venv_command_runs_the_trainer_module_from_the_repository():
    runtime = VenvRuntime("torch")
    argv, env = runtime.command(["--model", "lenet"])
    assert argv == [str(runtime.python), "-m", "trainers.torch", "--model", "lenet"]
    assert env["PYTHONPATH"] == str(REPO)


def test_apptainer_command_binds_trainers_and_uses_nv_only_for_gpus(tmp_path):
    runtime = make_runtime("apptainer", "torch", images=tmp_path)
    argv, env = runtime.command(["--model", "lenet"], gpus=2, binds=["/data/mnist"])
    text = " ".join(argv)
    assert argv[:3] == ["apptainer", "exec", "--nv"]
    assert f"--bind {REPO / 'trainers'}:/opt/orchestrator/trainers" in text
    assert "--bind /data/mnist:/data/mnist" in text
    assert "--env PYTHONPATH=/opt/orchestrator" in text
    assert text.endswith(f"{tmp_path / 'torch.sif'} python3 -m trainers.torch --model lenet")
    assert "--nv" not in runtime.command([], gpus=0)[0]


def test_apptainer_without_binary_or_image_says_how_to_fix(tmp_path):
    with pytest.raises(EnvironmentNotReady, match="not on this node's PATH"):
        ApptainerRuntime("torch", tmp_path, binary="no-such-apptainer").ensure()
    with pytest.raises(EnvironmentNotReady, match="orchestrator images build torch.*apptainer build .*torch.sif"):
        ApptainerRuntime("torch", tmp_path, binary="true").ensure()


def test_a_framework_can_name_its_trainer_module_and_env():
    argv, _ = make_runtime("venv", "torch", trainer="tests.numpy_trainer").command(["--model", "lenet"])
    assert argv[0] == str(VenvRuntime("torch").python) and argv[1:3] == ["-m", "tests.numpy_trainer"]
    argv, _ = make_runtime("apptainer", "torch", images=Path("/i"), trainer="trainers.mine").command([])
    assert argv[-4:] == ["/i/torch.sif", "python3", "-m", "trainers.mine"]
