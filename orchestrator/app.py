"""The Hydra entry point: `python -m orchestrator [-m] key=value ...`.

With `-m`, Hydra's sweeper expands the grid and the project's launcher submits the cells
(hydra_plugins/orchestrator_launcher) — this task function is not called then. Without `-m`,
the one composed cell runs here in the foreground, through the same job code, and is collected
at once: the way to debug a trainer (`dry_run=true` lists it instead). Its bad values are refused
as the launcher refuses them, in the same words, before anything is written.
"""
from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from orchestrator.expand import share_loaded_configs

share_loaded_configs()  # before Hydra's first composition: every one then reads each file once
CONF = str(Path(__file__).resolve().parent.parent / "conf")


@hydra.main(version_base="1.3", config_path=CONF, config_name="config")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from orchestrator import cli, console, safety
    from orchestrator.cell import Cell, CellError
    from orchestrator.launch import Options, submit_sweep

    # as the launcher does for each cell of a sweep: the cell's bad values refuse it, and
    # sweep-wide ones (paths, cluster, the database) stop here, before anything is written
    with safety.stop_on_bad_input():
        try:
            cell = Cell.from_config(cfg, choices=HydraConfig.get().runtime.choices)
            opts = Options.from_config(cell.config)
            safety.check_request(opts.backend, cell.config, cell.label)
        except CellError as exc:
            raise SystemExit(f"refused: {exc}") from None
        if opts.dry_run:
            safety.check_database(opts.db_url)
            console.print_cells([cell], [])
            return
        report = submit_sweep([cell], opts, argv=["python", "-m", "orchestrator", *sys.argv[1:]], foreground=True)
    console.print_submit_report(report, opts)
    if report.submitted:
        args = ["--db", opts.db_url, "--runs", str(opts.runs / report.sweep_id)]
        cli.main(args + ["collect"])
        cli.main(args + ["results", "--sweep", report.sweep_id])
        cli.main(args + ["status", "--sweep", report.sweep_id])
