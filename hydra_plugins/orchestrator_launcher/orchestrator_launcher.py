"""The project's Hydra launcher: submit one job per cell and return without waiting.

hydra-submitit-launcher blocks until every job ends, which ties a user's login shell to a
two-week sweep. This launcher resolves each of the sweeper's override lists into a cell,
refuses the cells no hardware can hold (naming them and why), and hands the rest to
`orchestrator.submit.submit_sweep`, which records everything in the DB and submits. With
`wait=true` it then follows the jobs with a progress bar and collects their results.

Selected by the project's config (`override hydra/launcher: orchestrator`); Hydra finds it
because it lives in the `hydra_plugins` namespace package.
"""
import logging
import sys
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
        from orchestrator import launcher_output, config_checks
        from orchestrator.cell import Cell, CellError
        from orchestrator.dataset_files import missing_files
        from orchestrator.expand import Expander
        from orchestrator.submit import Options, check_request, learn_time_limits, refusal_settings, submit_sweep

        assert self.config is not None and self.hydra_context is not None
        cells, refused, options, seen = [], [], None, set()
        refused_settings, left_out = {}, []  # a refused cell's settings, for the DB and the counts
        unready = []  # a dry run's cells whose dataset files are not there yet
        expander = Expander(self.hydra_context.config_loader, self.config)
        # A bad value of one cell refuses that cell; a sweep-wide one (repeats, paths, cluster, the
        # database) stops the sweep with its message before anything is written.
        with config_checks.stop_on_bad_input():
            for expanded in expander.expand(job_overrides, initial_job_idx):
                overrides = expanded.overrides
                try:
                    if expanded.error:
                        raise CellError(expanded.error)
                    cell = Cell.from_plain(expanded.plain, overrides)  # its choices: checked by the expander
                    if options is None:
                        options = Options.from_config(cell.config)
                    check_request(options.backend, cell.config, cell.label)
                    missing = missing_files(cell.config["dataset"])
                    if missing and options.dry_run:  # placed, but a submission would refuse it now
                        unready.append((" ".join(overrides), f"{cell.where}: {missing}"))
                    elif missing:
                        raise CellError(f"{cell.where}: {missing}")
                except CellError as exc:
                    refused.append((" ".join(overrides), str(exc)))
                    refused_settings[" ".join(overrides)] = refusal_settings(expanded.as_config())
                    continue
                if _beyond_cpus(cell):  # a preset's threads sweep stops at the node's CPUs
                    left_out.append(cell)
                    continue
                if cell.id not in seen:  # two spellings of one cell (tf, tensorflow)
                    seen.add(cell.id)
                    cells.append(cell)
            log.debug("expanded %d cells: %d compositions, %d on Hydra's path", len(job_overrides),
                      len(expander.composed), expander.slow)

            if not cells:
                launcher_output.print_refused(refused)
                raise SystemExit(f"no cell of this sweep can be placed ({len(refused)} refused); "
                                 f"nothing was submitted")
            if left_out:
                launcher_output.print_left_out(left_out)
            if options.dry_run:
                config_checks.check_database(options.db_url)
                launcher_output.print_cells(learn_time_limits(cells, options),  # what each would ask for, and why
                                            refused, refused_settings)
                launcher_output.print_refused(unready, label="[yellow]needs data[/yellow] (a submission now refuses it)")
                return [JobReturn(overrides=list(o), status=JobStatus.COMPLETED) for o in job_overrides]
            report = submit_sweep(cells, options, argv=["python", "-m", "orchestrator", *sys.argv[1:]],
                                  refused=refused, refused_settings=refused_settings)
        launcher_output.print_submit_report(report, options)
        if options.wait and report.submitted:
            launcher_output.follow_and_collect(report.sweep_id, options)
        return [JobReturn(overrides=list(o), status=JobStatus.COMPLETED, _return_value=None)
                for o in job_overrides]


def _beyond_cpus(cell) -> bool:
    """A cell of a preset that sweeps threads up to the node's CPUs (`preset.threads_up_to_cpus`,
    conf/preset/threads.yaml) with more threads than its hardware's CPUs (this machine's, for
    hardware whose `cpus` is null): left out, not refused, since the sweep asked for no such cell."""
    import os

    preset = cell.config.get("preset") or {}
    if not preset.get("threads_up_to_cpus"):
        return False
    return cell.settings["threads"] > (cell.config["hardware"].get("cpus") or os.cpu_count() or 1)
