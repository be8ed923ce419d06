#!/usr/bin/env bash
# Sourced by test.sh (or run alone): makes the trainers' environments ready, as a job would.
#   ./scripts/frameworks.sh [framework ...]     (default: every containers/<fw>/env.yaml)
# First the Debian packages each recipe lists in containers/<fw>/debian-packages.txt (installed
# with apt-get when root; otherwise the missing ones are named and that framework is skipped),
# then the venv itself (orchestrator.runtime.VenvRuntime.ensure: reused when already there).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${ROOT}/.venv/bin/python"
[ -x "$PY" ] || { echo "run scripts/setup.sh first (no $ROOT/.venv)" >&2; exit 1; }
frameworks=("$@")
if [ ${#frameworks[@]} -eq 0 ]; then
  for recipe in "$ROOT"/containers/*/env.yaml; do frameworks+=("$(basename "$(dirname "$recipe")")"); done
fi
for fw in "${frameworks[@]}"; do
  pkgs_file="$ROOT/containers/$fw/debian-packages.txt"
  if [ -f "$pkgs_file" ]; then
    missing=()
    for pkg in $(grep -v '^\s*#' "$pkgs_file"); do
      dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    if [ ${#missing[@]} -gt 0 ]; then
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "[frameworks] $fw: apt-get install ${missing[*]}"
        apt-get update -qq >/dev/null || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
      else
        echo "[frameworks] $fw: SKIPPED, missing Debian packages (install as root: apt-get install ${missing[*]})" >&2
        continue
      fi
    fi
  fi
  "$PY" - "$fw" <<'PY' || echo "[frameworks] $fw: environment FAILED (its tests will say so)" >&2
import sys, time
from orchestrator.runtime import VenvRuntime, EnvironmentNotReady
fw = sys.argv[1]
start = time.monotonic()
try:
    python = VenvRuntime.for_framework(fw).ensure()
except EnvironmentNotReady as exc:
    print(f"[frameworks] {fw}: {exc.error_class}: {exc}", file=sys.stderr)
    sys.exit(0 if exc.error_class == "unsupported" else 1)
print(f"[frameworks] {fw}: ready ({python}, {time.monotonic() - start:.0f} s)")
PY
done
