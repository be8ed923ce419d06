"""The Hydra entry point: `python -m orchestrator [-m] key=value ...`.

With `-m`, Hydra's sweeper expands the grid and the project's launcher submits the cells
(hydra_plugins/orchestrator_launcher) — this task function is not called then. Without `-m`,
the one composed cell runs here in the foreground, through the same job code, and is collected
at once: the way to debug a trainer.
"""
from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

CONF = str(Path(__file__).resolve().parent.parent / "conf")


@hydra.main(version_base="1.3", config_path=CONF, config_name="config")
def main(cfg: DictConfig) -> None:
    from orchestrator import cli, console
    from orchestrator.cell import Cell, CellError
    from orchestrator.launch import Options, submit_sweep

    try:
        cell = Cell.from_config(cfg)
    except CellError as exc:
        raise SystemExit(f"refused: {exc}")
    opts = Options.from_config(cell.config)
    report = submit_sweep([cell], opts, argv=["python", "-m", "orchestrator", *sys.argv[1:]], foreground=True)
    console.print_submit_report(report, opts)
    if report.submitted:
        args = ["--db", opts.db_url, "--runs", str(opts.runs / report.sweep_id)]
        cli.main(args + ["collect"])
        cli.main(args + ["results", "--sweep", report.sweep_id])
        cli.main(args + ["status", "--sweep", report.sweep_id])
