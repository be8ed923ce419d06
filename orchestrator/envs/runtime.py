"""Where a trainer runs: each framework in its own environment.

Frameworks' dependencies conflict (MXNet 1.9 needs numpy < 1.24, CNTK needs Python 3.6), so a
trainer never runs in the orchestrator's own interpreter. Three runtimes build the same command:

- `VenvRuntime` (the local default; venv_runtime.py): `containers/<framework>/env.yaml` names the interpreter,
  the pinned requirements, optional `post_install` scripts (a build from source, library
  links) and optional `env` variables for the trainer; the virtualenv is created on first use under the cache directory,
  keyed by a hash of that recipe, with a visible progress line, and reused afterwards. A file
  lock makes concurrent jobs wait for one creation instead of racing.
- `ApptainerRuntime` (clusters): `apptainer exec [--nv] <image>.sif python -m trainers.<fw>`,
  with the repository's `trainers/` bound into the image, so images hold only frameworks. The SIF
  comes from the same recipe: the image directory (`apptainer build <fw>.sif <dir>`) or, for a
  GPU build, the definition `orchestrator images def <fw> --base ...` generates (apptainer.py).
- `ContainerRuntime` (`runtime=container`): `ch-run` (Charliecloud) in the image built from the
  same recipe (`orchestrator/envs/images.py`; built on first use, cached by recipe hash; a named
  build in its own image, `<fw>-<build>-<hash>`, keyed by its variant as its venv is), with
  `trainers/` (read-only) and the run directory bound in and the trainer's environment given
  explicitly (`--unset-env=*`, nothing of the host's but `PASS_THROUGH`).

All three give `ensure()` (make the environment ready or raise `EnvironmentNotReady` naming the way
out) and `command()` (argv and environment variables for the trainer).
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from orchestrator.envs import builds
from orchestrator.envs.image_recipe import Recipe
from orchestrator.envs.images import ImageStore
from orchestrator.envs.module_runtime import ModuleRuntime
from orchestrator.envs.venv_runtime import REPO, EnvironmentNotReady, VenvRuntime, _trainer_env, default_cache


class ApptainerRuntime:
    """A framework's Apptainer image, with the repository's trainers bound in."""

    kind = "apptainer"
    mount = "/opt/orchestrator"

    def __init__(self, framework: str, images: Path, binary: str = "apptainer", trainer: str | None = None,
                 sif: str | None = None, base: str | None = None, build: str = builds.DEFAULT):
        self.framework = framework
        self.trainer = trainer or f"trainers.{framework}"
        self.images = Path(images)
        self.binary = binary
        self.sif = sif or f"{framework}.sif"  # a build with a GPU base: builds.image_name
        self.base = base  # that build's GPU base: its image is only ever that base's definition
        self.build = build  # a build without one: its own definition (`images def <fw> --build <it>`)

    @property
    def image(self) -> Path:
        return self.images / self.sif

    def builds_in_job(self) -> bool:
        """Never: a missing image is refused by `ensure`, not built (what a time limit holds)."""
        return False

    def ensure(self, log: Callable[[str], None] = print) -> Path:
        if shutil.which(self.binary) is None:
            raise EnvironmentNotReady(
                f"runtime=apptainer but `{self.binary}` is not on this node's PATH; "
                f"load its module (e.g. `module load apptainer`) or use runtime=venv")
        if not self.image.is_file() and self.base:  # a build's GPU image: its base's definition, not the CPU image
            definition = f"{self.framework}-{self.base}.def"
            raise EnvironmentNotReady(
                f"no image {self.image}; it is this build's GPU image: `orchestrator images def {self.framework} "
                f"--base {self.base} -o {definition}`, then `apptainer build {self.image} {definition}`; "
                f"or set apptainer.images")
        if not self.image.is_file() and self.build != builds.DEFAULT:
            definition = f"{self.framework}-{self.build}.def"
            raise EnvironmentNotReady(
                f"no image {self.image}; it is build {self.build}'s image: `orchestrator images def {self.framework} "
                f"--build {self.build} -o {definition}`, then `apptainer build {self.image} {definition}`; or set "
                f"apptainer.images")
        if not self.image.is_file():
            raise EnvironmentNotReady(
                f"no image {self.image}; build the image directory from the recipe with `orchestrator "
                f"images build {self.framework}`, then `apptainer build {self.image} <that directory>` "
                f"(`orchestrator images list` names it); for a GPU build, `orchestrator images def "
                f"{self.framework} --base cuda12|cuda11|cuda10 -o {self.framework}.def`, then `apptainer build "
                f"{self.image} {self.framework}.def`; or set apptainer.images")
        return self.image

    def identity(self) -> str:
        digest = hashlib.sha256()
        with open(self.image, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        return "sif:sha256:" + digest.hexdigest()[:16]

    def command(self, args: Sequence[str], gpus: int = 0, binds: Sequence[str] = (),
                run_dir: str | None = None) -> tuple[list[str], dict[str, str]]:
        argv = [self.binary, "exec"]
        if gpus:
            argv.append("--nv")
        argv += ["--bind", f"{REPO / 'trainers'}:{self.mount}/trainers"]
        for path in binds:
            argv += ["--bind", f"{path}:{path}"]
        argv += ["--pwd", self.mount]
        for key, value in _trainer_env(self.mount).items():
            argv += ["--env", f"{key}={value}"]
        argv += [str(self.image), "python3", "-m", self.trainer, *args]
        return argv, {}


#: Host variables a containerised trainer still sees (everything else is unset): which GPUs the
#: job was given, and OpenBLAS's core type where the host sets it for its processor.
PASS_THROUGH = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
                "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "TZ")
#: The uid and gid a trainer runs as when the orchestrator runs as root (nobody: it owns nothing).
UNPRIVILEGED = 65534


class ContainerRuntime:
    """The framework's image (orchestrator/envs/images.py) run with Charliecloud's `ch-run`.

    As an ordinary user: `ch-run --unset-env=* --set-env=... --private-tmp -b trainers -b run_dir
    IMAGE -- /opt/env/bin/python -m trainers.<fw>`; the image is mounted read-only, /tmp is private,
    and the trainer sees the host only through the run directory (read-write), trainers/ and the
    data directory. As root (CI): in a private mount namespace, the image, trainers/ (read-only),
    the data directory (read-only) and the run directory are mounted onto a staging directory, and
    ch-run runs as `nobody` (setpriv), so the trainer can write its run directory and nothing of
    the host (not /etc/resolv.conf, /dev or the repository), not even as root.
    """

    kind = "container"
    mount = "/opt/orchestrator"

    def __init__(self, framework: str, cache: Path | None = None, binary: str = "ch-run",
                 trainer: str | None = None, recipe_dir: Path | None = None, build: str = builds.DEFAULT,
                 threads: Any = None):
        self.framework = framework
        #: a named build's BLAS thread counts (builds.thread_env): the job sets them for the trainer, and the
        #: image sees nothing of the job's environment but what is set here
        self.threads = builds.thread_env(build, threads)
        self.trainer = trainer or f"trainers.{framework}"
        self.cache = Path(cache) if cache else default_cache()
        self.binary = binary
        self.recipe = Recipe(framework, recipe_dir, build)  # a named build: its own image (images.py)
        self.store = ImageStore(self.cache, binary)
        self._manifest: dict | None = None

    @property
    def manifest(self) -> dict:
        if self._manifest is None:
            self._manifest = self.store.manifest(self.recipe)
        if self._manifest is None:
            build = "" if self.recipe.build == builds.DEFAULT else f" --build {self.recipe.build}"
            raise EnvironmentNotReady(f"no {self.recipe.name} image for the current recipe; "
                                      f"run `orchestrator images build {self.framework}{build}`")
        return self._manifest

    @property
    def image(self) -> Path:
        return self.store.image_dir(self.recipe)

    def builds_in_job(self) -> bool:
        """Whether a job's `ensure` will build the recipe's image first (what a time limit holds)."""
        return self.store.manifest(self.recipe) is None

    def ensure(self, log: Callable[[str], None] = print) -> Path:
        if shutil.which(self.binary) is None:
            raise EnvironmentNotReady(
                f"runtime=container but `{self.binary}` is not on this node's PATH; install Charliecloud "
                f"(Debian: apt-get install charliecloud) or use runtime=venv")
        if os.geteuid() == 0:
            missing = [tool for tool in ("unshare", "setpriv", "mount") if shutil.which(tool) is None]
            if missing:
                raise EnvironmentNotReady(f"runtime=container as root needs {', '.join(missing)} (util-linux)")
        self._manifest = self.store.ensure(self.recipe, log)
        return self.image

    def identity(self) -> str:
        return "image:" + self.manifest["digest"][:23]

    def trainer_env(self) -> dict[str, str]:
        env = {**_trainer_env(self.mount), **self.recipe.trainer_env(),
               "PATH": f"{self.manifest['env_dir']}/bin:/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp",
               "LANG": "C.UTF-8", "USER": "nobody" if os.geteuid() == 0 else os.environ.get("USER", "user"),
               **self.threads}
        env.update({key: os.environ[key] for key in PASS_THROUGH if key in os.environ})
        return env

    def command(self, args: Sequence[str], gpus: int = 0, binds: Sequence[str] = (),
                run_dir: str | None = None) -> tuple[list[str], dict[str, str]]:
        """argv for the trainer in the image; `binds` (the data directory) appear at /mnt/data
        (read-only as root), `run_dir` at /mnt/run (the trainer's working directory)."""
        image = self.image
        data = str(binds[0]) if binds else ""
        args = ["/mnt/data" if data and arg == data else arg for arg in args]
        inner = [f"{self.manifest['env_dir']}/bin/python", "-m", self.trainer, *args]
        ch = [self.binary, "--unset-env=*", "--env-no-expand", "--private-tmp", "--cd", "/mnt/run" if run_dir else self.mount]
        ch += [f"--set-env={key}={value}" for key, value in self.trainer_env().items()]
        runner_env = {"USER": "nobody" if os.geteuid() == 0 else os.environ.get("USER") or "user"}
        if os.geteuid() != 0:
            ch += ["-b", f"{REPO / 'trainers'}:{self.mount}/trainers"]
            if run_dir:
                ch += ["-b", f"{run_dir}:/mnt/run"]
            if data:
                ch += ["-b", f"{data}:/mnt/data"]
            return [*ch, str(image), "--", *inner], runner_env
        # root: stage the mounts in a private mount namespace, then drop to nobody
        stage = Path(os.environ.get("TMPDIR") or "/tmp") / "orchestrator-container-stage"
        stage.mkdir(mode=0o755, exist_ok=True)
        if run_dir:
            os.chown(run_dir, UNPRIVILEGED, UNPRIVILEGED)
        script = ('set -e; stage=$1 img=$2 trainers=$3 run=$4 data=$5; shift 5; '
                  'mount --bind "$img" "$stage"; '
                  'mount --bind "$trainers" "$stage/opt/orchestrator/trainers"; '
                  'mount -o remount,bind,ro "$stage/opt/orchestrator/trainers"; '
                  'if [ -n "$run" ]; then mount --bind "$run" "$stage/mnt/run"; fi; '
                  'if [ -n "$data" ]; then mount --bind "$data" "$stage/mnt/data"; '
                  'mount -o remount,bind,ro "$stage/mnt/data"; fi; '
                  f'exec setpriv --reuid={UNPRIVILEGED} --regid={UNPRIVILEGED} --clear-groups -- "$@"')
        argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh",
                str(stage), str(image), str(REPO / "trainers"), run_dir or "", data, *ch, str(stage), "--", *inner]
        return argv, runner_env


def make_runtime(kind: str, framework: str, cache: Path | None = None, images: Path | None = None,
                 binary: str = "apptainer", trainer: str | None = None, build: str = builds.DEFAULT,
                 modules: Mapping[str, Any] | None = None, threads: Any = None):
    """The runtime named by config `runtime=`: `framework` names its recipe or image, `trainer`
    the module it runs (default `trainers.<framework>`), `build` the recipe's variant (builds.py),
    or for runtime=module the site module to load (`module:<name>/<version>`) from the tree
    `modules` declares (the cluster YAML's `modules`); `threads` the cell's, which a container's build is
    told explicitly (the other runtimes' trainers inherit the job's builds.thread_env)."""
    if kind == "module":
        module = builds.module_of(build)
        if not module:
            raise EnvironmentNotReady(builds.refusal(framework, build, kind) or f"runtime=module: build={build}")
        return ModuleRuntime(framework, module, modules, trainer=trainer)
    if kind == "venv":
        return VenvRuntime(framework, cache, trainer=trainer, build=build)
    if build != builds.DEFAULT and builds.refusal(framework, build, kind):  # refused at expansion already
        raise EnvironmentNotReady(builds.refusal(framework, build, kind) or f"build={build}: runtime={kind}")
    if kind == "apptainer":
        return ApptainerRuntime(framework, images or default_cache() / "images", binary, trainer=trainer,
                                sif=None if build == builds.DEFAULT else builds.image_name(framework, build),
                                base=None if build == builds.DEFAULT else builds.gpu_base(framework, build),
                                build=build)
    if kind == "container":
        return ContainerRuntime(framework, cache, trainer=trainer, build=build, threads=threads)
    raise EnvironmentNotReady(f"runtime={kind!r} is not one of venv, apptainer, container, module")
