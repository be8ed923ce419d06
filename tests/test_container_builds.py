"""A named build in its own image (issue 39): the image recipe takes the build's variant as its venv takes
it (the BLAS package, the interpreter and its site packages, the pins, the env, the blas/ folder of links),
keyed by that variant while the default's key stays what it was; and numpy's `reference` build, whose
image scripts/images.sh builds (builds.CI_BUILDS), run as a real cell with runtime=container, recording the
reference BLAS it loaded inside its image; and the build's Apptainer definition, from the same data."""
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from helpers import FAST, orchestrator, rows, user_dir
from orchestrator.envs import builds
from orchestrator.envs.apptainer import DefinitionError, generate
from orchestrator.envs.image_recipe import BASE_PACKAGES, BUILDER_VERSION, Recipe, base_hash
from orchestrator.envs.images import ImageStore
from orchestrator.envs.runtime import make_runtime
from orchestrator.envs.venv_runtime import EnvironmentNotReady


def test_a_builds_image_recipe_is_its_variant_and_the_defaults_key_is_unchanged(tmp_path, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/host/only")  # an image inherits no library path from the host
    store, default, reference = ImageStore(tmp_path), Recipe("numpy"), Recipe("numpy", build="reference")
    files = hashlib.sha256()  # the default's key as it was before builds existed: its recipe files only
    for path in (default.dir / "env.yaml", default.dir / "requirements.txt", default.dir / "debian-packages.txt"):
        files.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    expected = hashlib.sha256(f"{files.hexdigest()}\0{base_hash()}\0{BUILDER_VERSION}".encode()).hexdigest()[:12]
    assert store.key(default) == f"numpy-{expected}" and "python3" in BASE_PACKAGES
    assert store.key(reference).startswith("numpy-reference-") and store.key(reference) != store.key(default)
    assert reference.debian_packages() == ["python3-numpy", "libblas3", "liblapack3"] and default.debian_packages() == ["python3-numpy"]
    assert reference.interpreters() == ["/usr/bin/python3.11"] and reference.variant["system_site_packages"] is True
    assert "numpy" not in reference.requirements_text and "pillow==" in reference.requirements_text
    assert reference.trainer_env() == {"LD_LIBRARY_PATH": "/opt/env/blas"} and default.trainer_env() == {}
    recipes = tmp_path / "containers"  # another BLAS for the same build name: another image
    shutil.copytree(default.dir, recipes / "numpy")
    shutil.copy(default.dir.parent / "blas.yaml", recipes / "blas.yaml")
    (recipes / "numpy" / "builds.yaml").write_text(
        (default.dir / "builds.yaml").read_text().replace("blas: reference", "blas: atlas", 1))
    moved = Recipe("numpy", recipes / "numpy", build="reference")
    assert moved.debian_packages() == ["python3-numpy", "libatlas3-base"] and store.key(moved) != store.key(reference)
    assert builds.refusal("numpy", "reference", "container") is None
    assert "runtime=container's CPU image" in builds.refusal("torch", "kepler", "container")
    with pytest.raises(EnvironmentNotReady, match="is not a build of numpy"):
        Recipe("numpy", build="../x")


def test_images_build_refuses_a_build_the_framework_does_not_declare(tmp_path):
    done = orchestrator(["images", "build", "numpy", "--build", "$(id)"], user_dir(tmp_path))
    assert done.returncode == 2 and "is not a build of numpy" in done.stderr
    listed = orchestrator(["images", "list"], user_dir(tmp_path))
    assert listed.returncode == 0 and "numpy-reference " in listed.stdout
    assert "orchestrator images build numpy --build blis" in listed.stdout or "numpy-blis       image:" in listed.stdout


@pytest.fixture(scope="module")
def reference_image():
    """numpy's `reference` image as scripts/images.sh built it (built here where it has not)."""
    if shutil.which("ch-run") is None:
        pytest.skip("CONTAINER TESTS SKIPPED: no ch-run (Debian's charliecloud; scripts/images.sh builds the images)")
    recipe = Recipe("numpy", build="reference")
    manifest = ImageStore().manifest(recipe)
    if manifest is None:
        manifest = ImageStore().ensure(recipe, log=lambda line: None)
    return manifest


def test_numpys_reference_build_runs_in_its_own_image_on_the_reference_blas(reference_image, tmp_path):
    workdir = user_dir(tmp_path)
    done = orchestrator(["-m", "runtime=container", "framework=numpy", "build=reference", "model=lenet",
                         "batch_size=16", *FAST, "wait=true"], workdir, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert rows(workdir, "select framework, build, state from results") == [("numpy", "reference", "done")]
    result = json.loads(next((tmp_path / "runs").rglob("result.json")).read_text())
    assert result["runtime"]["kind"] == "container" and result["provenance"]["build"]["name"] == "reference"
    assert result["environment"] == "image:" + reference_image["digest"][:23]
    assert reference_image["key"].startswith("numpy-reference-") and reference_image["build"] == "reference"
    loaded = {(b["library"], b["path"]) for b in result["provenance"]["framework"]["blas"]}
    assert loaded == {("reference", "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0")}, loaded
    assert result["trainer"]["python"].startswith("3.11")
    threads = result["cell"]["threads"]  # the build's BLAS threads reach the image, whose trainer sees no job variable
    assert {f"--set-env={name}={threads}" for name in builds.THREAD_VARIABLES} <= set(result["argv"]), result["argv"]


def test_a_builds_apptainer_definition_is_its_image_recipe_and_names_the_sif_the_runtime_runs(reference_image, tmp_path):
    """`images def numpy --build reference`: the build's packages, interpreter with the system's site packages,
    pins and env, and the same blas/ links as its image (read from the image scripts/images.sh built); the SIF
    its comment builds is the one runtime=apptainer runs the build from, refused naming that command when absent."""
    text = generate("numpy", build="reference")
    assert "apt-get install -y --no-install-recommends python3 python3-venv python3-numpy libblas3 liblapack3\n" in text
    assert "/usr/bin/python3.11 -m venv --system-site-packages /opt/env\n" in text
    pinned = text.split("<<'REQUIREMENTS'\n")[1].split("REQUIREMENTS")[0]
    assert "pillow==" in pinned and "numpy" not in pinned
    image = Path(reference_image["dir"]) / "opt" / "env" / "blas"
    links = sorted(line.split()[2:] for line in text.splitlines() if line.startswith("    ln -s "))
    assert links and links == sorted([os.readlink(path), f"/opt/env/blas/{path.name}"] for path in image.iterdir())
    assert "    export LD_LIBRARY_PATH=/opt/env/blas\n" in text and "    org.orchestrator.build reference\n" in text
    assert "#   apptainer build numpy-reference.sif <this file>\n" in text
    assert generate("torch", build="kepler") == generate("torch", "cuda11")  # a GPU base's build: that base's
    with pytest.raises(DefinitionError, match="build=reference is made on the cpu base, not cuda12; leave out --base"):
        generate("numpy", "cuda12", build="reference")
    runtime = make_runtime("apptainer", "numpy", images=tmp_path, binary="true", build="reference")
    assert runtime.image == tmp_path / "numpy-reference.sif" and builds.refusal("numpy", "reference", "apptainer") is None
    with pytest.raises(EnvironmentNotReady, match=r"`orchestrator images def numpy --build reference -o "
                                                  r"numpy-reference.def`, then `apptainer build "):
        runtime.ensure()


def test_pruning_a_builds_images_keeps_every_other_image(tmp_path):
    """`images build torch --build torch-2.14` prunes that build's earlier images (a dotted name) and nothing
    of the default's or another build's; the default's prune leaves the builds' images alone."""
    store = ImageStore(tmp_path)
    build, default = Recipe("torch", build="torch-2.14"), Recipe("torch")
    names = [store.key(build), "torch-torch-2.14-000000000000", store.key(default), "torch-111111111111",
             "torch-kepler-222222222222", "numpy-reference-333333333333"]
    for name in names:
        (store.root / name).mkdir(parents=True)
        (store.root / f"{name}.json").write_text("{}")
    store.prune(build)
    assert sorted(p.name for p in store.root.iterdir()) == sorted(
        n + suffix for n in names if n != "torch-torch-2.14-000000000000" for suffix in ("", ".json"))
    store.prune(default)
    assert sorted(p.name for p in store.root.iterdir()) == sorted(
        n + suffix for n in (store.key(build), store.key(default), "torch-kepler-222222222222",
                             "numpy-reference-333333333333") for suffix in ("", ".json"))


def test_images_list_says_a_broken_builds_yaml_instead_of_leaving_its_builds_out(monkeypatch, capsys):
    """A builds.yaml that does not read (here: declared raising as it does on one) is one line on
    stderr and exit 1; the framework's default image is still listed."""
    from orchestrator.commands import images as command
    from orchestrator.envs import builds

    def broken(recipe, *args, **kwargs):
        raise builds.BuildError(f"containers/{recipe}/builds.yaml: build 'x' has an unknown key 'pinz'")
    monkeypatch.setattr(builds, "declared", broken)
    assert command.main(["list"]) == 1
    out, err = capsys.readouterr()
    assert "numpy's builds are not listed: containers/numpy/builds.yaml: build 'x' has an unknown key 'pinz'" \
        in err.splitlines()
    assert any(line.startswith("numpy ") for line in out.splitlines()) and "--build" not in out
