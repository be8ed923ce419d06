"""A framework's builds: variants of its recipe, declared as data beside it, each its own environment.

`build=` (a cell setting) names one. `default` is the recipe itself (containers/<framework>/env.yaml),
as every cell before builds existed ran. Any other name must be a key of
`containers/<framework>/builds.yaml`, a mapping of build names to the parts of the recipe they
change:

- `python`, `post_install`: replace the recipe's;
- `env`: added to the recipe's trainer environment;
- `pins`: {package: specifier, or null to leave the package out}, replacing that package's line of
  the recipe's requirements (e.g. `torch: "==2.14.1"`);
- `system_site_packages: true`: the venv sees the interpreter's own packages (Debian's python3-numpy);
- `blas`: a name of containers/blas.yaml: the environment gets its own folder of links to that
  BLAS (and LAPACK), put first on the trainer's LD_LIBRARY_PATH. The machine's alternatives are
  never touched, so one build never changes another's library.
- `gpu`: a base of containers/<framework>/gpu.yaml (`orchestrator images def <fw> --base <it>`): the
  build's GPU image, and the compute capabilities that entry's `capability` declares are the ones the
  build runs on (expansion refuses a GPU outside them). A build without `gpu` runs on the framework's
  own range (trainers/<fw>/__init__.py gpu_build). Kepler (K20m, 3.5) builds are declared this way.

A build's name is only ever looked up in that declared list: it never becomes a path or reaches a
shell. The environment's folder is named by the variant's hash (VenvRuntime.env_dir).
"""
from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from orchestrator import setting_registry
from orchestrator.envs import recipe_files

DEFAULT = setting_registry.DEFAULT_BUILD
#: A build a site's module tree provides: `build=module:<name>/<version>`, run by runtime=module
#: (module_runtime.py) after `module load <name>/<version>`.
MODULE_PREFIX = "module:"
#: A module as `module load` takes it: plain names (setting_registry.NAME: none starting with `.` or
#: `-`, so no `..` and no option) joined by `/` (name/version, or a deeper hierarchy).
MODULE_NAME = re.compile(rf"{setting_registry.NAME.pattern}(/{setting_registry.NAME.pattern})*")
#: The keys a variant may set, and what each does.
KEYS = {"python": "the interpreters it is made with, in order", "post_install": "the scripts run after pip",
        "env": "variables for the trainer", "pins": "requirement lines replaced (null: left out)",
        "system_site_packages": "whether the venv sees the interpreter's own packages",
        "blas": "a BLAS of containers/blas.yaml, linked in the venv's blas/ folder",
        "gpu": "the GPU base (containers/<fw>/gpu.yaml) its GPU build takes"}
#: The shared libraries a BLAS build links in its folder: the names numpy (Debian's, through libblas.so.3
#: and liblapack.so.3) and Caffe (libopenblas.so.0, build_caffe.sh's -DBLAS=Open) load their BLAS by.
LINK_NAMES = {"libblas.so.3": "blas", "liblapack.so.3": "lapack", "libopenblas.so.0": "blas"}
#: A BLAS build's folder of links inside its environment (the venv's or the image's /opt/env)
BLAS_DIR = "blas"

_CONTAINERS = Path(__file__).resolve().parents[2] / "containers"


class BuildError(ValueError):
    """A build that is not declared, or a declaration that is wrong: one line saying which and the way out."""


def _load(path: Path) -> Any:
    """A builds.yaml's or blas.yaml's data; a file that is not YAML is one BuildError line, as every other
    fault of these files (`images list`, a cell's refusal), not a parser's traceback."""
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise BuildError(f"{path}: not YAML ({' '.join(str(exc).split())}); fix the file") from None


@functools.lru_cache(maxsize=None)
def declared(recipe: str, containers: Path = _CONTAINERS) -> Mapping[str, Mapping[str, Any]]:
    """The builds containers/<recipe>/builds.yaml declares, checked ({} where it has none)."""
    path = containers / recipe / "builds.yaml"
    if not path.is_file():
        return {}
    found = _load(path)
    if not isinstance(found, dict):
        raise BuildError(f"{path}: not a mapping of build names to variants; fix the file")
    for name, variant in found.items():
        if not isinstance(name, str) or not recipe_files.PLAIN_NAME.fullmatch(name) or name == DEFAULT:
            raise BuildError(f"{path}: build {name!r} is not a plain name (letters, digits, . _ -; not "
                             f"{DEFAULT!r}); rename it")
        unknown = sorted(map(str, set(variant) - set(KEYS))) if isinstance(variant, dict) else None
        if variant is not None and (not isinstance(variant, dict) or unknown):
            raise BuildError(f"{path}: build {name!r} sets {unknown or variant!r}; a build sets only {', '.join(KEYS)}")
        variant = variant or {}  # `name:` alone: the recipe as it is, under its own name
        problem = _value_problem(variant)
        if problem:
            raise BuildError(f"{path}: build {name!r}: {problem}")
        if variant.get("blas") is not None and (not isinstance(variant["blas"], str)
                                                or variant["blas"] not in blas_libraries(containers)):
            raise BuildError(f"{path}: build {name!r} has blas={variant['blas']!r}, which containers/blas.yaml does "
                             f"not declare ({', '.join(blas_libraries(containers))})")
        if variant.get("gpu") is not None and (not isinstance(variant["gpu"], str)
                                               or variant["gpu"] not in gpu_bases(recipe, containers)):
            raise BuildError(f"{path}: build {name!r} has gpu={variant['gpu']!r}, which {recipe}'s gpu.yaml does not "
                             f"declare ({', '.join(gpu_bases(recipe, containers)) or 'no GPU bases'})")
        if name in recipe_files.BASES and name != "cpu" and variant.get("gpu") != name:  # image_name's SIF
            raise BuildError(f"{path}: build {name!r} is named as the {name} base, whose definition (`images def "
                             f"{recipe} --base {name}`) builds {recipe}-{name}.sif too; rename the build")
    return found


#: A package name as PEP 508 writes one, and a version specifier list (`==2.14.1`, `>=1,<2`): a pin is
#: a requirements line, so neither may be a pip option (`-e`, `-r`, `--index-url`) or hold a space.
_PACKAGE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_SPECIFIER = re.compile(r"(===?|!=|<=?|>=?|~=)[A-Za-z0-9.*+!_-]+(,(===?|!=|<=?|>=?|~=)[A-Za-z0-9.*+!_-]+)*")


#: An environment variable's name: a build's `env` keys become `export NAME=...` lines of a shell script in
#: its image (images.py) and definition (apptainer.py), which take the name unquoted.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _value_problem(variant: Mapping[str, Any]) -> Optional[str]:
    """What is wrong with a variant's values (one line with the way out), or None: pins that are not a
    package and a version specifier, post_install scripts that are not file names in the recipe's folder, env
    keys that are not variable names (a shell would run the rest)."""
    pins = variant.get("pins") or {}
    if not isinstance(pins, dict):
        return f"pins is {pins!r}, not a mapping of packages to version specifiers; write pins: {{torch: \"==2.14.1\"}}"
    for package, spec in pins.items():
        if not isinstance(package, str) or not _PACKAGE.fullmatch(package) or \
                (spec is not None and (not isinstance(spec, str) or not _SPECIFIER.fullmatch(spec))):
            return (f"pin {package!r}: {spec!r} is not a package and a version specifier (e.g. torch: \"==2.14.1\", "
                    f"or null to leave the package out); fix the pin")
    env = variant.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and ENV_NAME.fullmatch(k) for k in env) or \
            not all(isinstance(v, (str, int, float)) and "\0" not in str(v) for v in env.values()):
        return (f"env {env!r} is not a mapping of variable names (letters, digits, _) to values; an image's "
                f"`export NAME=value` line takes the name as it is: fix the name")
    scripts = variant.get("post_install") or []
    if not isinstance(scripts, list) or \
            not all(isinstance(s, str) and recipe_files.PLAIN_NAME.fullmatch(s) for s in scripts):
        return (f"post_install {scripts!r} is not a list of script names in the recipe's folder (no / or ..); "
                f"put the script beside env.yaml and name it")
    return None


#: Where a BLAS build's links may point: the system's library folders, or the build's own venv.
LIBRARY_ROOTS = ("/usr/lib/", "/lib/", "{env_dir}/")


@functools.lru_cache(maxsize=None)
def gpu_bases(recipe: str, containers: Path = _CONTAINERS) -> Mapping[str, tuple[Optional[float], Optional[float]]]:
    """{GPU base: (lowest, highest) compute capability} that containers/<recipe>/gpu.yaml declares: the
    bases a build's `gpu` may name, read as `images def` reads them (recipe_files.gpu_builds)."""
    try:
        return {base: build.capability for base, build in recipe_files.gpu_builds(containers / recipe).items()}
    except recipe_files.RecipeFileError as exc:
        raise BuildError(str(exc)) from None


def gpu_range(recipe: str, build: Any) -> Optional[tuple[Optional[float], Optional[float]]]:
    """The compute capabilities `build` runs on: its `gpu` base's, or None where the build names no GPU
    base (the framework's own gpu_build holds: the default build, a BLAS or version variant, a module)."""
    if build == DEFAULT or module_of(build) is not None or build not in names(recipe):
        return None
    base = (declared(recipe)[build] or {}).get("gpu")
    return gpu_bases(recipe)[base] if base else None


def gpu_build_value(bounds: tuple[Optional[float], Optional[float]]) -> str:
    """A GPU base's range as the trainer reads it (trainers.common.support.GPU_BUILD_ENV): "3.5," or "3.0,7.5"."""
    return ",".join("" if c is None else f"{c:.1f}" for c in bounds)


def covering(recipe: str, capability: float) -> list[str]:
    """The declared builds of `recipe` whose GPU base runs compute capability `capability`: the way out
    named when a cell's build cannot run its GPU."""
    return [name for name in names(recipe)
            if gpu_range(recipe, name) is not None and in_range(gpu_range(recipe, name), capability)]


def in_range(bounds: tuple[Optional[float], Optional[float]], capability: float) -> bool:
    low, high = bounds
    return (low is None or capability >= low) and (high is None or capability <= high)


#: The keys of a containers/blas.yaml entry: a key not read (a misspelling, `package` of before) is refused.
BLAS_KEYS = frozenset({"packages", "blas", "lapack", "beside"})


@functools.lru_cache(maxsize=None)
def blas_libraries(containers: Path = _CONTAINERS) -> Mapping[str, Mapping[str, str]]:
    """The BLAS libraries a build may name: containers/blas.yaml (Debian's packages and their files),
    checked: `packages` a list of Debian package names (they reach apt-get), each file an absolute path in
    the system's library folders or the build's venv (LIBRARY_ROOTS), without `..` (it becomes a link)."""
    path = containers / "blas.yaml"
    found = _load(path)
    if not isinstance(found, dict):
        raise BuildError(f"{path}: not a mapping of BLAS names to their package and files; fix the file")
    for name, files in found.items():
        if not isinstance(name, str) or not recipe_files.PLAIN_NAME.fullmatch(name) or not isinstance(files, dict):
            raise BuildError(f"{path}: {name!r} is not a plain name with its package and files; fix the file")
        unknown = sorted(map(repr, set(files) - BLAS_KEYS))
        if unknown:
            raise BuildError(f"{path}: {name}: {', '.join(unknown)} is not a key of a BLAS entry "
                             f"({', '.join(sorted(BLAS_KEYS))}); fix the file")
        packages = files.get("packages", [])
        if not isinstance(packages, list) or not all(
                isinstance(p, str) and recipe_files.DEBIAN_PACKAGE.fullmatch(p) for p in packages):
            raise BuildError(f"{path}: {name}: packages {packages!r} is not a list of Debian package names; "
                             f"name the packages its files come from")
        for part in ("blas", "lapack", "beside"):
            target = files.get(part)
            if part == "beside" and target is None:
                continue
            if not isinstance(target, str) or not target.startswith(LIBRARY_ROOTS) or ".." in target.split("/") \
                    or any(c in target for c in "\n\0"):
                raise BuildError(f"{path}: {name}: {part} {target!r} is not a library file under "
                                 f"{', '.join(LIBRARY_ROOTS)} (no ..); point it at the installed library")
    return found


#: The thread counts a build's libraries read once, when they load (OpenMP's, OpenBLAS's, MKL's, BLIS's):
#: a job sets each to the cell's threads for a named build (thread_env), since the trainer cannot resize
#: a BLAS once loaded (numpy's comes in with trainers.common), and two builds compared must run on the
#: same number of threads. A default build's trainer sizes its own pools, as before builds existed.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def thread_env(build: Any, threads: Any) -> dict[str, str]:
    """The trainer's THREAD_VARIABLES for a cell at `build` with `threads` (none for the default build)."""
    if build in (None, DEFAULT) or not isinstance(threads, int) or threads < 1:
        return {}
    return {name: str(threads) for name in THREAD_VARIABLES}


def module_of(build: Any) -> Optional[str]:
    """The site module a build names (`module:<name>/<version>` -> `<name>/<version>`), or None for a
    build of the project's own recipes."""
    return build[len(MODULE_PREFIX):] if isinstance(build, str) and build.startswith(MODULE_PREFIX) else None


def module_problem(module: Any) -> Optional[str]:
    """Why `module` is not a name `module load` can take safely (one line with the way out), or None."""
    if isinstance(module, str) and MODULE_NAME.fullmatch(module):
        return None
    return (f"module {module!r} is not a module name (words of letters, digits and _.+-, joined by /, e.g. "
            f"build=module:pytorch/2.5.1); use the name `module avail` shows")


def refusal(recipe: str, build: str, runtime: str = "venv") -> Optional[str]:
    """Why `build` is not a build of `recipe` that `runtime` runs (one line with the way out), or None."""
    module = module_of(build)
    if runtime == "module" and module is None:
        return (f"runtime=module runs a site module: name it as build=module:<name>/<version> (as `module avail` "
                f"lists it), not build={build}; or use runtime=venv")
    if module is not None:
        if runtime != "module":
            return f"build={build} is a site module: add runtime=module (the trainer runs after `module load`)"
        return module_problem(module)
    if build == DEFAULT:
        return None
    try:
        builds = declared(recipe)
    except BuildError as exc:
        return str(exc)
    if build not in builds:
        return (f"build={build!r} is not a build of {recipe}; {recipe} has {', '.join(names(recipe))} "
                f"(containers/{recipe}/builds.yaml)")
    if runtime == "container" and gpu_base(recipe, build):
        return (f"build={build} names a GPU base (`gpu:` in containers/{recipe}/builds.yaml): it runs in runtime=venv "
                f"or runtime=apptainer (its GPU definition), not in runtime=container's CPU image; use one of those")
    if runtime not in ("venv", "container", "apptainer"):
        return f"build={build} runs in runtime=venv, container or apptainer, not in runtime={runtime}; use one of those"
    return None


def gpu_base(recipe: str, build: str) -> Optional[str]:
    """The GPU base a declared build names (`gpu:`), or None."""
    return (declared(recipe).get(build) or {}).get("gpu") if build in names(recipe) else None


def image_name(recipe: str, build: str) -> Optional[str]:
    """The SIF runtime=apptainer runs a declared build from, the name the generated definition's own comment
    builds: `<recipe>-<base>.sif` for a build with a GPU base (`images def <fw> --base <base>`), else
    `<recipe>-<build>.sif` (`images def <fw> --build <build>`); None for the default or an undeclared name."""
    if build == DEFAULT or build not in names(recipe):
        return None
    base = gpu_base(recipe, build)
    return f"{recipe}-{base}.sif" if base else f"{recipe}-{build}.sif"


def names(recipe: str) -> tuple[str, ...]:
    """The builds a recipe has, `default` first."""
    try:
        return (DEFAULT, *declared(recipe))
    except BuildError:
        return (DEFAULT,)


def variant(recipe: str, build: str, containers: Path = _CONTAINERS) -> Mapping[str, Any]:
    """A declared build's variant ({} for the default); BuildError for any other name."""
    if build == DEFAULT:
        return {}
    builds = declared(recipe, containers)
    if build not in builds:
        raise BuildError(refusal(recipe, build) or f"build={build!r} is not a build of {recipe}")
    return builds[build] or {}


def recipe_with(recipe: Mapping[str, Any], chosen: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe as the build changes it: a new mapping (the recipe is shared, never changed)."""
    merged = {**recipe, **{k: chosen[k] for k in ("python", "post_install") if k in chosen}}
    merged["env"] = {**(recipe.get("env") or {}), **(chosen.get("env") or {})}
    return merged


def requirements_with(text: str, pins: Mapping[str, Optional[str]]) -> str:
    """The requirements text with each pinned package's line replaced (or left out where its pin is null)."""
    pins = {_canonical(name): spec for name, spec in (pins or {}).items()}
    lines = []
    for line in text.splitlines():
        name = _canonical(re.split(r"[<>=!~;\[ ]", line.strip(), maxsplit=1)[0]) if line.strip() else ""
        if name in pins:
            if pins[name] is not None:
                lines.append(f"{name}{pins.pop(name)}")
            else:
                pins.pop(name)
            continue
        lines.append(line)
    lines += [f"{name}{spec}" for name, spec in pins.items() if spec is not None]
    return "\n".join(lines) + "\n"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def blas_links(chosen: Mapping[str, Any], env_dir: str = "{env_dir}", containers: Path = _CONTAINERS,
               root: Optional[str] = "/") -> dict[str, str]:
    """{link name: the library it points at} for a build's BLAS folder ({} for a build without `blas`):
    LINK_NAMES, and each file its `beside` pattern finds (a library that opens others from its folder:
    MKL's), `{env_dir}` the build's venv. `root`: where that pattern is looked for (an image's tree, whose
    links name its own paths; None: not looked for, as an Apptainer definition's shell finds them); the
    venv, the image and the definition make their folders by this one function."""
    if chosen.get("blas") is None:
        return {}
    files = blas_libraries(containers)[chosen["blas"]]
    links = {link: files[part].replace("{env_dir}", env_dir) for link, part in LINK_NAMES.items()}
    if files.get("beside") and env_dir != "{env_dir}" and root is not None:
        pattern = Path(files["beside"].replace("{env_dir}", env_dir))
        inside = Path(root) / pattern.parent.relative_to("/")
        links.update({found.name: str(pattern.parent / found.name) for found in sorted(inside.glob(pattern.name))})
    return links


def blas_packages(chosen: Mapping[str, Any], containers: Path = _CONTAINERS) -> list[str]:
    """The Debian packages of a build's BLAS (containers/blas.yaml's `packages`; none for a build that
    names no BLAS): what the host (scripts/frameworks.sh) and the build's image (images.py) install for it."""
    return list(blas_libraries(containers)[chosen["blas"]].get("packages", [])) if (chosen or {}).get("blas") else []


def library_path(chosen: Mapping[str, Any], env_dir: str, rest: Optional[str]) -> Optional[str]:
    """The trainer's LD_LIBRARY_PATH for a build: its BLAS folder (`<env_dir>/blas`) first, then `rest` (the
    recipe's own, or what the trainer would inherit); None where the build links no BLAS. The venv's
    environment and the image's both take it from here."""
    if not blas_links(chosen):
        return None
    return ":".join(p for p in (f"{env_dir}/{BLAS_DIR}", rest) if p)


#: The builds CI makes beside each default environment (scripts/frameworks.sh its venv, scripts/images.sh its
#: image): one, the cheapest that tests a build end to end (Debian's numpy on the reference BLAS: a venv over
#: the system's packages, seconds; its image ~25 s). Every other build is made on first use, or by
#: benchmarks/blas_builds.py.
CI_BUILDS = {"numpy": ("reference",)}


def debian_packages(recipe: str, containers: Path = _CONTAINERS) -> list[str]:
    """The Debian packages of the BLAS libraries a recipe's builds name (containers/blas.yaml's `packages`)."""
    return sorted({p for v in declared(recipe, containers).values() for p in blas_packages(v, containers)})


def way_out(recipe: str, build: str, capability: Any, default_range: tuple[Any, Any]) -> str:
    """'; build=<name> runs it (...)' where `build` cannot run a GPU of `capability` and a declared
    build can ('' otherwise): appended to expansion's refusal of that cell. `default_range` is the
    framework's own (Support.gpu_build, (major, minor) pairs) for a build that names no GPU base."""
    if capability is None:
        return ""
    own = tuple(None if c is None else c[0] + c[1] / 10 for c in default_range)
    bounds = gpu_range(recipe, build) or own
    if in_range(bounds, float(capability)):
        return ""
    if gpu_range(recipe, build) is not None and in_range(own, float(capability)):  # a GPU base's build on a newer GPU
        return f"; build={DEFAULT} runs it (the framework's own GPU build)"
    others = [name for name in covering(recipe, float(capability)) if name != build]
    if not others:
        return f"; no build of {recipe} declares a GPU base that runs compute capability {float(capability):.1f}"
    return (f"; build={others[0]} runs it (its GPU base {declared(recipe)[others[0]]['gpu']}: `orchestrator images def "
            f"{recipe} --base {declared(recipe)[others[0]]['gpu']}`; containers/{recipe}/builds.yaml)")
