"""A site's own framework build: the trainer runs after `module load <name>/<version>`.

What an HPC centre validates is its own software stack: the PyTorch module it installed, against
the previous one and against a container. `runtime=module` (with `build=module:<name>/<version>`)
runs the trainer in a shell that loads that module from the site's module tree, so that `python`
is the module's interpreter, with whatever libraries its modulefile sets. Lmod and Environment
Modules both define the `module` shell function; which one a node has is found, not configured.

The site declares its tree in its cluster YAML:

    modules:
      path: [/apps/modulefiles, /apps/local/modulefiles]   # MODULEPATH, in order

Safety: the module name is checked against builds.MODULE_NAME (path-like words: no `..`, no leading
`-` that `module` would read as an option, no shell characters) and reaches the shell only as a
positional argument, never inside the script's text; the tree's directories must be absolute,
existing directories. The init script is one of the module systems' own (INITS), never a path
from a YAML.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from orchestrator.envs import builds
from orchestrator.envs.venv_runtime import REPO, EnvironmentNotReady, _trainer_env

#: The module systems' bash init scripts, where Debian's packages (and most sites) put them:
#: Lmod's, then Environment Modules'. $LMOD_PKG or $MODULESHOME of the node's own login
#: environment, where set, come first (a site's install elsewhere).
INITS = ("/usr/share/lmod/lmod/init/bash", "/usr/share/modules/init/bash")
#: The shell that loads the module and runs the trainer: $1 the init script, $2 MODULEPATH, $3 the
#: module, $4 the trainer's module; the trainer's arguments follow. No value is part of this text.
#: A module that puts no `python` of its own first on PATH would run the trainer in whichever python the
#: job had (the orchestrator's own venv) under the module's name: refused, naming the python it found.
#: The modules the job's environment carries from the submitting shell are purged first, so that a
#: module loaded there too is loaded anew (and a job runs the same modules wherever it was submitted).
LOAD_AND_RUN = ('set -e; init=$1 path=$2 module=$3 trainer=$4; shift 4; . "$init"; export MODULEPATH="$path"; '
                'module purge >/dev/null 2>&1 || true; '
                'before=$(command -v python || true); module load "$module"; after=$(command -v python || true); '
                'if [ -z "$after" ] || [ "$after" = "$before" ]; then echo "module $module puts no python of its own '
                'first on PATH (python: ${after:-none}); load a module whose modulefile prepends its interpreter\'s '
                'bin, or use runtime=venv" >&2; exit 2; fi; exec python -m "$trainer" "$@"')
#: The same shell's check that the module exists, before a job counts on it.
IS_AVAILABLE = 'init=$1 path=$2 module=$3; . "$init"; export MODULEPATH="$path"; module is-avail "$module"'


def module_name(value: Any) -> str:
    """`value` if it is a module name `module load` can take safely; else EnvironmentNotReady saying why."""
    problem = builds.module_problem(value)
    if problem:
        raise EnvironmentNotReady(problem)
    return value


def module_path(modules: Mapping[str, Any] | None) -> str:
    """The site's module tree (cluster YAML `modules.path`) as MODULEPATH: absolute directories."""
    dirs = (modules or {}).get("path")
    if isinstance(dirs, str):
        dirs = [dirs]
    if not dirs or not isinstance(dirs, (list, tuple)):
        raise EnvironmentNotReady("runtime=module needs the site's module tree: add `modules: {path: "
                                  "[/apps/modulefiles]}` to the cluster's YAML (conf/cluster/<site>.yaml)")
    for d in dirs:
        if not isinstance(d, str) or not os.path.isabs(d) or ":" in d or "\n" in d or not os.path.isdir(d):
            raise EnvironmentNotReady(f"cluster modules.path: {d!r} is not an existing absolute directory "
                                      f"(without ':'); list the site's modulefile directories")
    return ":".join(dirs)


def init_script(environ: Mapping[str, str] = os.environ) -> str:
    """The first bash init script of a module system this node has; EnvironmentNotReady where none."""
    own = [str(Path(environ[key]) / sub) for key, sub in (("LMOD_PKG", "init/bash"), ("MODULESHOME", "init/bash"))
           if environ.get(key)]
    for candidate in (*own, *INITS):
        if os.path.isfile(candidate):
            return candidate
    raise EnvironmentNotReady("runtime=module but this node has neither Lmod nor Environment Modules "
                              f"(no {' or '.join(INITS)}); install one (Debian: apt-get install lmod) "
                              "or use runtime=venv")


class ModuleRuntime:
    """The trainer in a shell that has loaded a site module (`module load NAME/VERSION`)."""

    kind = "module"

    def __init__(self, framework: str, module: str, modules: Mapping[str, Any] | None, trainer: str | None = None):
        self.framework = framework
        self.trainer = trainer or f"trainers.{framework}"
        self.module = module_name(module)
        self.modules = modules

    def builds_in_job(self) -> bool:
        """Never: a site's module is installed by the site, not built by a job."""
        return False

    def _shell(self, script: str, *args: str) -> list[str]:
        return ["bash", "--noprofile", "--norc", "-c", script, "orchestrator-module",
                init_script(), module_path(self.modules), self.module, *args]

    def ensure(self, log: Callable[[str], None] = print) -> str:
        done = subprocess.run(self._shell(IS_AVAILABLE), capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise EnvironmentNotReady(f"module {self.module} is not available in the module tree "
                                      f"{module_path(self.modules)}; name one `module avail` lists")
        log(f"[runtime] {self.framework}: module {self.module}")
        return self.module

    def identity(self) -> str:
        return f"module:{self.module}"

    def command(self, args: Sequence[str], gpus: int = 0, binds: Sequence[str] = (),
                run_dir: str | None = None) -> tuple[list[str], dict[str, str]]:
        return self._shell(LOAD_AND_RUN, self.trainer, *args), _trainer_env(str(REPO))
