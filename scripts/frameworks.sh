#!/usr/bin/env bash
# Called by test.sh (or run alone): makes the trainers' environments ready, as a job would.
#   ./scripts/frameworks.sh [framework ...]     (default: every containers/<fw>/env.yaml)
# First the Debian packages each recipe lists in containers/<fw>/debian-packages.txt (installed
# with apt-get when root, waiting for another apt-get: scripts/apt.sh), then the venv itself
# (orchestrator.envs.runtime.VenvRuntime.ensure: reused when already there), and the build CI
# makes beside it (orchestrator/envs/builds.py's CI_BUILDS). One framework that fails
# does not stop the others; where any is not ready, the last line names each with its reason and
# it exits 1 (test.sh then warns, or under CI=true fails the run). A framework this machine cannot
# hold (`unsupported`) is not ready either: its tests cannot run here.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${ROOT}/.venv/bin/python"
[ -x "$PY" ] || { echo "run scripts/setup.sh first (no $ROOT/.venv)" >&2; exit 1; }
source "$ROOT/scripts/apt.sh"
frameworks=("$@")
if [ ${#frameworks[@]} -eq 0 ]; then
  for recipe in "$ROOT"/containers/*/env.yaml; do frameworks+=("$(basename "$(dirname "$recipe")")"); done
fi

# The Debian packages a framework's recipe lists, installed where missing; a line saying why not.
debian_packages() {
  local fw="$1" pkgs_file="$ROOT/containers/$1/debian-packages.txt" missing=() pkg wanted
  # the recipe's list, and the BLAS libraries its builds name (containers/blas.yaml)
  wanted="$( { [ ! -f "$pkgs_file" ] || grep -v '^\s*#' "$pkgs_file";
               "$PY" -c 'import sys; from orchestrator.envs import builds; print(*builds.debian_packages(sys.argv[1]))' "$fw"; } )" \
    || { echo "containers/$fw/builds.yaml cannot be read (above)"; return 1; }
  for pkg in $wanted; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep "install ok installed" >/dev/null || missing+=("$pkg")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "missing Debian packages, installed as root: apt-get install ${missing[*]}"
    return 1
  fi
  echo "[frameworks] $fw: apt-get install ${missing[*]}" >&2
  apt_install "${missing[@]}" >/dev/null || { echo "apt-get install ${missing[*]} failed (above)"; return 1; }
}

failed=()
for fw in "${frameworks[@]}"; do
  if ! why="$(debian_packages "$fw")"; then
    echo "[frameworks] $fw: NOT READY: $why" >&2
    failed+=("$fw ($why)")
    continue
  fi
  # its output as it builds on stderr, the reason it failed (if it did) on fd 3, captured
  why="$("$PY" - "$fw" 3>&1 1>&2 <<'PY'
import os, sys, time
from orchestrator.envs.runtime import VenvRuntime, EnvironmentNotReady
fw = sys.argv[1]
start = time.monotonic()
from orchestrator.envs import builds
try:
    python = VenvRuntime.for_framework(fw).ensure()
    for build in builds.CI_BUILDS.get(fw, ()):  # the one build CI makes beside the default (builds.py)
        VenvRuntime.for_framework(fw, build=build).ensure()
except EnvironmentNotReady as exc:
    os.write(3, ("%s: %s" % (exc.error_class, " ".join(str(exc).split()))).encode())
    sys.exit(1)
print(f"[frameworks] {fw}: ready ({python}, {time.monotonic() - start:.0f} s)")
PY
)" || { why="${why:-its environment failed (above)}"; echo "[frameworks] $fw: NOT READY: $why" >&2; failed+=("$fw ($why)"); }
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "[frameworks] not ready: $(printf '%s; ' "${failed[@]}" | sed 's/; $//')" >&2
  exit 1
fi
