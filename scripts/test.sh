#!/usr/bin/env bash
# The README's second command: set up everything the tests need, then run them.
# The real parts (scripts/services.sh: trainer environments, container images, the four-node test
# Slurm cluster, PostgreSQL, GlusterFS, Chromium) are started as root or found running; under CI=true
# one that does not start fails the run before any test, naming it and why, and a test that skips
# fails too, but a GPU-only one for its GPU reason (tests/ci_skips.py). Elsewhere their tests skip,
# loudly. Runs side by side share the parts: the last to end stops what a test.sh started.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
source "$ROOT/scripts/services.sh"
stop_parts_at_exit  # however the run ends (exit, SIGTERM, SIGHUP, SIGINT): lets go of the parts
start_parts || exit 1
status=0
python -m pytest -ra "$@" || status=$?
exit $status
