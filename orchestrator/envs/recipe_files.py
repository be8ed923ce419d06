"""What a recipe's files say, read without building anything: its list files, the GPU bases a definition
may start from, and its `gpu.yaml` (a GPU build per base, the compute capabilities it runs on).

Why a module of its own: the image definition (apptainer.py), a build's variant (builds.py: a build may
name a GPU base, whose range it runs on) and a build's venv (venv_runtime.py: the base's wheels) all read
these, and none of them may import another that imports it back. Only data and the standard library here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import yaml

_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
#: The names a recipe's files give, each checked with fullmatch (so no trailing newline slips through):
#: a Debian package (Debian Policy 5.6.1: what apt-get and an image's %post are handed), and a plain name
#: (a post_install script beside the recipe, a build, a BLAS of blas.yaml): one path component, no `/`,
#: no leading `.` or `-` (so no `..` and no option).
DEBIAN_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+")
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class RecipeFileError(ValueError):
    """A recipe file that says something wrong: one line naming the file and the way out."""


def listed(path: Path) -> list[str]:
    """A recipe list file's entries: a line each, `#` comments and blank lines left out."""
    return entries(path.read_text())


def entries(text: str) -> list[str]:
    """A list's entries (`listed`), from its text: a build's requirements are text, not a file."""
    return [entry for entry in (line.split("#")[0].strip() for line in text.splitlines()) if entry]


@dataclass(frozen=True)
class Base:
    """A base image a definition starts from."""

    name: str
    header: tuple[tuple[str, str], ...]  # the definition's header lines (Bootstrap, From, ...)
    system: str                          # what the base is, in words
    python: str                          # the interpreter its `python3` package gives
    capability: tuple[float | None, float | None] | None  # compute capabilities its CUDA serves
    setup: tuple[str, ...] = ()          # %post lines before apt-get (fixed here, not from config)
    pip: str = ""                        # a pip to upgrade the venv's to ("" keeps the venv's own)

    @property
    def image(self) -> str:
        return dict(self.header).get("From") or dict(self.header).get("OSVersion", "")

    def serves(self) -> str:
        if self.capability is None:
            return "no GPUs"
        return show_range(self.capability)


#: The base-image switch. CUDA 12 dropped Kepler (3.x); CUDA 11 still compiles and runs sm_35
#: (the K20m; 11.x wheels built for 11.2 run on its 11.8 libraries); BVLC Caffe and CNTK 2.7 need cuDNN 7, hence CUDA 10.
BASES = {
    "cpu": Base("cpu", (("Bootstrap", "debootstrap"), ("OSVersion", "bookworm"),
                        ("MirrorURL", "http://deb.debian.org/debian")),
                "Debian bookworm (debootstrap), the image build's own base", "python3.11", None),
    "cuda12": Base("cuda12", (("Bootstrap", "docker"), ("From", "nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04")),
                   "CUDA 12.6 + cuDNN 9 runtime on Ubuntu 24.04 (P100 and newer)", "python3.12", (5.0, None)),
    "cuda11": Base("cuda11", (("Bootstrap", "docker"), ("From", "nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04")),
                   "CUDA 11.8 + cuDNN 8 runtime on Ubuntu 22.04 (Kepler K20m and newer)", "python3.10", (3.5, None)),
    "cuda10": Base("cuda10", (("Bootstrap", "docker"), ("From", "nvidia/cuda:10.0-cudnn7-devel-ubuntu18.04")),
                   "CUDA 10.0 + cuDNN 7 with nvcc on Ubuntu 18.04 (Kepler to Turing; Caffe, CNTK)",
                   "python3.6", (3.0, 7.5),
                   # the NVIDIA apt key of these old images was rotated in 2022
                   setup=("apt-key del 7fa2af80 || true",
                          "apt-key adv --fetch-keys https://developer.download.nvidia.com/compute/cuda/repos/"
                          "ubuntu1804/x86_64/3bf863cc.pub"),
                   pip="pip<22"),  # 18.04's venv pip 9 is older than manylinux2010
}


def show_range(bounds: Sequence[float | None]) -> str:
    low, high = bounds
    if low is None and high is None:
        return "any compute capability"
    if low is not None and high is not None:
        return f"compute capability {low:.1f} to {high:.1f}"
    return f"compute capability >= {low:.1f}" if low is not None else f"compute capability <= {high:.1f}"


@dataclass
class GpuBuild:
    """What one GPU base changes in a recipe: `containers/<fw>/gpu.yaml`, one entry per base.

    capability: [lowest, highest]  compute capabilities this build runs on (null: no bound)
    requirements: {name: line}     a requirement of requirements.txt, by name, replaced by this
                                   line (null drops it; a name the file lacks is an error)
    packages: {name: name}         a Debian package the base names otherwise (null drops it)
    more_packages: [name]          packages only this build needs
    python: [interpreter]          replaces the recipe's `python:` list for this base
    post_install: [script]         replaces the recipe's post_install (files in the recipe)
    env: {NAME: value}             added to the recipe's `env`
    """

    base: str
    capability: tuple[float | None, float | None] = (None, None)
    requirements: dict[str, str | None] = field(default_factory=dict)
    packages: dict[str, str | None] = field(default_factory=dict)
    more_packages: list[str] = field(default_factory=list)
    python: list[str] | None = None
    post_install: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)


def gpu_file(recipe_dir: Path) -> Path:
    return Path(recipe_dir) / "gpu.yaml"


def gpu_builds(recipe_dir: Path) -> dict[str, GpuBuild]:
    """The recipe's GPU builds by base, in the order `gpu.yaml` lists them (the first is the
    framework's GPU build). Kept apart from env.yaml: they change no venv and no CPU image."""
    path = gpu_file(recipe_dir)
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise RecipeFileError(f"{path} is not a mapping of base to build; write `cuda12:` entries (containers/README.md)")
    known = set(GpuBuild.__dataclass_fields__) - {"base"}
    builds = {}
    for base, entry in data.items():
        if base not in BASES or base == "cpu":
            raise RecipeFileError(f"{path} names base {base!r}, which is not a GPU base; use one of "
                                  f"{', '.join(b for b in BASES if b != 'cpu')}")
        entry = entry or {}
        unknown = sorted(set(entry) - known)
        if unknown:
            raise RecipeFileError(f"{path}: {base} has unknown keys {', '.join(unknown)}; the keys are "
                                  f"{', '.join(sorted(known))}")
        try:
            low, high = (None if c is None else float(c) for c in (list(entry.get("capability") or []) + [None, None])[:2])
        except (TypeError, ValueError):
            raise RecipeFileError(f"{path}: {base}'s capability {entry.get('capability')!r} is not [low, high]; "
                                  f"write e.g. `capability: [6.0, null]`") from None
        builds[base] = GpuBuild(base, (low, high),
                                dict(entry.get("requirements") or {}), dict(entry.get("packages") or {}),
                                list(entry.get("more_packages") or []), entry.get("python"),
                                entry.get("post_install"), {k: str(v) for k, v in (entry.get("env") or {}).items()})
    return builds


def canonical(name: str) -> str:
    """A project name normalised as pip does (PEP 503): `Tensorflow_CPU` is `tensorflow-cpu`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str | None:
    """A requirement line's project name, normalised as pip does (None for an option line)."""
    found = _REQUIREMENT_NAME.match(line)
    return canonical(found.group(1)) if found and not line.lstrip().startswith("-") else None


def swapped(lines: Sequence[str], gpu: GpuBuild | None, recipe_dir: Path, requirements: Path) -> list[str]:
    """A requirements file's entries with a GPU build's replacements (its wheels for the CPU ones; a null
    drops a line): what the build's image installs, and its venv."""
    swaps = {canonical(k): v for k, v in (gpu.requirements if gpu else {}).items()}
    unknown = sorted(set(swaps) - {requirement_name(line) for line in lines})
    if unknown:
        raise RecipeFileError(f"{gpu_file(recipe_dir)}: {gpu.base} replaces requirements {', '.join(unknown)}, "
                              f"which {requirements} does not have; fix the `requirements:` names")
    out = [str(swaps.get(requirement_name(line), line)) for line in lines]
    return [line for line in out if line and line != "None"]
