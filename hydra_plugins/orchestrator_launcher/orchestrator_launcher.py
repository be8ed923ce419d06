"""The project's Hydra launcher: submit one job per cell and return without waiting.

hydra-submitit-launcher blocks until every job ends, which ties a user's login shell to a
two-week sweep. This launcher resolves each of the sweeper's override lists into a cell,
and hands them to `orchestrator.front_door.launch` — the launch path the foreground run takes
too — which refuses the cells no hardware can hold (naming them and why), records everything in
the DB and submits. With `wait=true` it then follows the jobs with a progress bar and collects
their results.

Selected by the project's config (`override hydra/launcher: orchestrator`); Hydra finds it
because it lives in the `hydra_plugins` namespace package.
"""
import logging
from dataclasses import dataclass
from typing import Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

log = logging.getLogger(__name__)


@dataclass
class OrchestratorLauncherConf:
    _target_: str = "hydra_plugins.orchestrator_launcher.orchestrator_launcher.OrchestratorLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="orchestrator", node=OrchestratorLauncherConf,
                             provider="orchestrator")


class OrchestratorLauncher(Launcher):
    def __init__(self) -> None:
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        # lazy: the orchestrator's modules only where a sweep is launched (Hydra imports every plugin)
        from orchestrator import front_door
        from orchestrator.sweep.expand import Expander
        from orchestrator.launch.rerun_config import site_only

        assert self.config is not None and self.hydra_context is not None
        expander = Expander(self.hydra_context.config_loader, self.config)
        # Hydra's overrides of the launch that a rerun takes (hydra.searchpath: a site's own conf dir) go with
        # each cell's, so the follow-up job of retry.timeout composes the same site (orchestrator/launch/retry.py)
        carried = tuple(site_only(list(self.config.hydra.overrides.hydra)))
        checked: dict = {}  # the group mappings whose checks passed (cell.resolve_settings), for this launch
        front_door.launch(_asked(expanded, carried, checked)
                          for expanded in expander.expand(job_overrides, initial_job_idx))
        log.debug("expanded %d cells: %d compositions, %d on Hydra's path", len(job_overrides),
                  len(expander.composed), expander.slow)
        return [JobReturn(overrides=list(o), status=JobStatus.COMPLETED, _return_value=None)
                for o in job_overrides]


def _asked(expanded, carried=(), checked=None):
    """One expanded override list as the front door takes it: its choices were checked where the
    expander composed it, so the cell is made from its plain config."""
    from orchestrator.sweep.cell import Cell, CellError
    from orchestrator.front_door import Asked

    def resolve():
        if expanded.error:
            raise CellError(expanded.error)
        return Cell.from_plain(expanded.plain, (*expanded.overrides, *carried), checked)

    return Asked(" ".join(expanded.overrides), resolve, expanded.as_config)
