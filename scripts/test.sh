#!/usr/bin/env bash
# The README's second command: set up everything the tests need, then run them.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# Every framework's trainer environment, exactly as a job makes it (reused when already there).
"$ROOT/scripts/frameworks.sh"
exec python -m pytest -ra "$@"
