"""What a container image is made of: a framework's recipe (`containers/<framework>/`) read as
the images read it, and what every image holds (the Debian base, the venv's place, the mount
points), with the hashes that key an image by them (images.py builds it; apptainer.py writes
the same recipe as a definition on a CUDA base). Reading only: nothing here builds or runs.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Sequence

from orchestrator.envs import builds
from orchestrator.envs.recipe_files import entries as _entries, listed as _listed
from orchestrator.envs.venv_runtime import CONTAINERS, VenvRuntime

#: Bump when the build steps change what an image holds: every image is rebuilt.
BUILDER_VERSION = "2"
BASE_SUITE = "bookworm"
#: What every image has: Python 3 with venv (the trainers' interpreter unless a recipe says otherwise).
BASE_PACKAGES = ("python3", "python3-venv")
#: The venv inside the image.
ENV_DIR = "/opt/env"
#: Mount points that must exist in the image (ch-run binds onto existing directories only).
MOUNT_POINTS = ("opt/orchestrator/trainers", "mnt/run", "mnt/data", "mnt/recipe", "mnt/wheels")


class Recipe:
    """A framework's recipe directory at one of its builds (builds.py), read as the venv runtime reads it:
    the build's interpreter, pins, env and BLAS come from that same VenvRuntime, not a second reading."""

    def __init__(self, framework: str, recipe_dir: Path | None = None, build: str = builds.DEFAULT):
        self.framework, self.build = framework, build
        self.dir = Path(recipe_dir) if recipe_dir else CONTAINERS / framework
        venv = VenvRuntime(framework, recipe_dir=self.dir, build=build)  # raises for a missing recipe or build
        self.venv = venv
        self.variant = venv.variant
        self.spec = venv.recipe
        self.requirements = venv.requirements
        self.post_install = venv.post_install
        self.debian = self.dir / "debian-packages.txt"
        #: sources a post_install script fetches with `pip download` (Caffe's sdist), fetched on the host
        self.downloads_file = self.dir / "downloads.txt"

    @property
    def name(self) -> str:
        """What its image is named by: the framework, and a named build's name (`numpy-reference`)."""
        return self.framework if self.build == builds.DEFAULT else f"{self.framework}-{self.build}"

    @property
    def requirements_text(self) -> str:
        """What the image's venv installs: the recipe's requirements with the build's pins (VenvRuntime's)."""
        return self.venv.requirements_text

    def files(self) -> list[Path]:
        files = [self.dir / "env.yaml", self.requirements, *self.post_install]
        return files + [f for f in (self.debian, self.downloads_file) if f.is_file()]

    def downloads(self) -> list[str]:
        if not self.downloads_file.is_file():
            return []
        return _listed(self.downloads_file)

    def requirements_listed(self) -> list[str]:
        """requirements.txt's entries (with a build's pins), as every list file of the recipe is read."""
        return _entries(self.requirements_text)

    def debian_packages(self) -> list[str]:
        """debian-packages.txt's, and the build's BLAS packages (containers/blas.yaml) where it names a BLAS."""
        listed = _listed(self.debian) if self.debian.is_file() else []
        return listed + [p for p in builds.blas_packages(self.variant, self.dir.parent) if p not in listed]

    def interpreters(self) -> list[str]:
        candidates = self.spec.get("python") or ["python3"]
        return [candidates] if isinstance(candidates, str) else [str(c) for c in candidates]

    def trainer_env(self) -> dict[str, str]:
        return self.venv.trainer_env(ENV_DIR)

    def digest(self, files: Sequence[Path] | None = None) -> str:
        """sha256 over the recipe's files (or `files`: what an Apptainer definition used)."""
        h = hashlib.sha256()
        for path in self.files() if files is None else files:
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        if self.build != builds.DEFAULT:  # the default's hash stays what it was before builds existed
            h.update(b"build\0" + self.venv.variant_key() + str(self.debian_packages()).encode())
        return h.hexdigest()


def base_hash() -> str:
    """What keys the shared base: its suite, packages and mount points, and the builder's version."""
    text = json.dumps({"suite": BASE_SUITE, "variant": "minbase", "packages": BASE_PACKAGES,
                       "mounts": MOUNT_POINTS, "builder": BUILDER_VERSION}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
