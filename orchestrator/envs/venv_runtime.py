"""The per-framework virtualenv runtime, and what every runtime shares: the recipes under
containers/, the EnvironmentNotReady error, the cache directory.

Frameworks' dependencies conflict, so a trainer never runs in the orchestrator's own
interpreter: `containers/<framework>/env.yaml` names the interpreter, the pinned requirements,
optional `post_install` scripts and `env` variables. `VenvRuntime` builds a virtualenv from it
under the cache directory (keyed by the recipe's hash, behind a file lock); the container
images are built from the same recipe (images.py reads it through VenvRuntime). This module is
below images.py and apptainer.py, and runtime.py (which picks a runtime) is above them.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml

from orchestrator.envs import builds, recipe_files
from trainers.common import failure_classes
from trainers.common.support import GPU_BUILD_ENV

REPO = Path(__file__).resolve().parents[2]  # orchestrator/envs/ -> the repository
CONTAINERS = REPO / "containers"


class EnvironmentNotReady(RuntimeError):
    """A trainer environment that cannot be made ready; the message says how to fix it.

    `error_class` is the run's failure class: `env` for a recipe or installation that failed
    (fixable here), `unsupported` where this machine cannot hold the framework at all (no
    interpreter of the version it needs).
    """

    def __init__(self, message: str, error_class: str = failure_classes.ENV):
        super().__init__(message)
        self.error_class = error_class


def default_cache() -> Path:
    return Path(os.environ.get("ORCHESTRATOR_CACHE", Path.home() / ".cache" / "orchestrator"))


def output_tail(output: str, lines: int = 15) -> str:
    """The last lines of a failed build step's output: what a message shows of why it failed."""
    return "\n".join(output.strip().splitlines()[-lines:])


def _trainer_env(pythonpath: str) -> dict[str, str]:
    return {"PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
            "GLOG_minloglevel": "2"}


class VenvRuntime:
    """A per-framework virtualenv built from `containers/<framework>/env.yaml`."""

    kind = "venv"

    def __init__(self, framework: str, cache: Path | None = None, recipe_dir: Path | None = None,
                 trainer: str | None = None, build: str = builds.DEFAULT):
        self.framework, self.build = framework, build
        self.trainer = trainer or f"trainers.{framework}"
        self.recipe_dir = recipe_dir or CONTAINERS / framework
        recipe_file = self.recipe_dir / "env.yaml"
        if not recipe_file.is_file():
            raise EnvironmentNotReady(
                f"no venv recipe for framework {framework!r}: {recipe_file} is missing "
                f"(frameworks with a recipe: {', '.join(available_recipes()) or 'none'})")
        recipe = yaml.safe_load(recipe_file.read_text()) or {}
        try:  # a build's variant (builds.py): its name only looked up in the declared list
            self.variant = builds.variant(self.recipe_dir.name, build, self.recipe_dir.parent)
        except builds.BuildError as exc:
            raise EnvironmentNotReady(str(exc)) from exc
        self.recipe = builds.recipe_with(recipe, self.variant)
        self.requirements = self.recipe_dir / self.recipe.get("requirements", "requirements.txt")
        self.cache = Path(cache) if cache else default_cache()

    @property
    def requirements_text(self) -> str:
        """The requirements this build installs: the recipe's, with the build's pins; for a build with a
        GPU base, that base's wheels (gpu.yaml), as its image installs them (one list, not a second)."""
        text = self.requirements.read_text()
        if self.variant.get("gpu"):  # the base's wheels for the recipe's, as the image's definition swaps them
            gpu = recipe_files.gpu_builds(self.recipe_dir)[self.variant["gpu"]]
            text = "\n".join(recipe_files.swapped(recipe_files.listed(self.requirements), gpu, self.recipe_dir,
                                                  self.requirements)) + "\n"
        return builds.requirements_with(text, self.variant["pins"]) if self.variant.get("pins") else text

    @classmethod
    def for_framework(cls, framework: str, cache: Path | None = None, build: str = builds.DEFAULT) -> "VenvRuntime":
        return cls(framework, cache, build=build)

    def interpreter(self) -> str:
        """The first interpreter of the recipe's list that exists on this machine."""
        candidates = self.recipe.get("python") or [sys.executable]
        if isinstance(candidates, str):
            candidates = [candidates]
        for candidate in candidates:
            found = shutil.which(os.path.expanduser(str(candidate)))
            if found:
                return found
        raise EnvironmentNotReady(
            f"{self.framework}: none of the interpreters {candidates} exists here; install one "
            f"or list yours under `python:` in {self.recipe_dir / 'env.yaml'}", failure_classes.UNSUPPORTED)

    @property
    def env_dir(self) -> Path:
        digest = hashlib.sha256()
        digest.update((self.recipe_dir / "env.yaml").read_bytes())
        digest.update(self.requirements.read_bytes())
        for script in self.post_install:
            digest.update(script.read_bytes())
        if self.build == builds.DEFAULT:  # the recipe's own environment, named as before builds existed
            return self.cache / "envs" / f"{self.framework}-{digest.hexdigest()[:12]}"
        digest.update(self.variant_key())
        return self.cache / "envs" / f"{self.framework}-{self.build}-{digest.hexdigest()[:12]}"

    def variant_key(self) -> bytes:
        """What a named build changes, as bytes to hash: its variant, its requirements and its BLAS links.
        Its venv (env_dir) and its image (image_recipe.Recipe.digest) are both keyed by it."""
        return (yaml.safe_dump(dict(self.variant), sort_keys=True).encode() + self.requirements_text.encode()
                + yaml.safe_dump(builds.blas_links(self.variant), sort_keys=True).encode())

    @property
    def post_install(self) -> list[Path]:
        """Scripts run after pip, in order, with ENV_DIR, PYTHON and RECIPE_DIR set."""
        return [self.recipe_dir / name for name in self.recipe.get("post_install") or []]

    def trainer_env(self, env_dir: str | None = None) -> dict[str, str]:
        """The recipe's `env` for the trainer, `{env_dir}` replaced by the environment's path
        (this venv's, or `env_dir`: where an image holds the same environment, which inherits no
        library path from the host)."""
        where = env_dir if env_dir is not None else str(self.env_dir)
        env = {key: str(value).replace("{env_dir}", where) for key, value in (self.recipe.get("env") or {}).items()}
        if self.variant.get("gpu"):  # the trainer checks its GPUs against this build's range (support.GPU_BUILD_ENV)
            bounds = builds.gpu_bases(self.recipe_dir.name, self.recipe_dir.parent)[self.variant["gpu"]]
            env[GPU_BUILD_ENV] = builds.gpu_build_value(bounds)
        # the build's own BLAS folder first (link_blas), before the recipe's own library path where it sets
        # one (which replaces the job's, as without a build)
        inherited = os.environ.get("LD_LIBRARY_PATH") if env_dir is None else None
        path = builds.library_path(self.variant, where, env.get("LD_LIBRARY_PATH") or inherited)
        return {**env, "LD_LIBRARY_PATH": path} if path else env

    @property
    def python(self) -> Path:
        return self.env_dir / "bin" / "python"

    def is_ready(self) -> bool:
        return (self.env_dir / ".ready").exists()

    def builds_in_job(self) -> bool:
        """Whether a job's `ensure` will build the environment first (time its limit must hold)."""
        return not self.is_ready()

    def ensure(self, log: Callable[[str], None] = print) -> Path:
        """Creates the environment if it is not there yet; returns its interpreter."""
        if self.is_ready():
            return self.python
        self.env_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{self.env_dir}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another job may be creating it right now
            if self.is_ready():
                return self.python
            self._create(log)
        return self.python

    def _create(self, log: Callable[[str], None]) -> None:
        interpreter = self.interpreter()
        if self.env_dir.exists():  # a creation that was interrupted
            shutil.rmtree(self.env_dir)
        log(f"[runtime] creating the {self.framework} environment in {self.env_dir} "
            f"with {interpreter} (first use only; this can take minutes)")
        requirements = self.requirements
        if self.build != builds.DEFAULT:  # the build's own requirements, kept in its environment
            self.env_dir.mkdir(parents=True)
            requirements = self.env_dir / "requirements.build.txt"
            requirements.write_text(self.requirements_text)
        shared = ["--system-site-packages"] if self.variant.get("system_site_packages") else []
        steps = [
            [interpreter, "-m", "venv", *shared, str(self.env_dir)],
            [str(self.python), "-m", "pip", "install", "--progress-bar", "off", "-r", str(requirements)],
        ] + [["bash", str(script)] for script in self.post_install]
        script_env = {**os.environ, "ENV_DIR": str(self.env_dir), "PYTHON": str(self.python),
                      "RECIPE_DIR": str(self.recipe_dir)}
        for argv in steps:
            log(f"[runtime] {self.framework}: {' '.join(argv[-3:])}")
            done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=script_env)
            if done.returncode != 0:
                tail = output_tail(done.stdout)
                raise EnvironmentNotReady(
                    f"{self.framework}: creating the environment failed at `{' '.join(argv)}` "
                    f"(exit {done.returncode}):\n{tail}\nFix the recipe in {self.recipe_dir} "
                    f"or the network/proxy, then run again; the partial environment is rebuilt.")
        link_blas(self.framework, self.build, self.variant, str(self.env_dir))  # after pip: a library may come
        # with the build's own packages (MKL)
        freeze = subprocess.run([str(self.python), "-m", "pip", "freeze"], capture_output=True, text=True)
        (self.env_dir / "requirements.lock").write_text(freeze.stdout)
        (self.env_dir / ".ready").write_text(self.identity() + "\n")
        log(f"[runtime] {self.framework} environment ready")

    def identity(self) -> str:
        """A hash of the installed package list: which environment a measurement ran in."""
        lock = self.env_dir / "requirements.lock"
        text = lock.read_text() if lock.exists() else ""
        return "venv:sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]

    def command(self, args: Sequence[str], gpus: int = 0, binds: Sequence[str] = (),
                run_dir: str | None = None) -> tuple[list[str], dict[str, str]]:
        argv = [str(self.python), "-m", self.trainer, *args]
        return argv, {**_trainer_env(str(REPO)), **self.trainer_env()}


def link_blas(framework: str, build: str, variant: Mapping[str, Any], env_dir: str, root: str = "/") -> None:
    """A build's BLAS folder (`<env_dir>/blas`): a link for each name its framework loads a BLAS by, to the
    chosen library (builds.blas_links). `root`: the tree it is made in, the host's for a venv, an image's
    for its /opt/env (whose links then name the image's own files)."""
    links = builds.blas_links(variant, env_dir, root=root)
    if links:
        folder = Path(root) / env_dir.lstrip("/") / builds.BLAS_DIR
        folder.mkdir()
        for name, target in links.items():
            if not (Path(root) / target.lstrip("/")).is_file():
                raise EnvironmentNotReady(
                    f"{framework} build {build}: {target} is missing; install the Debian packages containers/blas.yaml "
                    f"names for blas={variant['blas']} (scripts/frameworks.sh {framework}; an image installs them itself)")
            (folder / name).symlink_to(target)


def available_recipes() -> list[str]:
    return sorted(p.parent.name for p in CONTAINERS.glob("*/env.yaml"))
