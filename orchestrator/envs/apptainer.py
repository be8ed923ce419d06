"""Apptainer definitions generated from a framework's recipe (`containers/<fw>/`), one per base.

Why: a cluster that runs Apptainer needs a SIF, and GPU nodes need the framework's CUDA build on a
CUDA base image. A hand-written `.def` beside the recipe drifts from it (versions, packages, build
scripts), so the definition is derived from the one recipe instead, by the same `Recipe` reader the
venv and the image build use: its Debian packages, its requirements file (copied in with %files),
its `post_install` scripts, its `env` and the trainers' mount point, labelled with a hash of every
recipe file it used, so a SIF names its recipe.

The base is a switch (`BASES`): `cpu` (Debian bookworm by debootstrap: the image build's own
base), or an NVIDIA CUDA image for GPU nodes (`cuda12`, `cuda11`, `cuda10`, with the compute
capabilities each toolkit serves). What a framework changes for a GPU base is data, in
`containers/<fw>/gpu.yaml` (see `GpuBuild`): the GPU wheel that replaces the CPU one, packages the
base names otherwise, its own build scripts, and the compute capabilities that build runs on. The
first base listed there is the framework's GPU build, the one `trainers/<fw>/__init__.py` declares
in `gpu_build` (the range a sweep's expansion and the trainer refuse outside;
tests/test_apptainer_def.py holds the two equal).

The CPU image needs no definition: `apptainer build <fw>.sif <image dir>` turns the directory
`orchestrator images build` made into a SIF with no registry at all. Apptainer is not a Debian
package, so no definition is built on this project's machines.
"""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from orchestrator.envs import builds, recipe_files
from orchestrator.envs.image_recipe import BASE_PACKAGES, ENV_DIR, MOUNT_POINTS, Recipe
# BASES and requirement_name are read from here too (orchestrator images, the tests)
from orchestrator.envs.recipe_files import BASES, Base, GpuBuild, RecipeFileError, requirement_name, show_range, swapped
from orchestrator.envs.venv_runtime import REPO, EnvironmentNotReady
from trainers.common.support import GPU_BUILD_ENV

#: Where the recipe's files land in the image (%files), as RECIPE_DIR for its scripts.
RECIPE_IN_IMAGE = "/opt/recipe"
#: The trainers' mount point (ApptainerRuntime binds the repository's trainers/ below it).
TRAINERS_MOUNT = "/opt/orchestrator"
#: A `beside` pattern as the definition's shell loop takes it unquoted: a path and a `*`, nothing a shell reads.
_GLOB = re.compile(r"/[A-Za-z0-9._+/*-]+")


class DefinitionError(EnvironmentNotReady):
    """A definition that cannot be generated; the message says what is wrong and the way out."""


def gpu_file(recipe: Recipe) -> Path:
    return recipe_files.gpu_file(recipe.dir)


def gpu_builds(recipe: Recipe) -> dict[str, GpuBuild]:
    """The recipe's GPU builds by base, in the order `gpu.yaml` lists them (the first is the
    framework's GPU build): recipe_files.gpu_builds, its refusal a DefinitionError."""
    try:
        return recipe_files.gpu_builds(recipe.dir)
    except RecipeFileError as exc:
        raise DefinitionError(str(exc)) from None


class Definition:
    """The Apptainer definition of one framework on one base (`text()`)."""

    def __init__(self, recipe: Recipe, base: str = "cpu"):
        if base not in BASES:
            raise DefinitionError(f"no base {base!r}; use --base with one of: "
                                  + "; ".join(f"{b.name} ({b.system}; {b.serves()})" for b in BASES.values()))
        if recipe.variant.get("gpu"):  # its wheels are its base's: that base's definition of the recipe (generate)
            raise DefinitionError(f"build={recipe.build} is its GPU base's definition: `orchestrator images def "
                                  f"{recipe.framework} --base {recipe.variant['gpu']}`")
        self.recipe, self.base = recipe, BASES[base]
        self.fw = recipe.framework
        builds = gpu_builds(recipe)
        self.gpu = builds.get(base)
        if base != "cpu" and self.gpu is None:
            offered = ", ".join(builds) or "none"
            raise DefinitionError(
                f"{self.fw} has no {base} build (its GPU bases: {offered}); use --base "
                f"{next(iter(builds), 'cpu')}, or add a `{base}:` entry to {gpu_file(recipe)}")
        if self.gpu:
            low, high = self.gpu.capability
            if (low is not None and low < _lowest(self.base)) or (high is not None and _highest(self.base) is not None
                                                                and high > _highest(self.base)):
                raise DefinitionError(
                    f"{gpu_file(recipe)}: the {base} build declares {show_range(self.gpu.capability)}, "
                    f"beyond what its base serves ({self.base.serves()}); fix its `capability:`")
        self.where = f"containers/{self.fw}/"

    # --- what goes in ---------------------------------------------------------------------
    def interpreter(self) -> str:
        """The first of the recipe's interpreters this base has (its `python3`, by version)."""
        listed = (self.gpu.python if self.gpu and self.gpu.python else None) or self.recipe.interpreters()
        for candidate in listed:
            name = os.path.basename(os.path.expanduser(str(candidate)))
            if name in ("python3", self.base.python):
                return f"/usr/bin/{self.base.python}"
        raise DefinitionError(
            f"{self.fw}: the {self.base.name} base has {self.base.python}, none of the recipe's "
            f"interpreters {listed}; use another --base, or build the image directory (`orchestrator "
            f"images build {self.fw}` copies the host's interpreter in) and `apptainer build {self.fw}.sif "
            f"<that directory>`")

    def packages(self) -> list[str]:
        swaps = self.gpu.packages if self.gpu else {}
        unknown = sorted(set(swaps) - set(self.recipe.debian_packages()))
        if unknown:
            raise DefinitionError(f"{gpu_file(self.recipe)}: {self.base.name} replaces packages "
                                  f"{', '.join(unknown)}, which {self.recipe.debian} does not list; fix the "
                                  f"`packages:` names")
        listed = [swaps.get(p, p) for p in self.recipe.debian_packages()]
        wanted = [*BASE_PACKAGES, *(p for p in listed if p), *(self.gpu.more_packages if self.gpu else [])]
        bad = [p for p in wanted if not recipe_files.DEBIAN_PACKAGE.fullmatch(str(p))]
        if bad:
            raise DefinitionError(f"{self.fw}: {bad} are not Debian package names; fix "
                                  f"{self.recipe.debian} or {gpu_file(self.recipe)}")
        return list(dict.fromkeys(wanted))

    def requirement_lines(self) -> list[str]:
        """requirements.txt's entries, with this base's replacements (the GPU wheels)."""
        try:
            out = swapped(self.recipe.requirements_listed(), self.gpu, self.recipe.dir, self.recipe.requirements)
        except RecipeFileError as exc:
            raise DefinitionError(str(exc)) from None
        for line in out:
            if "\n" in line or line.strip() == "REQUIREMENTS":
                raise DefinitionError(f"{self.fw}: requirement {line!r} is not one line; fix it")
        return out

    def scripts(self) -> list[Path]:
        if self.gpu and self.gpu.post_install is not None:
            names = [str(n) for n in self.gpu.post_install]
            bad = [n for n in names if not recipe_files.PLAIN_NAME.fullmatch(n) or not (self.recipe.dir / n).is_file()]
            if bad:
                raise DefinitionError(f"{gpu_file(self.recipe)}: post_install {bad} are not files of "
                                      f"{self.recipe.dir}; name scripts in the recipe's directory")
            return [self.recipe.dir / n for n in names]
        return list(self.recipe.post_install)

    def env(self) -> dict[str, str]:
        env = {"PYTHONPATH": TRAINERS_MOUNT, "PYTHONUNBUFFERED": "1", "PYTHONNOUSERSITE": "1",
               **self.recipe.trainer_env(), **(self.gpu.env if self.gpu else {})}
        if self.gpu:  # the trainer checks its GPUs against this build's range, not its framework's default
            env[GPU_BUILD_ENV] = builds.gpu_build_value(self.gpu.capability)
        bad = [k for k in env if not builds.ENV_NAME.fullmatch(k)]
        if bad:
            raise DefinitionError(f"{self.fw}: {bad} are not variable names; fix the recipe's `env:`")
        return env

    def files(self) -> list[Path]:
        """Every recipe file the definition uses: copied in with %files, hashed into its label (on
        the cpu base the image build's files exactly, so both ways to a CPU SIF name one recipe)."""
        files = [*self.recipe.files(), *self.scripts()]
        if self.gpu:
            files.append(gpu_file(self.recipe))
        return list(dict.fromkeys(files))

    def recipe_hash(self) -> str:
        return self.recipe.digest(self.files())

    # --- the text -------------------------------------------------------------------------
    def post(self) -> list[str]:
        """%post: the image build's steps (images.py), the build's variant applied as there."""
        b, requirements = self.base, f"{RECIPE_IN_IMAGE}/{self.recipe.requirements.name}"
        shared = " --system-site-packages" if self.recipe.variant.get("system_site_packages") else ""
        out = ["%post", "    set -eu", "    export DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8"]
        out += [f"    {line}" for line in b.setup]
        out += ["    apt-get update",
                "    apt-get install -y --no-install-recommends " + " ".join(self.packages()),
                "    apt-get clean && rm -rf /var/lib/apt/lists/*",
                f"    {self.interpreter()} -m venv{shared} {ENV_DIR}"]
        if b.pip:
            out.append(f"    {ENV_DIR}/bin/python -m pip install --no-cache-dir --upgrade {shlex.quote(b.pip)}")
        if self.gpu or self.recipe.build != builds.DEFAULT:  # the recipe's file with this base's wheels
            # (gpu.yaml), or the build's pins
            which = b.name if self.recipe.build == builds.DEFAULT else self.recipe.build
            requirements = f"{RECIPE_IN_IMAGE}/requirements.{which}.txt"
            out += [f"    cat > {requirements} <<'REQUIREMENTS'", *self.requirement_lines(), "REQUIREMENTS"]
        out.append(f"    {ENV_DIR}/bin/python -m pip install --no-cache-dir --progress-bar off -r {requirements}")
        for script in self.scripts():
            out.append(f"    ENV_DIR={ENV_DIR} PYTHON={ENV_DIR}/bin/python RECIPE_DIR={RECIPE_IN_IMAGE} "
                       f"bash {RECIPE_IN_IMAGE}/{script.name}")
        out += self.blas_lines()
        return out + [f"    {ENV_DIR}/bin/python -m pip freeze > {ENV_DIR}/requirements.lock",
                      "    mkdir -p " + " ".join("/" + m for m in MOUNT_POINTS), ""]

    def blas_lines(self) -> list[str]:
        """The build's blas/ folder of links (builds.blas_links, as the venv's and the image's), made after pip;
        a `beside` pattern (MKL's libraries, found only once pip has installed them) as a shell loop."""
        variant = self.recipe.variant
        if not variant.get("blas"):
            return []
        folder = f"{ENV_DIR}/{builds.BLAS_DIR}"
        out = [f"    mkdir -p {folder}"] + [f"    ln -s {shlex.quote(target)} {folder}/{name}"
                                            for name, target in builds.blas_links(variant, ENV_DIR, root=None).items()]
        beside = builds.blas_libraries(self.recipe.dir.parent)[variant["blas"]].get("beside")
        if beside:
            pattern = beside.replace("{env_dir}", ENV_DIR)
            if not _GLOB.fullmatch(pattern):
                raise DefinitionError(f"containers/blas.yaml: {variant['blas']}'s beside {beside!r} is not a plain "
                                      f"path pattern (letters, digits, ._-+/ and *); fix it")
            out.append(f'    for f in {pattern}; do ln -s "$f" {folder}/; done')
        return out

    def sif(self) -> str:
        """The SIF its comment builds, the name runtime=apptainer runs it from (builds.image_name)."""
        if self.recipe.build != builds.DEFAULT:
            return f"{self.recipe.name}.sif"
        return f"{self.fw}{'' if self.base.name == 'cpu' else '-' + self.base.name}.sif"

    def text(self) -> str:
        b, fw, digest = self.base, self.fw, self.recipe_hash()
        capability = self.gpu.capability if self.gpu else None
        how = f"--build {self.recipe.build}" if self.recipe.build != builds.DEFAULT else f"--base {b.name}"
        out = [f"{key}: {value}" for key, value in b.header]
        out += ["",
                f"# Generated by `orchestrator images def {fw} {how}` from {self.where} (recipe",
                f"# sha256 {digest[:12]}): do not edit; change the recipe and generate it again.",
                f"# Base: {b.system}.",
                "# Build from the repository's root (the %files paths are relative to it):",
                f"#   apptainer build {self.sif()} <this file>",
                ""]
        # Apptainer copies a %files source relative to the build's working directory and makes the
        # destination's parents (internal/pkg/build/files/copy.go, CopyFromHost)
        out += ["%files"] + [f"    {_rel(path)} {RECIPE_IN_IMAGE}/{path.name}" for path in self.files()] + [""]
        out += self.post()
        out += ["%environment", f'    export PATH="{ENV_DIR}/bin:$PATH"']
        out += [f"    export {key}={shlex.quote(value)}" for key, value in self.env().items()] + [""]
        labels = {"org.orchestrator.framework": fw, "org.orchestrator.recipe": f"{fw}-{digest[:12]}",
                  "org.orchestrator.recipe_sha256": digest, "org.orchestrator.base": b.name,
                  "org.orchestrator.base_image": b.image}
        if capability is not None:
            labels["org.orchestrator.gpu_capability"] = show_range(capability)
        if self.recipe.build != builds.DEFAULT:
            labels["org.orchestrator.build"] = self.recipe.build
        out += ["%labels"] + [f"    {key} {value}" for key, value in labels.items()] + [""]
        out += ["%help", f"    The {fw} trainer's environment from {self.where} on {b.system}.",
                f"    Run by the orchestrator's runtime=apptainer: apptainer exec{' --nv' if self.gpu else ''} "
                f"--bind <repo>/trainers:{TRAINERS_MOUNT}/trainers <sif> python3 -m trainers.{fw} ...", ""]
        return "\n".join(out)


def _lowest(base: Base) -> float:
    return (base.capability or (0.0, None))[0] or 0.0


def _highest(base: Base) -> float | None:
    return (base.capability or (None, None))[1]


def _rel(path: Path) -> str:
    path = Path(path).absolute()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def generate(framework: str, base: str | None = None, recipe_dir: Path | None = None,
             build: str = builds.DEFAULT) -> str:
    """The definition of `framework` on `base` (default cpu), or of one of its builds: a build with a GPU base
    is that base's definition (the SIF builds.image_name names), any other is made on the cpu base."""
    recipe = Recipe(framework, recipe_dir, build)  # EnvironmentNotReady naming the builds, for an undeclared one
    own = recipe.variant.get("gpu") or "cpu"
    if build != builds.DEFAULT and base not in (None, own):
        raise DefinitionError(f"build={build} is made on the {own} base, not {base}; leave out --base")
    if recipe.variant.get("gpu"):  # its GPU base's definition, as `--base <it>` gives it
        recipe = Recipe(framework, recipe_dir)
    return Definition(recipe, base or own).text()
