"""runtime=container for real: the torch and CNTK images built from containers/<fw>/ by
scripts/images.sh (orchestrator/envs/images.py), trainers run in them with ch-run through the
orchestrator, a broken recipe named by its failing step, and what a running job can write.

The images are built by the project's own scripts (scripts/test.sh calls scripts/images.sh);
where this machine cannot build or run them (no ch-run, no mmdebstrap, a build that failed), the
tests skip loudly with the reason instead of failing."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers import REPO, orchestrator, rows, user_dir

#: Frameworks CI runs in containers (the most different stacks: Python 3.11 + PyTorch, Python 3.6 + CNTK).
CI_FRAMEWORKS = ("torch", "cntk")


def _skip(reason):
    pytest.skip("CONTAINER TESTS SKIPPED: %s (scripts/images.sh builds the images as root)" % reason)


@pytest.fixture(scope="module")
def images():
    """{framework: manifest} of the CI images, built (or reused) as a job would."""
    from orchestrator.envs.image_recipe import Recipe
    from orchestrator.envs.images import ImageStore
    from orchestrator.envs.venv_runtime import EnvironmentNotReady

    if shutil.which("ch-run") is None:
        _skip("no ch-run (Debian's charliecloud)")
    store = ImageStore()
    found = {}
    for fw in CI_FRAMEWORKS:
        manifest = store.manifest(Recipe(fw))
        if manifest is None:
            if shutil.which("mmdebstrap") is None:
                _skip("no %s image and no mmdebstrap to build it" % fw)
            try:
                manifest = store.ensure(Recipe(fw), log=lambda line: None)
            except EnvironmentNotReady as exc:
                _skip("the %s image did not build: %s" % (fw, exc))
        found[fw] = manifest
    return found


def test_torch_and_cntk_run_in_their_images_through_the_orchestrator(images, tmp_path):
    workdir = user_dir(tmp_path)
    done = orchestrator(["-m", "runtime=container", "framework=torch,cntk", "model=lenet", "iterations=3",
                         "warmup=1", "wait=true"], workdir, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(rows(workdir, "select framework, state from results")) == [("cntk", "done"), ("torch", "done")]
    results = {}
    for path in (tmp_path / "runs").rglob("result.json"):
        result = json.loads(path.read_text())
        results[result["cell"]["framework"]] = result
    for fw, result in results.items():
        assert result["runtime"]["kind"] == "container"
        identity = "image:" + images[fw]["digest"][:23]
        assert result["environment"] == identity and result["provenance"]["environment"] == identity
        assert result["argv"][-len(result["argv"]) + result["argv"].index("/opt/env/bin/python"):][:3] == [
            "/opt/env/bin/python", "-m", "trainers.%s" % fw]
        assert result["metrics"]["images_per_sec"] > 0
    # the trainers ran on the images' interpreters, not the host's
    assert results["torch"]["trainer"]["python"].startswith("3.11")
    assert results["cntk"]["trainer"]["python"] == "3.6.15"
    # the DB has the digest too
    assert sorted(rows(workdir, "select environment from runs")) == sorted(  # as the report shows it
        [("image:" + images[fw]["digest"][:23],) for fw in ("cntk", "torch")])


PROBE = r"""
import json, os
out = {"env": sorted(os.environ), "user": os.getuid(), "cwd": os.getcwd(),
       "python": os.path.realpath(os.sys.executable)}
def attempt(path, append=False):
    try:
        with open(path, "a" if append else "w") as f:
            f.write("")
        return "written"
    except OSError as exc:
        return type(exc).__name__
for path in ("/mnt/run/written-by-the-job", "/tmp/private-scratch", "/opt/orchestrator/trainers/x",
             "/opt/env/x", "/etc/x", "/x", "/mnt/data/x", OUTSIDE, REPO_FILE, CACHE_FILE):
    out[path] = attempt(path)
out["/etc/resolv.conf"] = attempt("/etc/resolv.conf", append=True)
out["/opt/orchestrator/trainers/__init__.py"] = attempt("/opt/orchestrator/trainers/__init__.py", append=True)
print(json.dumps(out))
"""


def test_a_running_job_writes_its_run_directory_and_nothing_else(images, tmp_path):
    """The trainer's command as a job builds it, its module swapped for a probe: the environment
    holds only what the runtime passes, and every write outside the run directory fails (the
    image is read-only, trainers/ and the data read-only, the host's files out of sight or not
    writable, /tmp private)."""
    from orchestrator.envs.runtime import ContainerRuntime

    run_dir, data = tmp_path / "run", tmp_path / "data"
    run_dir.mkdir()
    data.mkdir()
    outside = tmp_path / "outside"
    runtime = ContainerRuntime("torch")
    argv, env = runtime.command(["--data-dir", str(data)], binds=[str(data)], run_dir=str(run_dir))
    cut = argv.index("-m", argv.index("/opt/env/bin/python"))
    code = PROBE.replace("OUTSIDE", repr(str(outside))).replace("REPO_FILE", repr(str(REPO / "probe-x"))) \
        .replace("CACHE_FILE", repr(str(runtime.image / "probe-x")))
    argv = argv[:cut] + ["-c", code]
    host_env = dict(os.environ, **env, SECRET_FROM_THE_HOST="leak")
    done = subprocess.run(argv, env=host_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["/mnt/run/written-by-the-job"] == "written" and (run_dir / "written-by-the-job").exists()
    assert out["/tmp/private-scratch"] == "written" and not os.path.exists("/tmp/private-scratch")
    for path in ("/opt/orchestrator/trainers/x", "/opt/env/x", "/etc/x", "/x", "/mnt/data/x", str(outside),
                 str(REPO / "probe-x"), str(runtime.image / "probe-x"), "/etc/resolv.conf",
                 "/opt/orchestrator/trainers/__init__.py"):
        assert out[path] != "written", (path, out)
    assert not outside.exists() and not (REPO / "probe-x").exists() and not (runtime.image / "probe-x").exists()
    assert not list(data.iterdir())
    # only what the runtime passes: no host variable leaks in
    assert "SECRET_FROM_THE_HOST" not in out["env"] and "LD_PRELOAD" not in out["env"]
    assert set(out["env"]) <= set(runtime.trainer_env()) | {"CH_RUNNING", "PWD", "SHLVL", "_"}, out["env"]
    assert out["cwd"] == "/mnt/run" and out["python"].startswith("/usr/bin/python3")
    if os.geteuid() == 0:  # root's job runs as nobody
        assert out["user"] == 65534


def test_the_data_directory_is_seen_at_its_mount_point(images, tmp_path):
    from orchestrator.envs.runtime import ContainerRuntime

    argv, _ = ContainerRuntime("cntk").command(["--data-dir", str(tmp_path)], binds=[str(tmp_path)],
                                               run_dir=str(tmp_path))
    assert argv[-2:] == ["--data-dir", "/mnt/data"] and argv[-4:-2] == ["-m", "trainers.cntk"]


@pytest.mark.parametrize("broken, step", [
    ({"requirements.txt": "this-package-does-not-exist-anywhere==0.0.1\n"}, "wheels"),
    ({"debian-packages.txt": "no-such-debian-package-anywhere\n"}, "debian packages"),
    ({"env.yaml": "python: [python3]\npost_install: [fail.sh]\n",
      "fail.sh": "echo 'the post-install step broke on purpose' >&2\nexit 3\n"}, "post_install fail.sh"),
])
def test_a_broken_recipe_fails_naming_the_step(images, tmp_path, broken, step):
    from orchestrator.envs.image_recipe import Recipe
    from orchestrator.envs.images import ImageBuildError, ImageStore

    if step == "debian packages" and os.geteuid() != 0:
        pytest.skip("installing Debian packages into an image needs root")
    recipe = tmp_path / "broken"
    recipe.mkdir()
    files = {"env.yaml": "python: [python3]\n", "requirements.txt": "# nothing\n"}
    files.update(broken)
    for name, text in files.items():
        (recipe / name).write_text(text)
    store = ImageStore()
    with pytest.raises(ImageBuildError) as failed:
        store.ensure(Recipe("broken", recipe), log=lambda line: None)
    message = str(failed.value)
    assert "building the image failed at step `%s`" % step in message, message
    if step.startswith("post_install"):
        assert "broke on purpose" in message and "exit 3" in message
    r = Recipe("broken", recipe)
    assert store.manifest(r) is None and not store.image_dir(r).exists()
    assert not store.image_dir(r).with_name(store.image_dir(r).name + ".tmp").exists()


def test_an_image_is_keyed_by_its_recipe_and_reused(images, tmp_path):
    from orchestrator.envs.image_recipe import Recipe
    from orchestrator.envs.images import ImageStore

    store = ImageStore()
    lines = []
    assert store.ensure(Recipe("torch"), log=lines.append) == images["torch"] and lines == []
    copy = tmp_path / "torch"
    shutil.copytree(str(REPO / "containers" / "torch"), str(copy))
    assert store.key(Recipe("torch", copy)) == store.key(Recipe("torch"))
    (copy / "requirements.txt").write_text((copy / "requirements.txt").read_text() + "six\n")
    assert store.key(Recipe("torch", copy)) != store.key(Recipe("torch"))
    listed = subprocess.run([sys.executable, "-m", "orchestrator", "images", "list"], stdout=subprocess.PIPE,
                            universal_newlines=True, cwd=str(REPO))
    assert images["torch"]["digest"][:23] in listed.stdout and images["cntk"]["digest"][:23] in listed.stdout


ALL_FRAMEWORKS = ("torch", "cntk", "numpy", "mxnet", "tensorflow", "caffe")


@pytest.mark.slow
@pytest.mark.container_all
@pytest.mark.parametrize("fw", ALL_FRAMEWORKS)
def test_every_framework_trains_in_its_image(fw, tmp_path):
    """The slower suite (`CONTAINER_ALL=1 pytest -m slow tests/test_container.py`): every
    framework's image built from its recipe (Caffe's compiles from source: 10-20 minutes) and its
    trainer run through the orchestrator in it. CI runs torch and CNTK only (above): without
    CONTAINER_ALL these are deselected (marker `container_all`, tests/ci_skips.py), not skipped."""
    from orchestrator.envs.image_recipe import Recipe
    from orchestrator.envs.images import ImageStore
    from orchestrator.envs.venv_runtime import EnvironmentNotReady

    if shutil.which("ch-run") is None or shutil.which("mmdebstrap") is None:
        _skip("no ch-run or mmdebstrap")
    try:
        manifest = ImageStore().ensure(Recipe(fw), log=print)
    except EnvironmentNotReady as exc:
        if exc.error_class == "unsupported":
            pytest.skip("%s cannot be built here: %s" % (fw, exc))
        raise
    workdir = user_dir(tmp_path)
    done = orchestrator(["runtime=container", "framework=%s" % fw, "model=lenet", "iterations=3", "warmup=1"],
                        workdir, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert rows(workdir, "select state, environment from runs") == [("done", "image:" + manifest["digest"][:23])]


def test_as_an_ordinary_user_the_command_is_plain_ch_run_with_its_binds(images, tmp_path, monkeypatch):
    """Not root: no mount namespace and no setpriv; the environment is unset before it is set."""
    from orchestrator.envs.runtime import ContainerRuntime

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    runtime = ContainerRuntime("torch")
    argv, env = runtime.command(["--data-dir", str(tmp_path)], binds=[str(tmp_path)], run_dir=str(tmp_path / "r"))
    assert argv[0] == "ch-run" and argv[1] == "--unset-env=*"
    sets = [i for i, a in enumerate(argv) if a.startswith("--set-env=")]
    assert sets and min(sets) > 1 and "--private-tmp" in argv
    assert "-b" in argv and "%s:/opt/orchestrator/trainers" % (REPO / "trainers") in argv
    assert "%s:/mnt/run" % (tmp_path / "r") in argv and "%s:/mnt/data" % tmp_path in argv
    cut = argv.index("--")
    assert argv[cut - 1] == str(runtime.image) and argv[cut + 1:cut + 4] == ["/opt/env/bin/python", "-m", "trainers.torch"]
    assert argv[-2:] == ["--data-dir", "/mnt/data"] and set(env) == {"USER"}
