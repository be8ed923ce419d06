"""The cells refused at expansion, recorded with their sweep: the override line, the reason, and
as much of the cell's settings as its composed config resolves, so that a report can name each
refused cell (`n/a`) and say why, beside the cells that ran.
"""
from __future__ import annotations

from typing import Any, Mapping

from omegaconf import DictConfig

from orchestrator.store import db, schema
from orchestrator import setting_registry


def refusal_settings(cfg: Any) -> dict[str, Any]:
    """A refused cell's settings as far as its composed config resolves, None where it does not:
    where a report puts the cell's `n/a` and its reason. The defaults are setting_registry's, read
    as expansion reads them (read_settings), from a config that may not resolve or check."""
    def get(key: str) -> Any:
        value = cfg
        try:
            for part in key.split("."):  # each node's get resolves its interpolations
                value = value.get(part) if isinstance(value, DictConfig) else None
        except Exception:  # a key that does not resolve is as good as unknown here
            return None
        return value if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None

    settings = setting_registry.read_settings(get)
    return {name: setting_registry.stored(name, value)
            if isinstance(value, setting_registry.BY_NAME[name].json_types) else None
            for name, value in settings.items()}


def refusal(sweep_id: str, overrides: str, reason: str, settings: Mapping[str, Any] | None) -> schema.Refusal:
    """A refused cell's record (no URL nor password in what a shared database keeps: db.recordable)."""
    settings, kept = dict(settings or {}), " ".join(db.recordable(overrides.split(" ")))
    return schema.Refusal(sweep_id=sweep_id, overrides=kept, reason=db.hide_passwords(reason), settings=settings or None,
                          **{key: settings.get(key) for key in setting_registry.HEADLINE})
