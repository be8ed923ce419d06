#!/usr/bin/env bash
# Called by test.sh (or run alone): the container images the tests run, built by the project's
# own builder (orchestrator/images.py) from containers/<fw>/, reused when the recipe is unchanged.
#   ./scripts/images.sh [torch,cntk | all]      (default: torch,cntk, the ones CI runs)
# Needs Debian's charliecloud (ch-run) and mmdebstrap, installed here with apt-get when root.
# Never fails the caller: where the tools or the build are missing, it says so loudly and the
# container tests skip with the reason.
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
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }; } \
      || { echo "[images] WARNING: ${missing[*]} did not install; the container tests will skip" >&2; exit 0; }
  else
    echo "[images] WARNING: no ${missing[*]} and not root; the container tests will skip" \
         "(sudo apt-get install ${missing[*]}, then ./scripts/images.sh)" >&2
    exit 0
  fi
fi
start=$SECONDS
if "$PY" -m orchestrator images build "$frameworks"; then
  echo "[images] $frameworks ready in $((SECONDS - start)) s"
  "$PY" -m orchestrator images list
else
  echo "[images] WARNING: building the images failed (above); the container tests will skip" >&2
fi
exit 0
