#!/usr/bin/env bash
# The README's second command: set up everything the tests need, then run them.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# The PyTorch trainer's environment, exactly as a job makes it (reused when already there).
python - <<'PY'
from orchestrator.runtime import VenvRuntime
VenvRuntime.for_framework("torch").ensure()
PY
exec python -m pytest -ra "$@"
