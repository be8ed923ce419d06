#!/usr/bin/env bash
# Sourced by demo.sh and test.sh: makes ./.venv with the orchestrator installed (idempotent).
# The trainers' own environments are made later, on first use, by the venv runtime.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="$ROOT/.venv"
stamp="$VENV/.installed-$(sha256sum "$ROOT/pyproject.toml" | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "[setup] installing the orchestrator into $VENV"
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
  # a plain .pth puts the repository itself on sys.path (pyproject.toml's package-dir), which
  # Hydra's plugin discovery (the hydra_plugins namespace package) and the conf/ tree rely on.
  "$VENV/bin/pip" install -q -e "$ROOT[test]" 2>&1 | grep -v '^WARNING: Location' || true
  "$VENV/bin/python" -c "import orchestrator, hydra, submitit, sqlalchemy" 
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
