"""What the launcher tells the user: the submission report, and following a sweep to its end."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from orchestrator.launch import Options, SubmitReport

console = Console(highlight=False)


def print_refused(refused: list[tuple[str, str]]) -> None:
    for overrides, reason in refused:
        console.print(f"[red]refused[/red] {reason}  [dim]({overrides})[/dim]")


def print_cells(cells: list, refused: list[tuple[str, str]]) -> None:
    """dry_run=true: the cells a sweep expands to, as a table; nothing is submitted."""
    from rich.table import Table

    from orchestrator.cell import SETTINGS

    table = Table("cell", *SETTINGS, title=f"{len(cells)} cells (dry run: nothing submitted)")
    for cell in cells:
        table.add_row(cell.id, *(str(cell.settings[k]) for k in SETTINGS))
    console.print(table)
    print_refused(refused)


def print_submit_report(report: "SubmitReport", opts: "Options") -> None:
    for note in report.notes:
        console.print(f"[yellow]note[/yellow] {note}")
    print_refused(report.refused)
    for cell, reason in report.skipped:
        console.print(f"[yellow]skipped[/yellow] {cell.id} {cell.label}: {reason} (force=true runs it again)")
    for cell, error in report.failed:
        console.print(f"[red]not submitted[/red] {cell.id} {cell.label}: {error}")
    runs = sum(n for _, _, n in report.submitted)
    console.print(f"sweep [bold]{report.sweep_id}[/bold]: {len(report.submitted)} cells submitted "
                  f"({runs} runs) to {opts.cluster.get('executor', 'local')}, {len(report.skipped)} skipped, "
                  f"{len(report.refused)} refused, {len(report.failed)} not submitted")
    if report.submitted and not opts.wait:
        console.print(f"follow it with: orchestrator status --sweep {report.sweep_id}; "
                      f"then: orchestrator collect && orchestrator results --sweep {report.sweep_id}")


def follow(sweep_id: str, opts: "Options", poll_s: float = 2.0) -> dict[str, int]:
    """A progress bar over the sweep's repeats (their latest attempts) until none is open."""
    from sqlalchemy import func, select

    from orchestrator import db, runstate, tracking

    factory = db.open_db(opts.db_url)
    backends = {opts.backend.name: opts.backend}  # one instance: it counts polls without an answer
    latest = db.latest_runs()
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[states]}"), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task(f"sweep {sweep_id}", total=None, states="")
        while True:
            with factory() as session:
                report = tracking.reconcile(session, sweep_id, backends)
                counts = dict(session.execute(
                    select(latest.c.state, func.count()).where(latest.c.sweep_id == sweep_id)
                    .group_by(latest.c.state)).all())
            finished = sum(counts.get(s, 0) for s in runstate.FINAL)
            silent = " | ".join(report.messages())
            bar.update(task, total=sum(counts.values()), completed=finished,
                       states=" ".join(f"{k}={v}" for k, v in sorted(counts.items()))
                       + (f"  [yellow]{silent}[/]" if silent else ""))
            if finished == sum(counts.values()):
                return counts
            time.sleep(poll_s)


def follow_and_collect(sweep_id: str, opts: "Options") -> None:
    """wait=true: follow the jobs, collect their results, print the sweep's table."""
    from orchestrator import cli

    follow(sweep_id, opts)
    args = ["--db", opts.db_url, "--runs", str(opts.runs)]
    cli.main(args + ["collect"])
    cli.main(args + ["results", "--sweep", sweep_id])
    cli.main(args + ["status", "--sweep", sweep_id])
