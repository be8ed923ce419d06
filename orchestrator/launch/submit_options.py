"""A launch's sweep-wide options, read and checked from the first composed config, the report
of what a submission did, and the check of one cell's request as its scheduler will get it.

Parsing comes first and on its own: a bad sweep-wide value (paths, cluster, monitor bounds,
repeats, retry.timeout) ends the command with one line before anything is written, and every
later step (submit.py, rerun.py, front_door.py) is handed the parsed Options.
"""
from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Hashable

from orchestrator.sweep import config_checks
from orchestrator.launch import retry
from orchestrator.backends import Backend, backend_for, sbatch
from orchestrator.backends.base import FollowingUp, request, resources
from orchestrator.sweep.cell import Cell, CellError


@dataclass
class Options:
    """The sweep-wide settings of the first composed config (paths, cluster, controls)."""

    db_url: str
    runs: Path
    data: Path
    cache: Path
    cluster: dict[str, Any]
    runtime: dict[str, Any]
    monitor_period_s: float
    repeats: int
    force: bool
    wait: bool
    dry_run: bool = False
    #: `retry.timeout`: automatic retries of a timed-out repeat (orchestrator/launch/retry.py).
    retry_timeout: int = 0
    #: The scheduler's backend, made from `cluster` (orchestrator.backends).
    backend: Backend = field(init=False, repr=False)

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "Options":
        """The sweep-wide settings, each checked: a bad one raises config_checks.ConfigError naming the
        key, the value and the way out, before anything is written."""

        paths, apptainer, monitor = cfg["paths"], cfg.get("apptainer") or {}, cfg.get("monitor") or {}
        for key in ("db", "runs", "data", "cache"):
            config_checks.one_line(f"paths.{key}", paths.get(key), f"set ORCHESTRATOR_{key.upper()} or paths.{key}= to "
                            + ("a database URL such as sqlite:///results.db" if key == "db" else "a directory"))
        sbatch.check_cluster(cfg["cluster"])  # cluster.executor: checked by backend_for (__post_init__)
        for key in ("images", "binary"):
            config_checks.one_line(f"apptainer.{key}", apptainer.get(key), f"set apptainer.{key}= to "
                            + ("a directory of <framework>.sif images" if key == "images" else "a command name"))
        for key, (least, most) in config_checks.MONITOR_BOUNDS.items():
            if key in monitor:
                config_checks.number(f"monitor.{key}", monitor[key], least, maximum=most)
        cache = Path(paths["cache"]).expanduser().absolute()
        return cls(
            db_url=paths["db"],
            runs=Path(paths["runs"]).expanduser().absolute(),
            data=Path(paths["data"]).expanduser().absolute(),
            cache=cache,
            cluster=dict(cfg["cluster"]),
            runtime={"kind": config_checks.one_of("runtime", cfg.get("runtime", "venv"), config_checks.RUNTIMES),
                     "cache": str(cache), "images": str(Path(apptainer["images"]).expanduser().absolute()),
                     "binary": apptainer["binary"]},
            monitor_period_s=float(monitor.get("period_s", 0.1)),
            repeats=config_checks.integer("repeats", cfg.get("repeats", 1), 1, config_checks.MAX_REPEATS,
                                   f"use repeats=N (the runs of each cell, 1 to {config_checks.MAX_REPEATS})"),
            force=config_checks.boolean("force", cfg.get("force", False)),
            wait=config_checks.boolean("wait", cfg.get("wait", False)),
            dry_run=config_checks.boolean("dry_run", cfg.get("dry_run", False)),
            retry_timeout=retry.timeouts(cfg),
        )

    def __post_init__(self) -> None:
        self.backend = backend_for(self.cluster)
        if self.retry_timeout and not isinstance(self.backend, FollowingUp):
            raise config_checks.refuse(
                "retry.timeout", self.retry_timeout,
                f"needs a scheduler that starts a follow-up job once the sweep's jobs end (cluster=slurm); "
                f"cluster={self.cluster.get('name') or self.backend.name} has none",
                "drop retry.timeout and rerun timed-out cells with `orchestrator rerun --failed --class timeout`")


@dataclass
class SubmitReport:
    """What one submission did, cell by cell, for the launcher's output (launcher_output.py)."""

    sweep_id: str
    submitted: list[tuple[Cell, str, int]] = field(default_factory=list)  # cell, job id, runs
    skipped: list[tuple[Cell, str]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)          # overrides, reason
    failed: list[tuple[Cell, str]] = field(default_factory=list)          # submission errors
    notes: list[str] = field(default_factory=list)                        # said once, e.g. "not checked"


def new_sweep_id() -> str:
    """A sweep's id: when it was typed (sorts by time) and 4 random hex digits (two at once differ)."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def check_request(backend: Backend, config: dict[str, Any], label: str, checked: set[Hashable] | None = None) -> None:
    """A cell's request as its backend will hand it to the scheduler (on Slurm: every sbatch
    option, through sbatch.sbatch_request); a bad one refuses that cell only (CellError).
    `checked`: the requests (backends.base.request) that passed already, in this launch: equal
    requests give equal parameters, so each is derived and checked once, not once per cell."""
    try:
        asked = request(backend, config) if checked is not None else None
        if asked is None or asked not in checked:
            resources(backend, config)
            if checked is not None:
                checked.add(asked)
    except config_checks.ConfigError as exc:
        raise CellError(f"{label}: {exc}") from None
