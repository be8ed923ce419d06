#!/usr/bin/env bash
# Called by test.sh (or run alone): the container images the tests run, built by the project's
# own builder (orchestrator/envs/images.py) from containers/<fw>/, reused when the recipe is unchanged.
#   ./scripts/images.sh [torch,cntk | all]      (default: torch,cntk, the ones CI runs, and the image of
#                                                each build CI makes: orchestrator/envs/builds.py's CI_BUILDS)
# Needs Debian's charliecloud (ch-run) and mmdebstrap, installed here with apt-get when root.
# Where the tools or the build are missing, its last line says why and it exits 1: test.sh then
# warns (the container tests skip with the reason), or under CI=true fails the run.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${ROOT}/.venv/bin/python"
[ -x "$PY" ] || { echo "run scripts/setup.sh first (no $ROOT/.venv)" >&2; exit 1; }
frameworks="${1:-torch,cntk}"
missing=()
command -v ch-run >/dev/null 2>&1 || missing+=(charliecloud)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[images] apt-get install ${missing[*]}"
    source "$ROOT/scripts/apt.sh"  # waits for another apt-get or dpkg
    apt_install "${missing[@]}" >/dev/null \
      || { echo "[images] NOT READY: ${missing[*]} did not install (apt-get, above)" >&2; exit 1; }
  else
    echo "[images] NOT READY: no ${missing[*]} and not root" \
         "(sudo apt-get install ${missing[*]}, then ./scripts/images.sh)" >&2
    exit 1
  fi
fi
start=$SECONDS
if ! "$PY" -m orchestrator images build "$frameworks"; then
  echo "[images] NOT READY: building the $frameworks images failed (above)" >&2
  exit 1
fi
echo "[images] $frameworks ready in $((SECONDS - start)) s"
if [ $# -eq 0 ]; then  # CI's: each build's own image too (tests/test_container_builds.py), e.g. numpy:reference
  for pair in $("$PY" -c 'from orchestrator.envs import builds
print(*(f"{fw}:{b}" for fw, names in builds.CI_BUILDS.items() for b in names))'); do
    start=$SECONDS
    "$PY" -m orchestrator images build "${pair%%:*}" --build "${pair#*:}" \
      || { echo "[images] NOT READY: building the ${pair/:/ build } image failed (above)" >&2; exit 1; }
    echo "[images] ${pair/:/ build } ready in $((SECONDS - start)) s"
  done
fi
"$PY" -m orchestrator images list
