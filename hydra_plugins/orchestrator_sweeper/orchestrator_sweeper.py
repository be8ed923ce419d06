"""The project's Hydra sweeper: Hydra's basic sweeper, without composing every cell to check it.

Hydra's `BasicSweeper` expands the grid (`framework=caffe,tf seed=range(0,500)`, the
`hydra.sweeper.params` of a preset) and then, before launching, composes every cell's config
once to check that it can be composed — which the launcher then does again. On a 1,000-cell
sweep that check was half the submission's time. Our launcher composes each *distinct*
configuration once (orchestrator/sweep/expand.py) through Hydra's own loader, so a wrong name still
fails there with Hydra's message and its list of choices, before anything is written; this
sweeper only leaves out the second composition. Everything else (the grammar of sweeps,
`params`, `max_batch_size`) is Hydra's.

Selected by the project's config (`override hydra/sweeper: orchestrator`).
"""
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore

from orchestrator import private_files


@dataclass
class OrchestratorSweeperConf:
    _target_: str = "hydra_plugins.orchestrator_sweeper.orchestrator_sweeper.OrchestratorSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = field(default=None)


ConfigStore.instance().store(group="hydra/sweeper", name="orchestrator", node=OrchestratorSweeperConf,
                             provider="orchestrator")


class OrchestratorSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Checked by the launcher as it expands the batch (one composition per distinct
        configuration, Hydra's errors unchanged), not by composing every cell here first."""

    def sweep(self, arguments: List[str]) -> Any:
        """Hydra's sweep, whose `multirun.yaml` (the config and the overrides typed: a `paths.db=`
        URL with its password) is made 0600 before Hydra writes it: Hydra truncates the file,
        which keeps its mode (orchestrator/private_files.py)."""
        folder = Path(self.config.hydra.sweep.dir)
        folder.mkdir(parents=True, exist_ok=True)
        private_files.keep_private(folder / "multirun.yaml")
        return super().sweep(arguments)
