#!/usr/bin/env bash
# The README's first command: set up, then run a small local PyTorch sweep and print its results.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
orchestrator data generate mnist
python -m orchestrator -m framework=torch model=lenet,alexnet dataset=synthetic,mnist \
  iterations=20 warmup=5 wait=true "$@"
