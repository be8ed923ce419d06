"""Container images built from the same recipes as the venvs (`containers/<framework>/`).

An image is a directory tree (a root filesystem that `ch-run` runs as is, and that
`apptainer build <fw>.sif <dir>` turns into a SIF):

1. **base**: a Debian root filesystem made by `mmdebstrap --variant=minbase` from Debian's
   packages (`BASE_SUITE`, plus `BASE_PACKAGES`), shared by every framework and cached under
   `<cache>/images/base-<hash>/`;
2. **debian packages**: the recipe's `debian-packages.txt`, installed with apt-get in a chroot
   of a copy of the base (root only);
3. **interpreter**: the first of the recipe's `python:` list the image has; where it has none
   (Python 3.6 for CNTK: Debian has no such package), the host's interpreter of that list is
   copied into the image at the same path (a self-contained prefix such as pyenv's);
4. **wheels**: the recipe's requirements (and `downloads.txt`, sources a post_install script
   fetches), downloaded on the host by that same interpreter's pip (so the host's pip
   configuration and indexes apply) into `<cache>/images/wheels/`;
5. **venv**: `<interpreter> -m venv /opt/env` and `pip install --no-index` of those wheels, inside
   the image (`ch-run -w`);
6. **post_install**: the recipe's scripts, inside the image, with ENV_DIR, PYTHON and RECIPE_DIR
   set as the venv runtime sets them, and pip pointed at those downloads only (no index).

The image lands in `<cache>/images/<fw>-<hash>/`, where the hash covers the recipe's files, the
base and this builder's version, so a changed recipe builds a new image and an unchanged one is
reused. `<cache>/images/<fw>-<hash>.json` records its digest (sha256 over every path, mode,
link target and file content: `image:sha256:...` in a run's provenance), its size and how long
each step took. A step that fails raises `ImageBuildError` naming the step and the command.

The recipe, and what every image holds, are read in image_recipe.py. The same recipe also gives
Apptainer definitions, for a CUDA base on GPU nodes
(`orchestrator images def <fw> --base ...`, orchestrator/envs/apptainer.py).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

from orchestrator.envs.image_recipe import (BASE_PACKAGES, BASE_SUITE, BUILDER_VERSION, ENV_DIR, MOUNT_POINTS, Recipe,
                                       base_hash)
from orchestrator.envs import builds
from orchestrator.envs.venv_runtime import EnvironmentNotReady, default_cache, link_blas, output_tail

#: What the build steps run with inside the image: nothing of the host's environment.
BUILD_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
             "LANG": "C.UTF-8", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
             "DEBIAN_FRONTEND": "noninteractive",
             # ch-run maps one uid: GNU tar as root would chown unpacked files to the archive's owners
             "TAR_OPTIONS": "--no-same-owner"}


#: What follows an image's key in the names of its files: its manifest, lock and the build's temporary folder.
_STATE_SUFFIX = re.compile(r"(\.json|\.lock|\.tmp)+$")


class ImageBuildError(EnvironmentNotReady):
    """An image build that failed; the message names the step, the command and the way out."""


def _is_root() -> bool:
    return os.geteuid() == 0


def tree_digest(root: Path) -> tuple[str, int]:
    """sha256 over every entry's relative path, type, mode, link target and content; and the
    total size in bytes of the regular files."""
    h, size = hashlib.sha256(), 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, root)
            h.update(f"{rel}\0{stat.S_IFMT(st.st_mode)}\0{stat.S_IMODE(st.st_mode):o}\0".encode())
            if stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(path).encode())
            elif stat.S_ISREG(st.st_mode):
                size += st.st_size
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
            h.update(b"\n")
    return h.hexdigest(), size


class ImageStore:
    """The images of one cache directory: `<cache>/images/`."""

    def __init__(self, cache: Path | None = None, binary: str = "ch-run"):
        self.cache = Path(cache) if cache else default_cache()
        self.root = self.cache / "images"
        self.binary = binary

    # --- where things are -------------------------------------------------------------
    @property
    def base_dir(self) -> Path:
        return self.root / f"base-{base_hash()}"

    def key(self, recipe: Recipe) -> str:
        h = hashlib.sha256(f"{recipe.digest()}\0{base_hash()}\0{BUILDER_VERSION}".encode())
        return f"{recipe.name}-{h.hexdigest()[:12]}"

    def image_dir(self, recipe: Recipe) -> Path:
        return self.root / self.key(recipe)

    def manifest_path(self, recipe: Recipe) -> Path:
        return self.root / f"{self.key(recipe)}.json"

    def manifest(self, recipe: Recipe) -> dict | None:
        path = self.manifest_path(recipe)
        if path.is_file() and self.image_dir(recipe).is_dir():
            return json.loads(path.read_text())
        return None

    def prune(self, recipe: Recipe) -> None:
        """Removes this framework's (or build's) images of earlier recipes, and bases other than today's."""
        keep = self.key(recipe)
        for path in self.root.glob(f"{recipe.name}-*"):
            stem = _STATE_SUFFIX.sub("", path.name)  # a build's name may hold dots (`torch-2.14`)
            if stem != keep and stem.rpartition("-")[0] == recipe.name:
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        for path in self.root.glob("base-*"):
            if path.name.split(".")[0] != self.base_dir.name:
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)

    # --- building ---------------------------------------------------------------------
    def ensure(self, recipe: Recipe, log: Callable[[str], None] = print, force: bool = False) -> dict:
        """The image's manifest, building the image first if this recipe has none yet."""
        if not force and (found := self.manifest(recipe)):
            return found
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{self.key(recipe)}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another job may be building it right now
            if not force and (found := self.manifest(recipe)):
                return found
            return _Build(self, recipe, log).run()

    def ensure_base(self, log: Callable[[str], None]) -> tuple[Path, float]:
        """The shared Debian base; built once (mmdebstrap), reused by every framework."""
        base = self.base_dir
        self.root.mkdir(parents=True, exist_ok=True)
        with open(f"{base}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (base / ".orchestrator-base").is_file():
                return base, 0.0
            if shutil.which("mmdebstrap") is None:
                raise ImageBuildError("building the base image needs mmdebstrap (Debian's package "
                                      "`mmdebstrap`: apt-get install mmdebstrap), which is not on PATH")
            tmp = base.with_name(base.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            log(f"[images] base: mmdebstrap --variant=minbase {BASE_SUITE} + {', '.join(BASE_PACKAGES)} (once; ~1 min)")
            start = time.monotonic()
            _step("base", ["mmdebstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES),
                           BASE_SUITE, str(tmp)], "base", log)
            for mount in MOUNT_POINTS:
                (tmp / mount).mkdir(parents=True, exist_ok=True)
            (tmp / ".orchestrator-base").write_text(base_hash() + "\n")
            shutil.rmtree(base, ignore_errors=True)
            tmp.rename(base)
            return base, time.monotonic() - start


def _step(name: str, argv: Sequence[str], what: str, log: Callable[[str], None],
          env: dict[str, str] | None = None, fix: str = "") -> str:
    """Runs one build step; a failure raises ImageBuildError naming the step and the command."""
    try:
        done = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise ImageBuildError(f"{what}: building the image failed at step `{name}`: "
                              f"cannot run {argv[0]}: {exc}") from None
    if done.returncode != 0:
        tail = output_tail(done.stdout)
        raise ImageBuildError(
            f"{what}: building the image failed at step `{name}` (`{' '.join(map(str, argv))}`, "
            f"exit {done.returncode}):\n{tail}\n{fix or 'Fix the recipe in containers/, then build again'}; "
            f"the partial image is discarded.")
    return done.stdout


class _Build:
    """One image build, step by step (the module's docstring lists the steps)."""

    def __init__(self, store: ImageStore, recipe: Recipe, log: Callable[[str], None]):
        self.store, self.recipe, self.log = store, recipe, log
        self.fw = recipe.name  # what its log lines and errors name: the framework, and its build
        self.final = store.image_dir(recipe)
        self.tmp = self.final.with_name(self.final.name + ".tmp")
        self.steps: list[dict] = []

    def timed(self, name: str, fn: Callable[[], object]) -> object:
        self.log(f"[images] {self.fw}: {name}")
        start = time.monotonic()
        value = fn()
        self.steps.append({"step": name, "seconds": round(time.monotonic() - start, 1)})
        return value

    def ch_run(self, name: str, argv: Sequence[str], binds: Sequence[tuple[Path, str]] = (),
               env: dict[str, str] | None = None) -> str:
        """A build step inside the image (writable), with nothing of the host's environment."""
        cmd = [self.store.binary, "-w", "--unset-env=*"]
        for key, value in {**BUILD_ENV, **(env or {})}.items():
            cmd.append(f"--set-env={key}={value}")
        for src, dst in binds:
            cmd += ["-b", f"{src}:{dst}"]
        cmd += [str(self.tmp), "--", *argv]
        return _step(name, cmd, self.fw, self.log, env={**os.environ, "USER": os.environ.get("USER") or "root"})

    def run(self) -> dict:
        start = time.monotonic()
        if shutil.which(self.store.binary) is None:
            raise ImageBuildError(f"{self.fw}: building an image needs {self.store.binary} (Debian's package "
                                  f"`charliecloud`: apt-get install charliecloud), which is not on PATH")
        _, base_s = self.store.ensure_base(self.log)
        if base_s:
            self.steps.append({"step": "base", "seconds": round(base_s, 1)})
        shutil.rmtree(self.tmp, ignore_errors=True)
        try:
            interpreter = self.fill()
            digest, size = self.timed("digest", lambda: tree_digest(self.tmp))
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        shutil.rmtree(self.final, ignore_errors=True)
        self.tmp.rename(self.final)
        manifest = {"framework": self.recipe.framework, "build": self.recipe.build, "key": self.store.key(self.recipe),
                    "dir": str(self.final), "digest": "sha256:" + digest, "size_bytes": size, "interpreter": interpreter,
                    "env_dir": ENV_DIR, "env": self.recipe.trainer_env(), "base": self.store.base_dir.name,
                    "build_s": round(time.monotonic() - start, 1), "steps": self.steps,
                    "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "builder": BUILDER_VERSION}
        path = self.store.manifest_path(self.recipe)
        path.with_suffix(".json.tmp").write_text(json.dumps(manifest, indent=1))
        os.replace(path.with_suffix(".json.tmp"), path)
        self.log(f"[images] {self.fw}: ready, {size / 1e6:.0f} MB, {manifest['build_s']:.0f} s, "
                 f"image:{manifest['digest'][:23]} ({self.final})")
        return manifest

    def fill(self) -> str:
        """The steps that make the image in its temporary folder; the interpreter its venv was made with."""
        self.timed("copy the base", lambda: _step("copy the base", ["cp", "-a", "--reflink=auto",
                                                                     str(self.store.base_dir), str(self.tmp)],
                                                  self.fw, self.log))
        (self.tmp / ".orchestrator-base").unlink(missing_ok=True)
        packages = self.recipe.debian_packages()
        if packages:
            self.timed(f"debian packages ({' '.join(packages)})", lambda: self.apt(packages))
        interpreter = self.timed("interpreter", self.interpreter)
        wheels = self.timed("wheels", self.wheels)
        self.timed("venv", lambda: self.venv(interpreter, wheels))
        for script in self.recipe.post_install:  # offline: what pip fetches comes from the wheels
            self.timed(f"post_install {script.name}", lambda s=script: self.ch_run(
                f"post_install {s.name}", ["bash", f"/mnt/recipe/{s.name}"],
                binds=[(self.recipe.dir, "/mnt/recipe"), (wheels, "/mnt/wheels")],
                env={"ENV_DIR": ENV_DIR, "PYTHON": f"{ENV_DIR}/bin/python", "RECIPE_DIR": "/mnt/recipe",
                     "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "/mnt/wheels"}))
        if self.recipe.variant.get("blas"):  # after pip, as the venv's: a library may come with its packages
            self.timed("blas links", lambda: link_blas(self.recipe.framework, self.recipe.build, self.recipe.variant,
                                                       ENV_DIR, root=str(self.tmp)))
        self.timed("apptainer environment", self.apptainer_env)
        freeze = self.ch_run("pip freeze", [f"{ENV_DIR}/bin/python", "-m", "pip", "freeze"])
        (self.tmp / ENV_DIR.lstrip("/") / "requirements.lock").write_text(freeze)
        return interpreter

    # --- the steps ----------------------------------------------------------------------
    def apt(self, packages: list[str]) -> None:
        name = "debian packages"
        if not _is_root():
            raise ImageBuildError(f"{self.fw}: building the image failed at step `{name}`: installing "
                                  f"{', '.join(packages)} into the image needs root (apt-get in a chroot); "
                                  f"build it as root (sudo orchestrator images build {self.fw})")
        resolv = self.tmp / "etc" / "resolv.conf"
        saved = resolv.read_bytes() if resolv.is_file() and not resolv.is_symlink() else None
        if resolv.is_symlink():
            resolv.unlink()
        if Path("/etc/resolv.conf").is_file():
            shutil.copyfile("/etc/resolv.conf", resolv)
        env = {**BUILD_ENV}
        try:
            _step(name, ["chroot", str(self.tmp), "apt-get", "update", "-q"], self.fw, self.log, env=env)
            _step(name, ["chroot", str(self.tmp), "apt-get", "install", "-y", "-q", "--no-install-recommends",
                         *packages], self.fw, self.log, env=env,
                  fix=f"Fix {self.recipe.debian} (a Debian {BASE_SUITE} package name), then build again")
            _step(name, ["chroot", str(self.tmp), "apt-get", "clean"], self.fw, self.log, env=env)
        finally:
            shutil.rmtree(self.tmp / "var" / "lib" / "apt" / "lists", ignore_errors=True)
            (self.tmp / "var" / "lib" / "apt" / "lists" / "partial").mkdir(parents=True, exist_ok=True)
            if saved is not None:
                resolv.write_bytes(saved)
            else:
                resolv.write_text("")

    def interpreter(self) -> str:
        """The recipe's first interpreter the image has; else the host's, copied in."""
        for candidate in self.recipe.interpreters():
            path = os.path.expanduser(candidate)
            if "/" in path:
                if (self.tmp / path.lstrip("/")).exists():
                    return path
            else:
                for d in ("usr/local/bin", "usr/bin", "bin"):
                    if (self.tmp / d / path).exists():
                        return f"/{d}/{path}"
        host = self.recipe.venv.interpreter()  # EnvironmentNotReady ("unsupported") where none exists
        prefix = subprocess.run([host, "-c", "import sys; print(sys.base_prefix)"], capture_output=True,
                                text=True).stdout.strip()
        if not prefix or prefix in ("/", "/usr", "/usr/local") or not Path(host).resolve().is_relative_to(prefix):
            raise ImageBuildError(
                f"{self.fw}: building the image failed at step `interpreter`: the image has none of "
                f"{self.recipe.interpreters()} and the host's {host} is not a self-contained prefix to copy "
                f"in; add its Debian package to {self.recipe.debian}")
        self.log(f"[images] {self.fw}: the image has none of {self.recipe.interpreters()}; copying the host's "
                 f"{prefix} into it")
        shutil.copytree(prefix, self.tmp / prefix.lstrip("/"), symlinks=True, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("test", "tests", "__pycache__", "idlelib", "tkinter"))
        for parent in Path(prefix).parents:  # traversable by the unprivileged user a trainer runs as
            target = self.tmp / str(parent).lstrip("/")
            if parent != Path("/") and target.is_dir():
                target.chmod(target.stat().st_mode | 0o055)
        return str(Path(host).absolute())

    def wheels(self) -> Path:
        """The requirements as files, downloaded on the host by the recipe's interpreter (cached)."""
        host = self.recipe.venv.interpreter()
        version = subprocess.run([host, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True).stdout.strip()
        key = hashlib.sha256(self.recipe.requirements_text.encode() + version.encode()
                             + "\n".join(self.recipe.downloads()).encode()).hexdigest()[:12]
        wheels = self.store.root / "wheels" / f"{self.fw}-{key}"
        if (wheels / ".done").is_file():
            return wheels
        tmp = wheels.with_name(wheels.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        _step("wheels", [host, "-m", "pip", "download", "--progress-bar", "off", "--disable-pip-version-check",
                         "-d", str(tmp), "-r", str(self.requirements()[0])], self.fw, self.log,
              fix=f"Fix {self.recipe.requirements} or the network/proxy, then build again")
        for source in self.recipe.downloads():
            _step("wheels", [host, "-m", "pip", "download", "--progress-bar", "off", "--disable-pip-version-check",
                             "--no-deps", "--no-binary", ":all:", "-d", str(tmp), source], self.fw, self.log,
                  fix=f"Fix {self.recipe.downloads_file} or the network/proxy, then build again")
        (tmp / ".done").write_text("")
        shutil.rmtree(wheels, ignore_errors=True)
        tmp.rename(wheels)
        return wheels

    def apptainer_env(self) -> None:
        """What `apptainer exec <fw>.sif python3 -m trainers.<fw>` needs of this image once it is a
        SIF (`apptainer build <fw>.sif <image dir>`): the venv first on PATH, the recipe's `env`."""
        env_d = self.tmp / ".singularity.d" / "env"
        env_d.mkdir(parents=True, exist_ok=True)
        lines = ["# written by orchestrator/envs/images.py from containers/%s/env.yaml" % self.fw,
                 f'export PATH="{ENV_DIR}/bin:$PATH"', "export PYTHONNOUSERSITE=1"]
        lines += [f"export {key}={shlex.quote(value)}" for key, value in self.recipe.trainer_env().items()]
        (env_d / "90-orchestrator.sh").write_text("\n".join(lines) + "\n")
        labels = {"org.orchestrator.framework": self.fw, "org.orchestrator.recipe": self.store.key(self.recipe),
                  # as `orchestrator images def` labels a definition: the recipe's files, hashed
                  "org.orchestrator.recipe_sha256": self.recipe.digest()}
        (self.tmp / ".singularity.d" / "labels.json").write_text(json.dumps(labels, indent=1))

    def requirements(self) -> tuple[Path, str]:
        """The requirements file the venv installs, on the host and in the image: the recipe's own, or for a
        named build its pinned text (VenvRuntime.requirements_text), kept in the image's venv as the venv
        runtime keeps it in its own."""
        if self.recipe.build == builds.DEFAULT:
            return self.recipe.requirements, f"/mnt/recipe/{self.recipe.requirements.name}"
        kept = self.tmp / ENV_DIR.lstrip("/") / "requirements.build.txt"
        if not kept.is_file():
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text(self.recipe.requirements_text)
        return kept, f"{ENV_DIR}/{kept.name}"

    def venv(self, interpreter: str, wheels: Path) -> None:
        shared = ["--system-site-packages"] if self.recipe.variant.get("system_site_packages") else []
        self.ch_run("venv", [interpreter, "-m", "venv", *shared, ENV_DIR])
        self.ch_run("pip install", [f"{ENV_DIR}/bin/python", "-m", "pip", "install", "--no-index", "--no-cache-dir",
                                    "--find-links", "/mnt/wheels", "--progress-bar", "off",
                                    "-r", self.requirements()[1]],
                    binds=[(wheels, "/mnt/wheels"), (self.recipe.dir, "/mnt/recipe")])


def build(frameworks: Sequence[str], cache: Path | None = None, log: Callable[[str], None] = print,
          force: bool = False) -> list[dict]:
    store = ImageStore(cache)
    return [store.ensure(Recipe(fw), log, force) for fw in frameworks]
