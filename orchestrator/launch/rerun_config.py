"""What a rerun submits: the recorded cell, on the caller's own site configuration.

A sweep records each cell's resolved config in the database (`sweep_cells.config`), so that a
rerun measures the same thing. But the database is shared: whoever can write one of its rows
(another user, a compromised account, a copied database) could plant `cluster.setup: ["rm -rf
~"]` there, and the next user's `rerun --failed` would run it in that user's jobs. So nothing
recorded is ever taken as a command, a module or a path. The sections that reach a shell, a batch
script or a path (SITE: `cluster` with its setup lines, python and sbatch options; `paths`;
`apptainer`; and `dataset.dir`) are dropped from the record and taken from the caller's own
composition of conf/ with the caller's overrides, as a new sweep would make them (the recorded
cluster's, dataset's and framework's `name` only choose the caller's file of that group, as plain
names). The framework section (its trainer module is imported and run, its env names the recipe
built) is the caller's too, and the record must agree with it (RUNNABLE). `runtime`, a closed
choice that changes the measurement, is the record's, checked against its choices. The rest (the
settings, `model`, `hardware`, `retry`, `monitor` ...) is the measurement and its request, kept,
and checked as a new sweep checks a cell (orchestrator/sweep/cell.py: names, integers; submit_options.Options;
the backend's sbatch policy; the limits time_limits computed); it must still make the recorded
cell (the same id), or it is refused with the way out.
"""
from __future__ import annotations

import copy
from typing import Any, Mapping, Optional, Sequence

from orchestrator.sweep import config_checks, time_limits
from orchestrator.sweep.cell import Cell, CellError, resolved_config
from orchestrator.store.db import COMMANDS_OWN
from orchestrator.launch.submit_options import Options, check_request

#: The config sections a rerun always takes from the caller's composition, never from the record.
SITE = ("cluster", "paths", "apptainer")
#: Recorded values a rerun would import or run (the trainer's module, the environment's recipe):
#: the caller's composition names them (an override of these keys), and the record must agree.
RUNNABLE = ("framework.trainer", "framework.env")
#: The override keys a rerun accepts: those under a site section (their first dotted part), and
#: Hydra's search path (a site's own conf dir), never another `hydra.` key (its run and sweep dirs).
OVERRIDABLE = (*SITE, "hydra.searchpath")
#: How to type the site options, in a refusal.
SITE_WAY_OUT = ("a rerun takes only your site's options (cluster=NAME, cluster.KEY=, paths.data=, apptainer.KEY=, "
                "+framework.env=, +framework.trainer=, hydra.searchpath=); the cell's own settings (runtime "
                "included) are its sweep's: type the sweep again with KEY=VALUE, or use --time / --mem")


def rerecorded(rerun: Mapping[str, Any], record: Any) -> dict[str, Any]:
    """What a rerun writes over its sweep's record of the cell (the config a next rerun doubles):
    the rerun's cell config with the record's own site sections (SITE), never the caller's. A
    rerun never reads them back (it takes the caller's), status reads the recorded `cluster`
    (tracking: the sweep's backend settings), and the caller's may hold a secret (`cluster.setup`
    exporting a token) that every user of a shared database could read in another's record."""
    kept = {key: value for key, value in record.items() if key in SITE} if isinstance(record, Mapping) else {}
    return {**{key: value for key, value in rerun.items() if key not in SITE}, **kept}


def check_overrides(overrides: list[str]) -> list[str]:
    """The caller's overrides, each a site option (OVERRIDABLE, RUNNABLE); ConfigError naming the first that is not."""
    for item in overrides:
        refusal = _not_site(item)
        if refusal:
            raise refusal
    return list(overrides)


def site_only(overrides: Sequence[str]) -> list[str]:
    """A launch's overrides (the follow-up job's, orchestrator/launch/retry.py), less the cell's own
    settings and what the rerun command sets itself: the site options its rerun runs on."""
    return [item for item in overrides if _not_site(item) is None]


def _not_site(item: str) -> Optional[config_checks.ConfigError]:
    """Why `item` is not an override a rerun takes; None where it is."""
    key, _, value = item.lstrip("+~").partition("=")
    if key in COMMANDS_OWN:
        return config_checks.refuse(key, value, "is the rerun command's own", f"use {COMMANDS_OWN[key]}")
    if not (key.split(".")[0] in OVERRIDABLE or key in OVERRIDABLE or key in RUNNABLE) or "=" not in item:
        return config_checks.refuse(key, value, "is not a site option a rerun takes", SITE_WAY_OUT)
    return None


class Site:
    """The caller's composition of conf/ with their overrides (one per cluster and dataset choice,
    composed once), and the database and runs folder of the command itself."""

    def __init__(self, overrides: list[str], db_url: str, runs: str) -> None:
        self.overrides = check_overrides(overrides)
        self.db_url, self.runs = db_url, runs
        self._composed: dict[tuple[str, ...], Any] = {}
        self.cluster_chosen = next((o.partition("=")[2] for o in self.overrides if o.startswith("cluster=")), None)

    def composed(self, cluster: str, dataset: str, framework: str) -> dict[str, Any]:
        """The caller's config with these group choices, resolved to plain data (CellError where it
        does not compose: the line says which override or file)."""
        key = (cluster, dataset, framework)
        if key not in self._composed:
            # lazy: Hydra's compose only where a rerun submits (`status` and --help start without it)
            from hydra import compose, initialize_config_dir

            choices = [f"cluster={cluster}", f"dataset={dataset}", f"framework={framework}"]
            try:
                with initialize_config_dir(version_base="1.3", config_dir=str(config_checks.CONF), job_name="rerun"):
                    cfg = compose("config", overrides=[*choices, *self.overrides])
            except Exception as exc:  # Hydra's MissingConfigException, OverrideParseException ...
                raise CellError(f"your configuration does not compose with {' '.join(choices)} "
                                f"({str(exc).splitlines()[0]}); fix the override it names, or choose your "
                                f"site's cluster with cluster=NAME") from None
            plain = resolved_config(cfg)
            plain["paths"].update(db=self.db_url, runs=self.runs)  # the command's own (--db, --runs)
            self._composed[key] = plain
        return self._composed[key]

    def rebuilt(self, recorded: dict[str, Any], cell_id: str, time_min: Optional[int] = None,
                mem_gb: Optional[int] = None) -> Cell:
        """The recorded cell on this site: a new config (the record is never changed), its site
        sections the caller's, checked as a new sweep's cell; CellError naming what is wrong."""
        config = _measurement(recorded)
        cluster = self.cluster_chosen or _recorded_name(recorded, "cluster")
        site = self.composed(config_checks.choice("cluster", cluster), _recorded_name(recorded, "dataset"),
                             _recorded_name(recorded, "framework"))
        config.update({key: copy.deepcopy(site[key]) for key in SITE})
        config["runtime"] = config_checks.one_of("runtime", recorded.get("runtime", "venv"), config_checks.RUNTIMES)
        config["framework"] = _runnable(config["framework"], site["framework"])
        config["dataset"]["dir"] = _same_data(recorded["dataset"].get("dir"), site["dataset"].get("dir"))
        if time_min:
            config["hardware"].update(time_min=int(time_min), time_floor=None, time_source="rerun --time")
        if mem_gb:
            config["hardware"]["mem_gb"] = int(mem_gb)
        _check_learned(config["hardware"])
        try:
            cell = Cell.from_plain(config, tuple(self.overrides))  # a follow-up it brings carries them
            check_request(Options.from_config(config).backend, cell.config, cell.label)
            time_limits.options(config)  # as a new sweep's: a rerun of it may learn again
        except config_checks.ConfigError as exc:
            raise CellError(str(exc)) from None
        if cell.id != cell_id:
            raise CellError(f"its recorded config makes cell {cell.id} here, not {cell_id} (a default of conf/ "
                            f"changed since its sweep); type the sweep again")
        return cell


def _measurement(recorded: Any) -> dict[str, Any]:
    """A copy of a recorded config without its site sections (dropped, never read)."""
    if not isinstance(recorded, dict) or not all(isinstance(recorded.get(g), dict) for g in config_checks.GROUPS):
        raise CellError("its recorded config is not a config of the groups "
                        f"{', '.join(config_checks.GROUPS)}; type its sweep again")
    return copy.deepcopy({key: value for key, value in recorded.items() if key not in SITE})


def _runnable(recorded: dict[str, Any], yours: dict[str, Any]) -> dict[str, Any]:
    """The framework section a rerun runs: the caller's (its trainer module is imported and run,
    its env names the recipe built), refused where the record's differs (another trainer or
    environment would measure something else)."""
    for key in RUNNABLE:
        field = key.partition(".")[2]
        if recorded.get(field) != yours.get(field):
            # the recorded value is not shown: whoever writes the database chose it, for a user to copy
            raise CellError(f"its sweep ran another {key} (recorded) than your configuration names "
                            f"({yours.get(field)!r}); a rerun imports and runs only what yours names: type "
                            f"+{key}=NAME with the one its sweep was launched with, or type its sweep again")
    return copy.deepcopy(yours)


def _same_data(recorded: Any, yours: Any) -> Any:
    """The caller's data folder, where it is the one the sweep read (compared, never opened):
    other data would be another measurement."""
    if recorded != yours:
        raise CellError(f"its sweep read its data from {recorded!r} (recorded), your configuration from "
                        f"{yours!r}; type paths.data=DIR for the same data, or type its sweep again")
    return yours


def _check_learned(hardware: dict[str, Any]) -> None:
    """The values time_limits computed and the sweep recorded (`time_floor`: sbatch's --time-min,
    `time_source`: what `rerun` prints), checked as time_limits makes them: a floor a whole number
    of minutes from 1 to the cell's limit (`time_min`, itself checked by Cell.from_plain), a
    source one line of text."""
    limit = hardware.get("time_min")
    if hardware.get("time_floor") is not None:
        config_checks.integer("hardware.time_floor", hardware["time_floor"], 1,
                              limit if isinstance(limit, int) and limit >= 1 else 1,
                              "a floor time_limits never makes (recorded); type its sweep again")
    if hardware.get("time_source") is not None:
        config_checks.one_line("hardware.time_source", hardware["time_source"], "type its sweep again")


def _recorded_name(recorded: dict[str, Any], group: str) -> str:
    """A recorded group's `name`, as the choice that names the caller's file of that group."""
    try:
        return config_checks.choice(group, recorded[group].get("name"))
    except config_checks.ConfigError as exc:
        raise CellError(f"{exc} (recorded)") from None
