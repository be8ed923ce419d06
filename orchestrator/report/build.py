"""`orchestrator report`: a set of sweeps' tables, figures and page, written into one directory.

    <out>/index.html                 the page (self-contained: figures embedded)
    <out>/tables/<metric>.csv, .md   one table per metric (tables.SPECS)
    <out>/tables/scaling_nodes.*     images/s and efficiency against nodes (where a sweep asked for nodes)
    <out>/tables/time_limits.*       each cell's requested time limit and the time its job used
    <out>/tables/builds.csv          each build of the cells that ran in several (builds.py), against the base build
    <out>/figures/<name>.svg, .png   each figure (figures.py)
    <out>/.report-files              the files above that this report wrote, one a line (MANIFEST)
    <out>/.report-lock               held while a report publishes (LOCK)

A report is drawn into a folder of its own inside <out> (`.report-new.*`: STAGING) and then
published, one report at a time (LOCK): the list first names the earlier report's files and this
one's, then each file is renamed into place, then the files the earlier one listed in its MANIFEST
and this one did not write (a section now empty, a figure no longer drawn) are removed and the list
names this one's alone. So
the directory never ships files that no longer describe the data, a report stopped while it draws
(killed, out of time) leaves the earlier one whole, and one stopped while it publishes leaves no file
unlisted for the next to remove. A file the report did not write (a user's own, or one of a report
from before the list existed) is never touched. A report killed before it publishes leaves its
STAGING folder behind (removing another's could pull files from under a report running beside it):
it holds nothing the page names, and may be removed by hand.
"""
from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Sequence

from orchestrator.metric_registry import MIN_EFFECT_PCT
from orchestrator.store import run_history
from orchestrator.report import (builds, drawing, figures, inference, page, query, scaling_table, speedup, table_files,
                                 tables, time_table)


@dataclass
class Report:
    """What a report wrote, and what it could not draw."""

    out: Path
    tables: list[Path] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    cells: int = 0

    @property
    def index(self) -> Path:
        return self.out / "index.html"


def write_report(session: Any, sweep_ids: Sequence[str], out: Path, noisy_cv: float) -> Report:
    """Reads the sweeps from the database and writes the report into `out` (made if needed;
    files of an earlier report there are replaced): drawn in a STAGING folder, then published."""
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=STAGING, dir=out))
    try:
        drafted = _draft(session, sweep_ids, staging, noisy_cv)
        with _publishing(out):
            return _publish(drafted, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # its own folder: empty once published


def _draft(session: Any, sweep_ids: Sequence[str], out: Path, noisy_cv: float) -> Report:
    """The report written into `out` (a STAGING folder). Everything is read first, then the session
    lets the database go (a commit: on a network file system that ends this host's turn of the
    lease) before anything is drawn or written: rendering keeps no other command waiting."""
    report = Report(out)
    all_tables = tables.from_db(session, sweep_ids, noisy_cv)
    by_name = {t.spec.metric.name: t for t in all_tables}
    speed = by_name["images_per_sec"]
    multi_node = any(e.settings["nodes"] > 1 for e in speed.entries)
    addrs = run_history.node_addrs(session, sweep_ids) if multi_node else None
    job_times, configs = query.job_times(session, sweep_ids), query.recorded_configs(session, sweep_ids)
    cores = run_history.cores(session, sweep_ids)
    about = (query.sweeps(session, sweep_ids), run_history.span(session, sweep_ids))
    provenance = run_history.provenance(session, sweep_ids)
    points = query.inference_points(session, sweep_ids)
    in_cases = builds.case_cells(speed.entries)
    repeats = query.values(session, sweep_ids, builds.SPEED) if in_cases else {}
    records = query.provenance_records(session, in_cases) if in_cases else {}
    found = builds.cases(speed.entries, repeats, records, MIN_EFFECT_PCT)
    session.commit()  # read: nothing below touches the database
    (out / "tables").mkdir(parents=True, exist_ok=True)
    for table in all_tables:
        name = table.spec.metric.name
        report.tables += [table_files.write_csv(table, out / "tables" / f"{name}.csv"),
                          table_files.write_markdown(table, out / "tables" / f"{name}.md")]
    nodes = None  # the node scaling series, where a sweep asked for more than one node
    if multi_node:
        nodes = speedup.node_scaling(speed.entries, addrs)
        report.tables += scaling_table.write(nodes, out / "tables")
    times = time_table.rows(speed, job_times, configs)
    report.tables += time_table.write(times, out / "tables")
    drawn, report.skipped = figures.write_all(speed, by_name["energy_per_image_j"], cores, nodes, out / "figures")
    if points:  # the latency-throughput figure and the per-batch table, where an inference cell was measured
        curve = drawing.draw_one(inference.latency_throughput, points, out / "figures")
        drawn, report.skipped = (drawn + [curve], report.skipped) if not isinstance(curve, str) else (
            drawn, report.skipped + [curve])
        report.tables.append(inference.write_csv(points, out / "tables" / "inference_by_batch.csv"))
    builds_html = _builds(report, found, out)
    report.figures += [p for f in drawn for p in (f.svg, f.png)]
    report.cells = len(by_name["images_per_sec"].entries)
    html = page.render(*about, all_tables, drawn, report.skipped, provenance, noisy_cv, nodes, times,
                       inference.table_html(points), builds_html)
    report.index.write_text(html, encoding="utf-8")
    return report


#: The list of the files a report wrote, in its directory: the only files a later report there removes.
MANIFEST = ".report-files"
#: The folders a report writes files into, and their suffixes: a MANIFEST entry outside them is left alone.
WRITTEN = {"tables": (".csv", ".md"), "figures": (".svg", ".png")}


#: The prefix of the folder a report is drawn in, inside its directory, before it is published.
STAGING = ".report-new."


#: The lock a report holds in its directory while it publishes (flock): two reports into one directory
#: publish one after the other, so the page, the files and the list are all one report's.
LOCK = ".report-lock"


@contextmanager
def _publishing(out: Path) -> Iterator[None]:
    """Holds LOCK (flock, exclusive) in `out` for the block. Publishing is renames, so a report beside
    this one waits that long, never for a drawing. Opened O_NOFOLLOW (a link left at its name is not
    followed), O_NONBLOCK (a FIFO there never waits for a writer) and for writing where it may be (NFS
    emulates flock by byte-range locks, and refuses an exclusive one on a read-only file: EBADF); nothing
    is written to it. Where it cannot be opened, is not a regular file or the file system has no flock,
    the block runs without it, as a report written in place did."""
    fd = _lock_file(out / LOCK)
    try:
        if fd >= 0:
            try:
                _take(fd, out)
            except OSError as exc:  # ENOLCK, EOPNOTSUPP, ENOSYS: no flock here; EBADF: a read-only one on NFS
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EBADF):
                    raise
        yield
    finally:
        if fd >= 0:
            os.close(fd)  # releases the flock


def _take(fd: int, out: Path) -> None:
    """The lock on `fd`, waited for with one line on stderr where another report holds it (one paused
    with Ctrl-Z while it publishes holds it until it goes on: the line says who to look for)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        print(f"waiting for another report publishing into {out} (it holds {out / LOCK})", file=sys.stderr,
              flush=True)
    fcntl.flock(fd, fcntl.LOCK_EX)


def _lock_file(path: Path) -> int:
    """A descriptor of the regular file at `path` (made if missing; read-write where allowed, else
    read-only), or -1 where there is none to lock."""
    flags = os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    for mode in (os.O_RDWR, os.O_RDONLY):
        try:
            fd = os.open(path, mode | flags, 0o644)
        except OSError:
            continue
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        os.close(fd)
        return -1
    return -1


def _publish(drafted: Report, out: Path) -> Report:
    """Moves the drafted report's files into `out` (renames: a reader sees each file old or new, never
    half written, and never writes through a link someone left at a file's name). The list names the
    earlier report's files and this one's before any moves, so none is ever unlisted; it names this
    one's alone once the earlier ones this report did not write are removed."""
    names = [p.relative_to(drafted.out).as_posix() for p in [*drafted.tables, *drafted.figures]]
    earlier = _listed(out)
    _write_list(out, earlier | set(names))
    for folder in WRITTEN:
        (out / folder).mkdir(exist_ok=True)
    for name in [*names, drafted.index.name]:
        _move(drafted.out / name, out / name)
    moved = [out / name for name in names]
    published = Report(out, moved[:len(drafted.tables)], moved[len(drafted.tables):], drafted.skipped, drafted.cells)
    _tidy(published, earlier)
    return published


def _move(src: Path, dst: Path) -> None:
    """`src` renamed over `dst`; where `dst`'s folder is on another file system (a `tables` or `figures`
    linked elsewhere: EXDEV), copied to a file of its own beside `dst` and that renamed over it."""
    try:
        os.replace(src, dst)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    with open(src, "rb") as drafted:  # in the mode the report's umask gave it
        _write_over(dst, os.fstat(drafted.fileno()).st_mode & 0o777, lambda f: shutil.copyfileobj(drafted, f))


def _listed(out: Path) -> set[str]:
    """The files the earlier report in `out` listed (MANIFEST): none where there is no list yet (a new
    directory, or an older report's)."""
    try:
        return set((out / MANIFEST).read_text(encoding="utf-8").splitlines())
    except (OSError, UnicodeDecodeError):
        return set()


def _tidy(report: Report, earlier: set[str]) -> None:
    """Removes the files `earlier` lists and `report` did not write, then lists `report`'s. An entry
    that is not `<folder of WRITTEN>/<file of its suffixes>` (no `..`, no deeper path: a list edited by
    hand) is not removed."""
    written = {p.relative_to(report.out).as_posix() for p in [*report.tables, *report.figures]}
    for entry in sorted(earlier - written):
        folder, _, name = entry.partition("/")
        stale = report.out / folder / name
        if name.endswith(WRITTEN.get(folder, ())) and "/" not in name and "\0" not in name and stale.is_file():
            stale.unlink(missing_ok=True)  # another report beside this one may have removed it first
    _write_list(report.out, written)


def _write_list(out: Path, entries: set[str]) -> None:
    """MANIFEST in `out` naming `entries`, 0644 as the report's other files: never half a list."""
    text = "".join(f"{entry}\n" for entry in sorted(entries))
    _write_over(out / MANIFEST, 0o644, lambda f: f.write(text.encode("utf-8")))


def _write_over(dst: Path, mode: int, fill: Callable[[BinaryIO], Any]) -> None:
    """`dst` replaced whole by what `fill` writes: into a hidden file of its own beside it (mkstemp:
    O_EXCL, never a link someone left, never another report's at the same moment), given `mode`
    (mkstemp's is 0600), then renamed over `dst`; removed again where anything fails."""
    fd, new = tempfile.mkstemp(prefix=f".{dst.name.lstrip('.')}.", suffix=".new", dir=dst.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            fill(f)
        os.replace(new, dst)
    except BaseException:
        Path(new).unlink(missing_ok=True)
        raise


def _builds(report: Report, found: list[list[builds.Row]], out: Path) -> str:
    """The builds section's table and figure written (where cells differ only in their build); its HTML."""
    if not found:
        return ""
    report.tables.append(builds.write_csv(found, out / "tables" / "builds.csv"))
    drawn = drawing.draw_one(builds.figure, found, out / "figures")
    if isinstance(drawn, str):
        report.skipped.append(drawn)
        return builds.section_html(found, MIN_EFFECT_PCT, "")
    report.figures += [drawn.svg, drawn.png]
    return builds.section_html(found, MIN_EFFECT_PCT, page.figure_html(drawn))
