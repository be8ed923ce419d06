"""A framework's declaration, as the orchestrator reads it when it expands a sweep.

The framework YAML names its trainer module (`trainer:`, default `trainers.<name>`); that
module declares SUPPORT (trainers/common/support.py), the very record the trainer enforces
at run time. Only that light module is imported here, never the framework itself.
"""
from __future__ import annotations

import functools
from typing import Any

from trainers.common.support import Support, declared


def trainer_module(framework: dict[str, Any]) -> str:
    return framework.get("trainer") or f"trainers.{framework['name']}"


@functools.lru_cache(maxsize=None)
def _declared(module: str) -> Support:
    return declared(module)


def support(framework: dict[str, Any]) -> Support:
    """The Support the framework's trainer module declares; ValueError naming why not."""
    module = trainer_module(framework)
    try:
        return _declared(module)
    except ImportError as exc:
        raise ValueError(f"framework {framework['name']}: cannot import its trainer module "
                         f"{module} to read what it supports: {exc}") from exc
