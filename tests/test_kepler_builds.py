"""The study's Kepler builds (issue 39, item 6): a build whose `gpu` base (containers/<fw>/gpu.yaml) runs
a K20m (3.5) makes the reference study's K20m cells of TensorFlow, PyTorch and MXNet submittable; at the
default build they are refused, naming that build as the way out. No GPU and no CUDA wheel here: the
builds are declared, expanded and their Apptainer definitions generated, never built. The study's dry
run before and after: tests/test_report.py::test_the_study_preset_expands_to_270_cells_by_hardware."""
import pytest
from helpers import composed

from orchestrator.envs import builds
from orchestrator.envs.apptainer import generate
from orchestrator.envs.runtime import EnvironmentNotReady, make_runtime
from orchestrator.frameworks import support
from orchestrator.sweep.cell import CellError, resolve_settings
from trainers.common.support import gpu_build_from

KEPLER = ("tensorflow", "torch", "mxnet")


@pytest.fixture(scope="module")
def k20m_torch():
    return composed(["framework=torch", "model=lenet", "dataset=synthetic", "hardware=k20m", "gpus=1"])


def test_a_k20m_cell_at_the_default_build_is_refused_naming_the_kepler_build(k20m_torch):
    with pytest.raises(CellError) as refused:
        resolve_settings(k20m_torch)
    line = str(refused.value)
    assert "\n" not in line.strip() and "compute capability >= 6.0 in its GPU build" in line
    assert "build=kepler runs it (its GPU base cuda11: `orchestrator images def torch --base cuda11`" in line
    settings = resolve_settings({**k20m_torch, "build": "kepler"})
    assert settings["build"] == "kepler"


def test_a_framework_without_a_kepler_build_says_none_covers_it():
    cfg = composed(["framework=jax", "model=lenet", "dataset=synthetic", "hardware=k20m", "gpus=1"])
    with pytest.raises(CellError, match=r"no build of jax declares a GPU base that runs compute capability 3\.5"):
        resolve_settings(cfg)
    with pytest.raises(CellError, match=r"build='kepler' is not a build of jax; jax has default"):
        resolve_settings({**cfg, "build": "kepler"})


@pytest.mark.parametrize("framework", KEPLER)
def test_each_kepler_build_covers_3_5_and_its_definition_generates(framework):
    base = builds.declared(framework)["kepler"]["gpu"]
    assert builds.in_range(builds.gpu_range(framework, "kepler"), 3.5)
    assert builds.gpu_range(framework, builds.DEFAULT) is None  # the framework's own gpu_build holds
    text = generate(framework, base)
    assert "org.orchestrator.gpu_capability compute capability" in text
    wheel = {"tensorflow": "tensorflow==2.11.1", "torch": "torch==1.12.1", "mxnet": "mxnet-cu102==1.9.1"}[framework]
    assert f"\n{wheel}\n" in text and f"org.orchestrator.base {base}" in text


def test_a_build_naming_an_undeclared_gpu_base_is_one_line_naming_the_file(tmp_path):
    (tmp_path / "blas.yaml").write_bytes((builds._CONTAINERS / "blas.yaml").read_bytes())
    recipe = tmp_path / "torch"
    recipe.mkdir()
    for part in ("env.yaml", "requirements.txt", "gpu.yaml"):
        (recipe / part).write_bytes((builds._CONTAINERS / "torch" / part).read_bytes())
    (recipe / "builds.yaml").write_text("kepler: {gpu: cuda10}\n")
    with pytest.raises(builds.BuildError, match=r"builds.yaml: build 'kepler' has gpu='cuda10', which torch's "
                                                 r"gpu.yaml does not declare \(cuda12, cuda11\)"):
        builds.declared("torch", tmp_path)


def test_a_kepler_build_runs_from_its_bases_image_whose_trainer_takes_the_k20m(k20m_torch, tmp_path):
    """runtime=apptainer runs build=kepler from <fw>-<base>.sif (what its definition says to build); the
    image tells the trainer its build's range (TRAINER_GPU_BUILD), so the trainer's own check at run
    time passes the K20m that the framework's default build refuses."""
    settings = resolve_settings({**k20m_torch, "build": "kepler", "runtime": "apptainer"})
    assert settings["build"] == "kepler"
    with pytest.raises(CellError, match=r"build=kepler names a GPU base .*: it runs in runtime=venv or runtime=apptainer "
                                       r"\(its GPU definition\), not in runtime=container's CPU image"):
        resolve_settings({**k20m_torch, "build": "kepler", "runtime": "container"})
    runtime = make_runtime("apptainer", "torch", images=tmp_path, build="kepler")
    assert runtime.image == tmp_path / "torch-cuda11.sif"
    assert make_runtime("apptainer", "torch", images=tmp_path).image == tmp_path / "torch.sif"
    text = generate("torch", "cuda11")
    assert "export TRAINER_GPU_BUILD=3.5,\n" in text and "apptainer build torch-cuda11.sif" in text
    declared, k20m = support({"name": "torch"}), [("Tesla K20m", (3, 5))]
    assert "compute capability >= 6.0 in its GPU build" in declared.capability_problem(k20m, "fp32")
    assert declared.capability_problem(k20m, "fp32", gpu_build_from({"TRAINER_GPU_BUILD": "3.5,"})) is None
    assert "compute capability 3.0 to 7.5" in declared.capability_problem(
        [("A100", (8, 0))], "fp32", gpu_build_from({"TRAINER_GPU_BUILD": "3.0,7.5"}))


@pytest.mark.parametrize("framework, wheel, bounds", [("torch", "torch==1.12.1", "3.5,"), ("mxnet", "mxnet-cu102==1.9.1", "3.0,7.5")])
def test_a_kepler_venv_installs_its_bases_wheels_in_its_own_environment(framework, wheel, bounds, tmp_path):
    """runtime=venv: the build's environment is the recipe's requirements with its GPU base's wheels (the
    image's list, not a second one), in its own folder; the trainer is told the build's range. Nothing is
    installed here (no CUDA wheels reachable)."""
    from orchestrator.envs.venv_runtime import VenvRuntime

    kepler, default = VenvRuntime(framework, tmp_path, build="kepler"), VenvRuntime(framework, tmp_path)
    assert wheel in kepler.requirements_text.splitlines() and wheel not in default.requirements_text
    assert kepler.env_dir.name.startswith(f"{framework}-kepler-") and kepler.env_dir != default.env_dir
    assert kepler.trainer_env()["TRAINER_GPU_BUILD"] == bounds and "TRAINER_GPU_BUILD" not in default.trainer_env()


def test_build_default_typed_after_the_study_preset_runs_the_default_build_and_a_cpu_cell_keeps_it():
    """`+preset=study build=default`: the user's build, not the preset's Kepler build (the default typed is
    a choice, as any other key typed after the preset); and the preset's build is a GPU build: a K20m
    node's CPU cell (gpus=0) keeps the framework's default build and its id."""
    study = ["+preset=study", "+preset/net=lenet_mnist", "framework=torch", "+preset/on=k20m_x1"]
    assert resolve_settings(composed(study))["build"] == "kepler"
    with pytest.raises(CellError, match=r"compute capability >= 6\.0 in its GPU build.*build=kepler runs it"):
        resolve_settings(composed(study + ["build=default"]))
    assert resolve_settings(composed(study + ["gpus=0"]))["build"] == "default"
    assert resolve_settings(composed(study + ["build=torch-2.14", "gpus=0"]))["build"] == "torch-2.14"


@pytest.mark.parametrize("value", ["[cuda11]", "{cuda11: 1}"])
def test_a_build_whose_gpu_or_blas_is_not_a_name_is_one_line_naming_the_file(tmp_path, value):
    (tmp_path / "blas.yaml").write_bytes((builds._CONTAINERS / "blas.yaml").read_bytes())
    recipe = tmp_path / "torch"
    recipe.mkdir()
    for part in ("env.yaml", "requirements.txt", "gpu.yaml"):
        (recipe / part).write_bytes((builds._CONTAINERS / "torch" / part).read_bytes())
    for key in ("gpu", "blas"):
        (recipe / "builds.yaml").write_text(f"kepler: {{{key}: {value}}}\n")
        builds.declared.cache_clear()
        with pytest.raises(builds.BuildError, match=rf"builds.yaml: build 'kepler' has {key}=.*which .* does not declare"):
            builds.declared("torch", tmp_path)
    builds.declared.cache_clear()
    (recipe / "builds.yaml").write_text("plain:\n")  # a build that changes nothing: declared, no traceback
    assert builds.declared("torch", tmp_path) == {"plain": None}
    builds.declared.cache_clear()


def test_a_missing_kepler_image_names_its_bases_definition_not_the_cpu_image(tmp_path):
    """The CPU image directory built as torch-cuda11.sif would run the Kepler cells on a CPU-only torch."""
    runtime = make_runtime("apptainer", "torch", images=tmp_path, binary="true", build="kepler")
    with pytest.raises(EnvironmentNotReady) as missing:
        runtime.ensure()
    line = str(missing.value)
    assert "orchestrator images def torch --base cuda11 -o torch-cuda11.def" in line
    assert f"apptainer build {tmp_path / 'torch-cuda11.sif'} torch-cuda11.def" in line
    assert "images build torch" not in line and "\n" not in line


def test_a_kepler_build_on_a_gpu_newer_than_its_base_names_the_default_build_as_the_way_out():
    """mxnet's kepler build (cuda10: 3.0 to 7.5) on an H100: its default build (>= 5.0) runs it; the refusal
    must not say that no build does."""
    cfg = composed(["framework=mxnet", "model=lenet", "dataset=synthetic", "hardware=h100", "gpus=1"])
    assert resolve_settings(cfg)["build"] == "default"
    with pytest.raises(CellError) as refused:
        resolve_settings({**cfg, "build": "kepler"})
    line = str(refused.value)
    assert "compute capability 3.0 to 7.5 in its GPU build" in line and "no build of mxnet" not in line
    assert line.endswith("; build=default runs it (the framework's own GPU build)")
    assert support({"name": "mxnet"}).notes["gpu_build"] not in line  # mxnet's own note: a K20m needs mxnet-cu102


def test_a_gpu_build_note_is_shown_only_on_the_side_of_the_frameworks_own_range_it_is_about():
    """A note on a framework's own GPU build is about GPUs older than it (mxnet's: a K20m needs mxnet-cu102)
    or newer (CNTK's: it predates Ampere): neither on the other side, nor for a build with its own range."""
    mxnet, cntk = support({"name": "mxnet"}), support({"name": "cntk"})
    assert mxnet.capability_problem([("K20m", (3, 5))], "fp32").endswith(" (%s)" % mxnet.notes["gpu_build"])
    kepler_on_h100 = mxnet.capability_problem([("H100", (9, 0))], "fp32", gpu_build=(3.0, 7.5))
    kepler_on_fermi = mxnet.capability_problem([("C2050", (2, 0))], "fp32", gpu_build=(3.0, 7.5))
    assert "in its GPU build" in kepler_on_h100 and "in its GPU build" in kepler_on_fermi
    assert all(mxnet.notes["gpu_build"] not in line for line in (kepler_on_h100, kepler_on_fermi))
    ampere = cntk.notes["gpu_build_newer"]
    assert cntk.capability_problem([("A100", (8, 0))], "fp32").endswith(" (%s)" % ampere)
    fermi = cntk.capability_problem([("C2050", (2, 0))], "fp32")
    assert "compute capability 3.0 to 7.5 in its GPU build" in fermi and ampere not in fermi
