"""The report's builds section (issue 39 item 5) on real results databases (`db_url`: SQLite and
PostgreSQL): result files of cells that differ only in `build`, landed by the collector's real path,
then `write_report`. Each build's figure side by side, the verdict of `compare`'s own code with its
correction named, and the provenance difference read from what the runs recorded. (A real numpy
sweep over two BLAS builds, its report opened in Chromium: tests/test_builds.py.)"""
import csv
import html
import os
import re

from result_factory import make_result, write_result

from orchestrator.metric_registry import MIN_EFFECT_PCT
from orchestrator.report import builds, compare, query, tables
from orchestrator.report.build import MANIFEST, write_report
from orchestrator.results.collector import collect
from orchestrator.store import db

SPEED = tables.SPEC_BY_NAME["images_per_sec"].metric
#: what each build's runs loaded, as trainers/common/host.py records it
BLAS = {
    "openblas": {"library": "OpenBLAS", "version": "OpenBLAS 0.3.21  DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64",
                 "path": "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3", "threads": 4},
    "blis": {"library": "BLIS", "version": "0.9.0", "path": "/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3",
             "threads": None},
    "reference": {"library": "reference", "version": "3.11.0", "path": "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0",
                  "threads": None},
}

#: a BLAS every build's process loads besides its own (numpy's wheel's, imported with the trainer)
NUMPYS = {"library": "OpenBLAS", "version": "OpenBLAS 0.3.30  USE64BITINT DYNAMIC_ARCH", "threads": 2,
          "path": "/envs/caffe/lib/python3.11/site-packages/numpy.libs/libscipy_openblas64_-56d6093b.so"}


def landed(tmp_path, url, cells):
    """`cells`: (settings, build, [images/s per repeat], framework provenance changes); their result
    files written as jobs leave them and collected into the database at `url`."""
    runs = tmp_path / "runs"
    for settings, build, values, framework in cells:
        for repeat, value in enumerate(values):
            result = make_result(sweep="s1", repeat=repeat, metrics={"images_per_sec": value}, build=build, **settings)
            record = result["provenance"]
            record["framework"] = {**record["framework"], "version": "1.24.2", "compiler": "GCC 12.2.0",
                                   "blas": [NUMPYS, BLAS[build if build in BLAS else "openblas"]], **framework}
            record["build"] = {"name": build or "default", "environment_dir": f"/envs/caffe-{build}-0123"}
            write_result(runs, result)
    factory = db.open_db(url)  # (again, where a test lands more)
    assert collect(factory, runs).added == sum(len(c[2]) for c in cells)
    return factory


def report_of(factory, out):
    with factory() as session:
        return write_report(session, ["s1"], out, 0.05)


def test_cells_that_differ_only_in_build_get_a_builds_section(tmp_path, db_url):
    lenet, alexnet = {"framework": "caffe", "model": "lenet"}, {"framework": "caffe", "model": "alexnet"}
    factory = landed(tmp_path, db_url, [
        (lenet, None, [100.0, 102.0, 98.0, 101.0], {}),
        (lenet, "blis", [150.0, 153.0, 148.0, 151.0], {}),
        (lenet, "reference", [101.0, 99.5, 100.5, 100.0], {}),
        (alexnet, "openblas", [20.0, 21.0, 19.5], {}),  # no default: the first build by name is the base
        (alexnet, "reference", [8.0, 8.2, 7.9], {"compiler": "GCC 13.2.0", "version": "1.25.0"}),
        ({"framework": "caffe", "model": "vgg16"}, None, [5.0, 5.1, 4.9], {}),  # one build only: no case
    ])
    report = report_of(factory, tmp_path / "report")
    rows = list(csv.DictReader((report.out / "tables" / "builds.csv").open()))
    got = {(r["case"].split(" ")[0], r["build"]): r for r in rows}
    assert sorted(got) == [("caffe/alexnet/mnist", "openblas"), ("caffe/alexnet/mnist", "reference"),
                           ("caffe/lenet/mnist", "blis"), ("caffe/lenet/mnist", "default"),
                           ("caffe/lenet/mnist", "reference")]
    assert [r["build"] for r in rows if "lenet" in r["case"]] == ["default", "blis", "reference"]  # base first
    blis, ref, slow = got["caffe/lenet/mnist", "blis"], got["caffe/lenet/mnist", "reference"], \
        got["caffe/alexnet/mnist", "reference"]
    assert (blis["base"], blis["verdict"], float(blis["median"]), blis["n"]) == ("default", "faster", 150.5, "4")
    assert (ref["verdict"], slow["base"], slow["verdict"]) == ("no change", "openblas", "slower")
    assert blis["difference"] == "BLAS: OpenBLAS 0.3.21 (4 threads) → BLIS 0.9.0"
    assert ref["difference"] == "BLAS: OpenBLAS 0.3.21 (4 threads) → reference 3.11.0"
    assert slow["difference"] == ("caffe: 1.24.2 → 1.25.0; BLAS: OpenBLAS 0.3.21 (4 threads) → reference 3.11.0; "
                                  "compiler: GCC 12.2.0 → GCC 13.2.0")
    assert got["caffe/lenet/mnist", "default"]["recorded"] == (
        "caffe: 1.24.2; BLAS: OpenBLAS 0.3.30 (2 threads) + OpenBLAS 0.3.21 (4 threads); compiler: GCC 12.2.0; "
        "CUDA: 12.1")
    # the verdict is compare's own: what `compare --base build=default --new build=blis` gives this pair
    with factory() as session:
        (speed,) = tables.from_db(session, ["s1"], 0.05, [tables.SPEC_BY_NAME["images_per_sec"]])
        repeats = query.values(session, ["s1"], SPEED)
    (alone,) = compare.compare(compare.with_settings(speed.entries, {"build": "default", "model": "lenet"}),
                               compare.with_settings(speed.entries, {"build": "blis", "model": "lenet"}),
                               SPEED, MIN_EFFECT_PCT, (repeats, repeats)).matched
    assert alone.verdict == "faster" and abs(alone.gain - float(blis["gain"])) < 1e-12
    page = report.index.read_text()
    section = page[page.index('<h2 id="builds">Builds</h2>'):page.index("<h2>Tables</h2>")]
    assert "Benjamini–Hochberg over the 3 comparisons tested on this page" in section
    assert f"minimum effect {MIN_EFFECT_PCT:g}%" in section and "moderated t-test" in section
    assert re.search(r'data-build="blis"><th>blis</th><td class="num"><span class="v">150\.5</span>', section)
    assert html.escape("BLAS: OpenBLAS 0.3.21 (4 threads) → BLIS 0.9.0") in section
    assert re.search(r"\+50\.\d% faster \(95% CI \+4\d\.\d% to \+5\d\.\d%, adj\. p ", section)
    assert 'id="fig-builds"' in section and "vgg16" not in section
    assert {p.name for p in report.figures} >= {"builds.svg", "builds.png"}
    svg = (report.out / "figures" / "builds.svg").read_text()
    assert all(b in svg for b in ("default", "blis", "reference", "openblas")) and "slower" in svg
    # a case's long name wrapped within its panel (3 builds: 3.8 inches), not run into its neighbour's
    assert max(len(line) for line in re.findall(r"<text[^>]*>([^<]*)</text>", svg)) <= 3.8 * builds.TITLE_CHARS


def test_a_report_without_cells_differing_only_in_build_has_no_builds_section(tmp_path, db_url):
    """No empty heading: cells that differ in build and in threads are no case; once a cell that
    differs from one of them in build alone lands, the section appears with that case only."""
    lenet = {"framework": "caffe", "model": "lenet"}
    cells = [({**lenet, "threads": 2}, None, [100.0, 101.0, 99.0], {}),
             ({**lenet, "threads": 1}, "blis", [60.0, 61.0, 59.0], {})]  # threads differ too
    factory = landed(tmp_path / "a", db_url, cells)
    report = report_of(factory, tmp_path / "report")
    page = report.index.read_text()
    assert "Builds" not in page and 'id="builds"' not in page
    assert not (report.out / "tables" / "builds.csv").exists() and not (report.out / "figures" / "builds.svg").exists()
    landed(tmp_path / "b", db_url, [({**lenet, "threads": 1}, None, [50.0, 51.0, 49.0], {})])
    again = report_of(factory, tmp_path / "again")
    cases = {(r["case"], r["build"]) for r in csv.DictReader((again.out / "tables" / "builds.csv").open())}
    assert cases == {("caffe/lenet/mnist on local (threads=1, batch_size=64, precision=fp32)", b) for b in
                     ("default", "blis")}
    assert again.index.read_text().count('<h2 id="builds">Builds</h2>') == 1


def test_a_report_written_over_an_earlier_one_removes_only_the_files_the_earlier_one_wrote(tmp_path):
    """The builds table and figure of a report whose data had two builds are gone once a report of data
    with one build is written in their place; a user's own files there, and whatever a hand-edited list
    names outside the report's folders, stay. (SQLite only: the files, not the database, are under test.)"""
    lenet = {"framework": "caffe", "model": "lenet"}
    out = tmp_path / "report"
    two = landed(tmp_path / "a", f"sqlite:///{tmp_path / 'two.db'}",
                 [(lenet, None, [100.0, 101.0, 99.0], {}), (lenet, "blis", [150.0, 151.0, 149.0], {})])
    first = report_of(two, out)
    stale = {out / "tables" / "builds.csv", out / "figures" / "builds.svg", out / "figures" / "builds.png"}
    assert all(p.is_file() for p in stale) and set(first.tables + first.figures) >= stale
    mine = [out / "tables" / "published.csv", out / "figures" / "mine.png", tmp_path / "outside.csv"]
    for path in mine:
        path.write_text("a user's own file\n")
    with (out / MANIFEST).open("a") as listed:
        listed.write("tables/../../outside.csv\n../outside.csv\n/etc/hostname\ntables/mine\n")
    one = landed(tmp_path / "b", f"sqlite:///{tmp_path / 'one.db'}", [(lenet, None, [100.0, 101.0, 99.0], {})])
    second = report_of(one, out)
    assert not any(p.exists() for p in stale) and all(p.read_text() == "a user's own file\n" for p in mine)
    kept = {p.relative_to(out).as_posix() for p in second.tables + second.figures}
    assert all((out / name).is_file() for name in kept) and "tables/images_per_sec.csv" in kept
    assert (out / MANIFEST).read_text().splitlines() == sorted(kept)


def test_recorded_values_are_escaped_and_a_side_without_a_number_gets_no_verdict(tmp_path):
    hostile = '<img src=x onerror="alert(1)">'
    cells = [({"framework": "caffe", "model": "lenet"}, None, [100.0, 101.0, 99.0], {"version": hostile}),
             ({"framework": "caffe", "model": "lenet"}, "blis", [], {})]
    factory = landed(tmp_path, f"sqlite:///{tmp_path / 'results.db'}", cells)
    runs = tmp_path / "runs"
    write_result(runs, make_result(sweep="s1", state="failed", build="blis", framework="caffe", model="lenet"))
    assert collect(factory, runs).added == 1
    report = report_of(factory, tmp_path / "report")
    page = report.index.read_text()
    section = page[page.index('<h2 id="builds">'):page.index("<h2>Tables</h2>")]
    assert hostile not in page and html.escape(hostile) in section
    assert "no verdict: no number" in section and "failed: out_of_memory" in section
    (blis,) = [r for r in csv.DictReader((report.out / "tables" / "builds.csv").open()) if r["build"] == "blis"]
    assert (blis["status"], blis["verdict"], blis["median"]) == ("failed", "no verdict", "")


def test_cases_that_share_a_name_are_told_apart_by_the_settings_they_differ_in(tmp_path):
    lenet = {"framework": "caffe", "model": "lenet"}
    factory = landed(tmp_path, f"sqlite:///{tmp_path / 'results.db'}", [
        ({**lenet, "iterations": iterations}, build, [v, v * 1.01, v * 0.99], {})
        for iterations in (20, 40) for build, v in ((None, 100.0), ("blis", 90.0))])
    report = report_of(factory, tmp_path / "report")
    named = {(r["case"], r["build"]) for r in csv.DictReader((report.out / "tables" / "builds.csv").open())}
    assert named == {(f"caffe/lenet/mnist on local (threads=2, batch_size=64, precision=fp32), iterations={i}", b)
                     for i in (20, 40) for b in ("default", "blis")}


def test_the_file_list_is_never_written_through_a_link_nor_by_a_name_two_reports_share(tmp_path):
    """The list is written to a new file of its own (O_EXCL, a name no other report holds) and renamed
    over the old one: a `.report-files.new` already there (a link to a user's file, or another report
    writing into the same directory at that moment) is neither written through nor taken over."""
    from orchestrator.report.build import Report, _tidy
    out, theirs = tmp_path / "report", tmp_path / "theirs.txt"
    (out / "tables").mkdir(parents=True)
    (out / "tables" / "a.csv").write_text("x\n")
    theirs.write_text("a user's own file\n")
    (out / f"{MANIFEST}.new").symlink_to(theirs)
    _tidy(Report(out, tables=[out / "tables" / "a.csv"]), set())
    assert theirs.read_text() == "a user's own file\n"
    assert (out / MANIFEST).read_text() == "tables/a.csv\n" and not (out / MANIFEST).is_symlink()
    assert sorted(p.name for p in out.iterdir()) == sorted([MANIFEST, f"{MANIFEST}.new", "tables"])


def one_build(tmp_path):
    """A database (under tmp_path/a) of one caffe LeNet cell at its default build."""
    return landed(tmp_path / "a", f"sqlite:///{tmp_path / 'one.db'}",
                  [({"framework": "caffe", "model": "lenet"}, None, [100.0, 101.0, 99.0], {})])


def two_builds(tmp_path):
    """A database (under tmp_path/b) of that cell at its default build and at blis: a builds section."""
    lenet = {"framework": "caffe", "model": "lenet"}
    return landed(tmp_path / "b", f"sqlite:///{tmp_path / 'two.db'}",
                  [(lenet, None, [100.0, 101.0, 99.0], {}), (lenet, "blis", [150.0, 151.0, 149.0], {})])


def interrupted(*args, **kwargs):
    raise KeyboardInterrupt  # what a user's Ctrl-C raises mid-report


def files_of(out):
    """Every file under `out`, by its path there, with its bytes."""
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_report_stopped_while_it_draws_leaves_the_earlier_one_whole(tmp_path, monkeypatch):
    """A report of two builds that fails after its builds table and figure are drawn (here: its page)
    changes nothing in the directory: every file of the earlier report, and its list, as they were, and
    no folder of its own left behind. Written in place, builds.csv and its figure stayed, unlisted."""
    from orchestrator.report import build, page
    out = tmp_path / "report"
    one = one_build(tmp_path)
    report_of(one, out)
    before = files_of(out)
    two = two_builds(tmp_path)
    monkeypatch.setattr(page, "render", interrupted)
    try:
        report_of(two, out)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the stopped report went on")
    assert files_of(out) == before and "tables/builds.csv" not in before
    assert not [p for p in out.iterdir() if p.name.startswith(build.STAGING)]


def test_a_report_stopped_while_it_publishes_leaves_no_file_unlisted(tmp_path, monkeypatch):
    """A report of two builds stopped once its files are in place but before the earlier ones are
    removed: the list already names its builds table and figure, so the next report (one build)
    removes them. Listed only at the end, they were left for good."""
    from orchestrator.report import build
    out = tmp_path / "report"
    one = one_build(tmp_path)
    report_of(one, out)
    two = two_builds(tmp_path)
    tidy = build._tidy
    monkeypatch.setattr(build, "_tidy", interrupted)
    try:
        report_of(two, out)
    except KeyboardInterrupt:
        pass
    drawn = {out / "tables" / "builds.csv", out / "figures" / "builds.svg", out / "figures" / "builds.png"}
    assert all(p.is_file() for p in drawn)
    monkeypatch.setattr(build, "_tidy", tidy)
    third = report_of(one, out)
    assert not any(p.exists() for p in drawn)
    assert (out / build.MANIFEST).read_text().splitlines() == sorted(
        p.relative_to(out).as_posix() for p in third.tables + third.figures)


def test_a_folder_linked_to_another_file_system_is_published_into(tmp_path, monkeypatch):
    """`DIR/tables` a link to a folder on another file system (a rename from the STAGING folder fails
    there with EXDEV): each file is copied beside its name there and renamed over it, as the report
    written in place did; nothing is left beside the files. (os.replace raises EXDEV here for a move
    out of STAGING into the linked folder, as the kernel does across devices.)"""
    import errno

    from orchestrator.report import build
    out, elsewhere = tmp_path / "report", tmp_path / "other-fs"
    elsewhere.mkdir()
    out.mkdir()
    (out / "tables").symlink_to(elsewhere)
    replace = os.replace

    def across(src, dst):
        if build.STAGING in str(src) and os.path.realpath(os.path.dirname(dst)) == os.path.realpath(elsewhere):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(src), None, str(dst))
        return replace(src, dst)
    monkeypatch.setattr(os, "replace", across)
    factory = one_build(tmp_path)
    report = report_of(factory, out)
    assert (out / "index.html").is_file() and (out / "tables").is_symlink()
    assert sorted(p.name for p in elsewhere.iterdir()) == sorted(p.name for p in report.tables)
    assert (elsewhere / "images_per_sec.csv").stat().st_mode & 0o777 == (out / "index.html").stat().st_mode & 0o777


def test_a_stale_file_another_report_removed_first_fails_neither(tmp_path, monkeypatch):
    """Two reports into one directory remove the same stale file of the earlier report: the one that
    finds it gone (removed between its look and its unlink) goes on instead of failing."""
    import pathlib

    out = tmp_path / "report"
    one = one_build(tmp_path)
    two = two_builds(tmp_path)
    report_of(two, out)
    is_file = pathlib.Path.is_file

    def looked(self, *args, **kwargs):
        found = is_file(self, *args, **kwargs)
        if found and self == out / "tables" / "builds.csv":
            os.unlink(self)  # the other report's _tidy, at this moment
        return found
    monkeypatch.setattr(pathlib.Path, "is_file", looked)
    report_of(one, out)
    assert not (out / "tables" / "builds.csv").exists() and "tables/builds.csv" not in (out / MANIFEST).read_text()


def test_a_report_publishes_holding_the_directorys_lock_and_draws_without_it(tmp_path, monkeypatch):
    """Two reports into one directory publish one after the other (the interleaving a review reproduced
    left the list naming builds files another report had removed, and the page disagreeing with the
    files): while files move, another open of LOCK cannot take it; while the page is drawn, it can."""
    import fcntl

    from orchestrator.report import build, page
    out = tmp_path / "report"
    factory = one_build(tmp_path)
    taken = {}

    def free():
        fd = os.open(out / build.LOCK, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    def seen(step, real):
        def wrapped(*args, **kwargs):
            taken.setdefault(step, free())
            return real(*args, **kwargs)
        return wrapped
    monkeypatch.setattr(build, "_move", seen("moving", build._move))
    monkeypatch.setattr(page, "render", seen("drawing", page.render))
    report_of(factory, out)
    assert taken == {"drawing": True, "moving": False}
    assert free()  # let go once published


def test_a_report_publishes_where_flock_needs_a_file_open_for_writing(tmp_path, monkeypatch):
    """On NFSv4 (flock emulated by the server's byte-range locks) an exclusive flock of a file opened
    read-only fails with EBADF (fs/nfs/nfs4proc.c, nfs4_proc_lock): the report publishes, holding the
    lock, instead of stopping with that error. Modelled here: LOCK_EX refused on a read-only descriptor."""
    import errno
    import fcntl

    from orchestrator.report import build
    flock = fcntl.flock
    held = []

    def nfs(fd, operation):
        if operation & fcntl.LOCK_EX and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        held.append(operation)
        return flock(fd, operation)
    monkeypatch.setattr(fcntl, "flock", nfs)
    out = tmp_path / "report"
    factory = one_build(tmp_path)
    report = report_of(factory, out)
    assert report.index.is_file() and held == [fcntl.LOCK_EX | fcntl.LOCK_NB]


def test_a_fifo_left_at_the_locks_name_neither_blocks_nor_is_locked(tmp_path):
    """Something not a regular file at LOCK's name (a FIFO, whose read-only open waits for a writer
    for ever): publishing goes on without the lock instead of waiting."""
    import signal

    from orchestrator.report import build

    def late(*args):  # not an OSError, which the open's own handling would take for a lock it cannot open
        raise AssertionError("publishing waited on the FIFO at its lock's name")
    os.mkfifo(tmp_path / build.LOCK)
    previous = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, 10)
    try:
        with build._publishing(tmp_path):
            pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert (tmp_path / build.LOCK).exists() and not (tmp_path / build.LOCK).is_file()


def test_a_report_waiting_for_another_ones_publishing_says_so_and_then_publishes(tmp_path, monkeypatch):
    """Where another report holds the directory's lock (one paused with Ctrl-Z while it publishes), a
    report says on stderr whom it waits for, instead of hanging in silence, and publishes once let go."""
    import fcntl
    import io
    import sys
    import threading

    from orchestrator.report import build
    out = tmp_path / "report"
    out.mkdir()
    factory = one_build(tmp_path)
    told = threading.Event()

    class Stderr(io.StringIO):
        def write(self, text):
            if "waiting for another report publishing into" in text:
                told.set()
            return super().write(text)
    monkeypatch.setattr(sys, "stderr", Stderr())
    held = os.open(out / build.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(held, fcntl.LOCK_EX)
    done = []
    writer = threading.Thread(target=lambda: done.append(report_of(factory, out)))
    try:
        writer.start()
        assert told.wait(120), "no line while the lock was held"
        assert not done and not (out / "index.html").exists()
    finally:
        os.close(held)
        writer.join(120)
    assert done and done[0].index.is_file() and f"{out / build.LOCK}" in sys.stderr.getvalue()
