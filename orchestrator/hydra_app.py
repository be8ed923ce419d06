"""The Hydra entry point: `python -m orchestrator [-m] key=value ...`.

With `-m`, Hydra's sweeper expands the grid and the project's launcher submits the cells
(hydra_plugins/orchestrator_launcher) — this task function is not called then. Without `-m`,
the one composed cell runs here in the foreground, through the same job code, and is collected
at once: the way to debug a trainer (`dry_run=true` lists it instead). It goes through the same
front door as a sweep (orchestrator/front_door.py): every input check, in the same words, before
anything is written.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import hydra
from hydra._internal.hydra import Hydra
from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from orchestrator.sweep.expand import share_loaded_configs



def skip_mode_composition(argv: list[str]) -> None:
    """With `-m`, Hydra 1.3 composes the whole primary config once only to read `hydra.mode`
    (Hydra.get_mode), then sweeps in multirun mode whatever it found (RUN: a warning, then
    MULTIRUN; unset, as in conf/: MULTIRUN). That composition decides nothing then, and costs a
    sweep ~0.07 s of its start: with `-m`, get_mode answers "unset" at once, and Hydra sets
    `hydra.mode=MULTIRUN` itself, as it does for our config. Without `-m` Hydra's own runs."""
    known, _ = get_args_parser().parse_known_args(argv)
    if not known.multirun or getattr(Hydra.get_mode, "skipped", False):
        return

    def get_mode(self: Hydra, config_name: Any, overrides: list[str]) -> None:
        return None

    get_mode.skipped = True  # type: ignore[attr-defined]
    Hydra.get_mode = get_mode  # type: ignore[method-assign]


share_loaded_configs()  # before Hydra's first composition: every one then reads each file once
skip_mode_composition(sys.argv[1:])
CONF = str(Path(__file__).resolve().parent.parent / "conf")


@hydra.main(version_base="1.3", config_path=CONF, config_name="config")
def main(cfg: DictConfig) -> None:
    # lazy: only a single run needs the launch path (SQLAlchemy, submitit); --help, --cfg and sweeps (the launcher plugin) never do
    from orchestrator import front_door
    from orchestrator.sweep.cell import Cell

    hydra_config = HydraConfig.get()
    front_door.launch([front_door.Asked(" ".join(hydra_config.overrides.task),
                                        lambda: Cell.from_config(cfg, choices=hydra_config.runtime.choices),
                                        lambda: cfg)],
                      foreground=True)
