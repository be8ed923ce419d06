"""What the launcher tells the user: the submission report, and following a sweep to its end.

A submission prints only its report: rich's tables (a dry run's), its progress bar and the
commands (wait=true's) are imported where they are drawn, not at the top (~0.1 s of wall time
of every launch under load; issue 36, item 6).
"""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from rich.console import Console

from orchestrator.store import queries
from orchestrator import runstate
from orchestrator.launch import tracking
from orchestrator.report.labels import hardware_label, hardware_order
from orchestrator.store.sql_adapters import Rows
from orchestrator.setting_registry import ALWAYS, SETTINGS, input_note

if TYPE_CHECKING:
    from sqlalchemy.orm import sessionmaker

    from orchestrator.launch.submit import Options, SubmitReport

console = Console(highlight=False)


#: A cell's refusal is `<framework>/<model>/<dataset>: <problem>` (cell.CellError).
_WHERE = re.compile(r"([^\s:/]+/[^\s:/]+/[^\s:/]+): (.+)", re.S)
#: A group of refused cells names this many of them by their override lines.
FIRST = 2


def group_refusals(refused: list[tuple[str, str]]) -> list[tuple[str, list[tuple[str, str]]]]:
    """(problem, [(framework/model/dataset, override line)]) for each distinct problem, in the order
    first met: a grid refuses many cells for one reason (a framework on a GPU it cannot use)."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for overrides, reason in refused:
        match = _WHERE.fullmatch(reason)
        where, problem = match.groups() if match else ("", reason)
        groups.setdefault(problem, []).append((where, overrides))
    return list(groups.items())


def print_refused(refused: list[tuple[str, str]], limit: Optional[int] = None,
                  label: str = "[red]refused[/red]") -> None:
    """One line per reason: the cell where it is one, else the count and the first cells."""
    groups = group_refusals(refused)
    for problem, cells in groups[:limit]:
        if len(cells) == 1:
            where, overrides = cells[0]
            console.print(f"{label} {where + ': ' if where else ''}{problem}  [dim]({overrides})[/dim]")
            continue
        first = "; ".join(f"{where} {overrides}".strip() for where, overrides in cells[:FIRST])
        more = f"; and {len(cells) - FIRST:,} more" if len(cells) > FIRST else ""
        console.print(f"{label} {len(cells):,} cells: {problem}  [dim]({first}{more})[/dim]")
    if limit is not None and len(groups) > limit:
        console.print(f"... and {len(groups) - limit:,} more reasons ({len(refused):,} refused in all: "
                      f"dry_run=true lists every cell of the sweep and why)", markup=False)


#: Up to this many cells, a dry run draws them as a table; beyond, as aligned plain lines (rich
#: draws 1,000 rows in seconds).
TABLE_ROWS = 60


def print_cells(cells: list, refused: list[tuple[str, str]],
                refused_settings: dict[str, dict] | None = None) -> None:
    """dry_run=true: the cells a sweep expands to, as a table, then how many there are on each
    hardware configuration (to run and refused), then each refused cell and why; nothing is
    submitted."""
    title = f"{len(cells)} cells (dry run: nothing submitted)"
    # a setting hashed only in some cells (accuracy mode's, one away from its default) is shown
    # only where a cell has it
    shown = [s.name for s in SETTINGS
             if s.hashed == ALWAYS or any(c.settings.get(s.name) not in (None, s.default) for c in cells)]
    notes = [input_note(cell.settings) for cell in cells]  # "ran at 224x224": an ImageNet network on CIFAR-10
    rows = [[cell.id, *(str(cell.settings[k]) for k in shown), *([note] if any(notes) else []),
             *time_limit(cell.config["hardware"])] for cell, note in zip(cells, notes)]
    shown += [*(["input"] if any(notes) else []), "limit", "limit from"]
    if len(rows) <= TABLE_ROWS:
        from rich.table import Table  # lazy: only a dry run draws a table
        table = Table("cell", *shown, title=title)
        for row in rows:
            table.add_row(*row)
        console.print(table)
    else:  # a long grid: aligned plain lines, which a terminal, grep and a pipe all take at once
        header = ["cell", *shown]
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        lines = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
        console.file.write("\n".join(lines) + "\n")
        console.file.flush()
    if refused_settings is not None:
        print_by_hardware(cells, refused, refused_settings)
    print_refused(refused)


def time_limit(hardware: dict) -> tuple[str, str]:
    """A cell's time limit as the dry run shows it (`15 min (--time-min 9)`) and where it came
    from (time_limits.learn: the same cell's runs, similar cells, the ceiling, or as set)."""
    limit = hardware.get("time_min")
    if limit is None:
        return "", ""
    floor = f" (--time-min {hardware['time_floor']})" if hardware.get("time_floor") else ""
    return f"{limit} min{floor}", str(hardware.get("time_source") or "")


def print_by_hardware(cells: list, refused: list[tuple[str, str]], refused_settings: dict[str, dict]) -> None:
    """The sweep's cells counted by hardware configuration (hardware × gpus, and threads where one
    hardware × gpus has several, as a preset's CPU thread counts): to run, refused."""
    counts: dict[tuple, list[int]] = {}
    placed = [(c.settings, 0) for c in cells] + [(refused_settings.get(o) or {}, 1) for o, _ in refused]
    threads: dict[tuple, set] = {}
    for settings, _ in placed:
        threads.setdefault((settings.get("hardware"), settings.get("gpus")), set()).add(settings.get("threads"))
    for settings, column in placed:
        hw = (settings.get("hardware"), settings.get("gpus"))
        config = (*hw, settings.get("threads") if len(threads[hw]) > 1 else None)
        counts.setdefault(hardware_order(*config), [0, 0, hardware_label(*config)])[column] += 1
    total = len(cells) + len(refused)
    from rich import box  # lazy: only a dry run draws a table
    from rich.table import Table
    table = Table("hardware", "cells", "to run", "cannot be placed", box=box.SIMPLE_HEAD)
    for _, (run, no, label) in sorted(counts.items()):
        table.add_row(label, str(run + no), str(run), str(no or ""))
    table.add_row("all", str(total), str(len(cells)), str(len(refused) or ""), style="bold")
    console.print(f"{total} cells by hardware: {len(cells)} to run"
                  + (f", {len(refused)} cannot be placed (below, by reason)" if refused else ""))
    console.print(table)


def print_left_out(cells: list) -> None:
    """Cells a preset's sweep left out (threads beyond the node's CPUs), said once."""
    shown = ", ".join(sorted({f"threads={c.settings['threads']} on {c.settings['hardware']}" for c in cells}))
    console.print(f"[yellow]note[/yellow] {len(cells)} cell(s) left out: more threads than the node's CPUs "
                  f"({shown})")


#: A submission report names at most this many cells of each kind (refused, skipped, not
#: submitted), then counts the rest: a retyped sweep of 1,000 done cells is one summary, not
#: 1,000 lines (which rich took 0.4 s to draw).
SHOWN = 10
#: What a skipped cell's reason starts with (launch._plan_runs), for the summary's counts.
SKIP_KINDS = (("already done", "done"), ("in flight", "in flight"), ("interrupted submission", "interrupted"))


def print_submit_report(report: "SubmitReport", opts: "Options") -> None:
    for note in report.notes:
        console.print(f"[yellow]note[/yellow] {note}")
    print_refused(report.refused, limit=SHOWN)
    for cell, reason in report.skipped[:SHOWN]:
        console.print(f"[yellow]skipped[/yellow] {cell.id} {cell.label}: {reason} (force=true runs it again)")
    kinds = {label: sum(text in reason for _, reason in report.skipped) for text, label in SKIP_KINDS}
    _print_more(len(report.skipped), "skipped", "force=true runs them again; "
                + ", ".join(f"{n:,} {label}" for label, n in kinds.items() if n))
    for cell, error in report.failed[:SHOWN]:
        console.print(f"[red]not submitted[/red] {cell.id} {cell.label}: {error}")
    _print_more(len(report.failed), "not submitted", "the same way; orchestrator status --failed lists them")
    runs = sum(n for _, _, n in report.submitted)
    console.print(f"sweep [bold]{report.sweep_id}[/bold]: {len(report.submitted)} cells submitted "
                  f"({runs} runs) to {opts.cluster.get('executor', 'local')}, {len(report.skipped)} skipped, "
                  f"{len(report.refused)} refused, {len(report.failed)} not submitted")
    if report.submitted and not opts.wait:
        console.print(f"follow it with: orchestrator status --sweep {report.sweep_id}; "
                      f"then: orchestrator collect && orchestrator results --sweep {report.sweep_id}")


def _print_more(total: int, kind: str, hint: str) -> None:
    """The cells of a kind beyond the SHOWN named, counted."""
    if total > SHOWN:
        console.print(f"... and {total - SHOWN:,} more {kind} ({total:,} in all: {hint})", markup=False)


def follow(sweep_id: str, opts: "Options", factory: "sessionmaker", poll_s: float = 2.0) -> dict[str, int]:
    """A progress bar over the sweep's repeats (their latest attempts) until none is open, read
    through the launch's database handle (`factory`)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # lazy: wait=true
    backends = {opts.backend.name: opts.backend}  # one instance: it counts polls without an answer
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[states]}"), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task(f"sweep {sweep_id}", total=None, states="")
        while True:
            with factory() as session:
                rows = Rows.of(session)
                report = tracking.reconcile(rows, sweep_id, backends)
                counts: dict[str, int] = {}
                for c in queries.latest_counts(rows, [sweep_id]):
                    counts[c.state] = counts.get(c.state, 0) + c.n
            finished = sum(counts.get(s, 0) for s in runstate.FINAL)
            silent = " | ".join(report.messages())
            bar.update(task, total=sum(counts.values()), completed=finished,
                       states=" ".join(f"{k}={v}" for k, v in sorted(counts.items()))
                       + (f"  [yellow]{silent}[/]" if silent else ""))
            if finished == sum(counts.values()):
                return counts
            time.sleep(poll_s)


def follow_and_collect(sweep_id: str, opts: "Options", factory: "sessionmaker") -> None:
    """wait=true: follow the jobs, collect their results, print the sweep's table; all through the
    launch's one database handle (`factory`)."""
    follow(sweep_id, opts, factory)
    collect_and_show(factory, opts.db_url, Path(opts.runs), sweep_id)


def collect_and_show(factory: "sessionmaker", db_url: str, runs: Path, sweep_id: str) -> None:
    """After a sweep's runs ended: their result files under `runs` collected, the sweep's results
    and where its runs stand, as `collect`, `results --sweep` and `status --sweep` print them
    (each problem said in one line, as those commands say it, naming `db_url`), through the
    launch's database handle (`factory`): the launch opened its database once."""
    from orchestrator.commands import collect, results, status  # lazy: only wait=true and a foreground run
    from orchestrator.commands.common import answer
    from orchestrator.commands.render import console as command_console
    out = command_console()
    answer(lambda: collect.collect(factory, runs, out), db_url)
    answer(lambda: results.results(factory, out, sweep_id), db_url)
    answer(lambda: status.status(factory, out, sweep_id), db_url)
