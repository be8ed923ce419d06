#!/usr/bin/env bash
# Called by test.sh (or run alone): Lmod from Debian's package, and a test module tree over two of
# the project's own trainer environments, for runtime=module (orchestrator/envs/module_runtime.py).
#
#   ./scripts/modules.sh            # install Lmod where missing (as root), write the tree; prints its path
#   ./scripts/modules.sh path       # the tree's path, if it is written
#
# The tree ($MODULES_TEST_DIR/tree, default /tmp/orchestrator-modules/tree) holds one Lua modulefile
# per environment, named <framework>-env/<the framework's version in it>: loading one puts that
# environment's interpreter first on PATH, as a site's framework module does. tests/test_modules.py
# points a cluster YAML's `modules.path` at it. Why Lmod and not Environment Modules: the two Debian
# packages conflict, and Lmod reads both Lua and Tcl modulefiles; the runtime speaks to either.
# A site's own tree is its own: nothing here writes outside $MODULES_TEST_DIR.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${ROOT}/.venv/bin/python"
DIR="${MODULES_TEST_DIR:-/tmp/orchestrator-modules}"
TREE="$DIR/tree"
#: The environments the test tree wraps: two of the project's (scripts/frameworks.sh makes them).
FRAMEWORKS=(numpy torch)

if [ "${1:-}" = path ]; then
  [ -d "$TREE" ] || { echo "no module tree yet: run scripts/modules.sh" >&2; exit 1; }
  echo "$TREE"
  exit 0
fi
[ -x "$PY" ] || { echo "run scripts/setup.sh first (no $ROOT/.venv)" >&2; exit 1; }

if [ ! -r /usr/share/lmod/lmod/init/bash ] && [ ! -r /usr/share/modules/init/bash ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "no Lmod (nor Environment Modules): as root, apt-get install lmod" >&2
    exit 1
  fi
  source "$ROOT/scripts/apt.sh"
  echo "[modules] apt-get install lmod" >&2
  apt_install lmod >/dev/null || { echo "apt-get install lmod failed (above)" >&2; exit 1; }
fi

mkdir -p "$DIR"
staged="$(mktemp -d "$DIR/tree.XXXXXX")"
for fw in "${FRAMEWORKS[@]}"; do
  # the environment's directory and the framework's version, from the environment itself
  read -r env_dir version < <(PYTHONPATH="$ROOT" "$PY" - "$fw" <<'EOF'
import subprocess, sys
from orchestrator.envs.venv_runtime import VenvRuntime
env = VenvRuntime(sys.argv[1])
if not env.is_ready():
    sys.exit(f"the {sys.argv[1]} environment is not ready: run scripts/frameworks.sh {sys.argv[1]}")
module = {"numpy": "numpy"}.get(sys.argv[1], sys.argv[1])
version = subprocess.run([str(env.python), "-c", f"import {module}; print({module}.__version__)"],
                         capture_output=True, text=True, check=True).stdout.strip().split("+")[0]
print(env.env_dir, version)
EOF
  )
  mkdir -p "$staged/$fw-env"
  cat >"$staged/$fw-env/$version.lua" <<EOF
-- The project's $fw trainer environment (scripts/modules.sh wrote this test module).
whatis("Name: $fw-env")
whatis("Version: $version")
family("orchestrator_env")
prepend_path("PATH", "$env_dir/bin")
setenv("VIRTUAL_ENV", "$env_dir")
EOF
done
# Put the tree in place without a moment where $TREE is missing: another shell (a second CI run, a
# job reading it through MODULEPATH) may be using it now. The same tree as before is left as it is;
# a new one replaces it by renaming a link over the old (rename is atomic; a directory cannot be
# renamed over a non-empty one), and the old tree it pointed at is removed after.
chmod 755 "$staged"
if [ -d "$TREE" ] && diff -rq "$staged" "$TREE" >/dev/null 2>&1; then
  rm -rf "$staged"
else
  old="$(readlink "$TREE" || true)"
  if [ -d "$TREE" ] && [ ! -L "$TREE" ]; then  # a tree an earlier version of this script wrote in place
    mv "$TREE" "$DIR/tree.was.$$"
    old="tree.was.$$"
  fi
  ln -s "$(basename "$staged")" "$DIR/tree.link.$$"
  mv -T "$DIR/tree.link.$$" "$TREE"
  case "$old" in tree.*) rm -rf "${DIR:?}/$old" ;; esac
fi
echo "[modules] the test module tree: $(cd "$TREE" && find . -name '*.lua' | sort | tr '\n' ' ')" >&2
echo "$TREE"
