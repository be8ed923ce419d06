"""Reports (issue 14): per-metric tables with n/a reasons, figures, the HTML page in a real
browser, `compare` and its exit statuses, and the presets.

Most tests build a results database directly, as the launcher and the collector would leave it
(GPU cells cannot run here), on SQLite and on PostgreSQL (`db_url`); one runs a real sweep on this machine and opens its report in
headless Chromium; the study preset is expanded as a user types it."""
import csv
import hashlib
import re
import shutil
import subprocess
import tempfile
import time

import pytest
from helpers import FAST, orchestrator, rows, user_dir, wait_until_final
from result_factory import make_settings

from orchestrator.store import db, schema
from orchestrator.store import run_history
from orchestrator import setting_registry
from orchestrator.sweep.cell import cell_id
from trainers.common.failure_classes import way_out
from orchestrator.report import compare, speedup, table_files, tables
from orchestrator.report.build import write_report

MB = 2**20


class Study:
    """A results database made by hand (at `url`, else results.db under `path`): one sweep, cells
    with runs in any state, refusals."""

    def __init__(self, path, sweep="s1", url=None):
        self.url = url or f"sqlite:///{path / 'results.db'}"
        self.factory = db.open_db(self.url)
        self.sweep = sweep
        with self.factory.begin() as session:
            session.add(schema.Sweep(id=sweep, created_at=time.time(), argv=["python", "-m", "orchestrator", "-m", "x=1"],
                                 overrides=[], n_cells=0))

    def cell(self, runs=(), cores=None, node_addrs=None, config=None, job_id=None, **settings):
        """A cell of the sweep; `runs`: per repeat a state ('done', 'failed:<class>', 'pending', 'lost') or a
        dict of metrics (done), repeat i running from second i to i + 1 of one job (`job_id`); `node_addrs`:
        its runs' nodes' addresses (a cell across nodes); `config`: the config the sweep recorded."""
        settings = make_settings(**settings)
        cid = cell_id(settings)
        with self.factory.begin() as session:
            if session.get(schema.Cell, cid) is None:
                session.add(schema.Cell(id=cid, settings=settings, created_at=time.time(), **settings))
                session.flush()
            session.add(schema.SweepCell(sweep_id=self.sweep, cell_id=cid, config=config))
            for repeat, run in enumerate(runs):
                metrics = run if isinstance(run, dict) else {}
                state, _, error_class = ("done" if isinstance(run, dict) else run).partition(":")
                r = schema.Run(uid=f"{self.sweep}:{cid}:{repeat}:1", sweep_id=self.sweep, cell_id=cid, repeat=repeat,
                           attempt=1, state="pending", job_id=job_id, node="node01" if state in ("done", "failed") else None,
                           cpu_cores=cores, node_addrs=node_addrs, params=431080 if state == "done" else None, started_at=1.7e9 + repeat,
                           ended_at=1.7e9 + repeat + 1)
                for step in {"lost": ["submitted", "lost"], "pending": []}.get(state, [state]):
                    r.state = step
                if error_class:
                    r.error_class, r.error_message = error_class, f"it ended {error_class}\nsecond line"
                session.add(r)
                session.flush()
                for name, value in metrics.items():
                    session.add(schema.Metric(run_id=r.id, name=name, value=value))
        return cid

    def refuse(self, reason, **settings):
        settings = make_settings(**settings)
        with self.factory.begin() as session:
            session.add(schema.Refusal(sweep_id=self.sweep, overrides="x=1", reason=reason, settings=settings,
                                   **{k: settings[k] for k in ("framework", "model", "dataset", "hardware", "gpus",
                                                               "nodes", "threads", "batch_size", "precision")}))

    def tables(self, noisy_cv=0.05):
        with self.factory() as session:
            return {t.spec.metric.name: t for t in tables.from_db(session, [self.sweep], noisy_cv)}

    def report(self, out, noisy_cv=0.05):
        with self.factory() as session:
            return write_report(session, [self.sweep], out, noisy_cv)


def ips(*values, **more):
    """Repeats measuring these images/s (and `more` metrics each)."""
    return [{"images_per_sec": v, **more} for v in values]


def entry(table, **settings):
    want = setting_registry.filled(make_settings(**settings))  # a report reads each default filled in
    found = [e for e in table.entries if all(e.settings.get(k) == v for k, v in want.items())]
    assert len(found) == 1, (settings, [e.settings for e in table.entries])
    return found[0]


def test_every_cell_without_a_number_says_why(tmp_path, db_url):
    study = Study(tmp_path, url=db_url)
    study.cell(ips(100, 110, 120, rss_peak_bytes=300 * MB), framework="torch")
    study.cell(["failed:out_of_memory", "failed:out_of_memory", "done"], framework="tensorflow")
    study.cell(["pending", "pending"], framework="mxnet")
    study.cell([], framework="caffe")                     # recorded, no run yet
    study.cell(["lost"], framework="cntk")
    study.refuse("numpy/lenet/mnist: numpy does not support --gpus 1; it supports the CPU only", framework="numpy",
                 gpus=1)
    t = study.tables()
    speed = t["images_per_sec"]
    assert entry(speed, framework="torch").median == 110.0 and entry(speed, framework="torch").stats.n == 3
    assert entry(speed, framework="tensorflow").reason == "not measured"   # its one done repeat has no images/s
    assert entry(speed, framework="mxnet").reason == "not yet run" and "2 pending" in entry(speed, framework="mxnet").detail
    assert entry(speed, framework="caffe").reason == "not yet run"
    assert entry(speed, framework="cntk").reason == "lost"
    refused = entry(speed, framework="numpy", gpus=1)
    assert refused.status == "refused" and "numpy does not support --gpus 1" in refused.detail
    assert entry(t["gpu_power_avg_w"], framework="torch").reason == "no GPU: gpus=0"
    assert entry(t["rss_peak_bytes"], framework="torch").median == 300.0        # MB, as the registry scales it

    (tmp_path / "b").mkdir()
    study2 = Study(tmp_path / "b", "s2")
    study2.cell(["failed:out_of_memory", "failed:out_of_memory"], framework="tensorflow", model="vgg16")
    speed2 = study2.tables()["images_per_sec"]
    assert entry(speed2, framework="tensorflow", model="vgg16").reason == "failed: out_of_memory"
    assert entry(speed2, framework="tensorflow", model="vgg16").detail == \
        f"it ended out_of_memory second line (way out: {way_out('out_of_memory')})"  # the registry's

    md = table_files.markdown(speed)
    assert "| mnist | lenet | torch |" in md and "110 (n=3, CV 9.1%, noisy)" in md
    assert "n/a (refused) [" in md and "numpy does not support --gpus 1" in md
    assert "n/a (not yet run)" in md and "n/a (lost)" in md
    assert "| 0 " not in md and "||" not in md  # never 0, never blank
    path = table_files.write_csv(speed, tmp_path / "speed.csv")
    written = list(csv.DictReader(path.read_text().splitlines()))
    assert tuple(written[0]) == tables.CSV_COLUMNS
    by_fw = {(r["framework"], r["gpus"]): r for r in written}
    assert by_fw["numpy", "1"]["status"] == "refused" and by_fw["numpy", "1"]["median"] == ""
    assert by_fw["cntk", "0"]["status"] == "lost" and by_fw["torch", "0"]["median"] == "110.0"


def _limit(minutes, source, floor=None):
    """A recorded config whose hardware asked for `minutes` (as time_limits.learn records it)."""
    return {"hardware": {"time_min": minutes, "time_floor": floor, "time_source": source}, "cluster": {}}


def test_the_time_table_gives_each_cells_limit_and_the_time_its_job_used(tmp_path, db_url):
    """Limit, --time-min and source from the config the sweep recorded (JSON, read in Python); the
    time used is the job's (its three repeats: 3 s), the median over its jobs; none recorded and
    not yet run say so."""
    study = Study(tmp_path, url=db_url)
    study.cell(ips(100, 110, 120), job_id="4242", framework="torch",
               config=_limit(5, "same cell (longest of 1 run(s): 60 s)", floor=4))
    study.cell(["failed:timeout"], job_id="4243", framework="tensorflow", config=_limit(4, "rerun: twice 2 min"))
    study.cell([], framework="caffe", config=_limit(120, "ceiling"))
    study.cell(ips(90), framework="mxnet")                      # recorded before configs were
    out = tmp_path / "report"
    report = study.report(out)
    assert out / "tables" / "time_limits.csv" in report.tables
    written = {r["framework"]: r for r in csv.DictReader((out / "tables" / "time_limits.csv").read_text().splitlines())}
    assert (written["torch"]["limit_min"], written["torch"]["time_min_floor"], written["torch"]["used_s"],
            written["torch"]["jobs"], written["torch"]["asked_over_used"]) == ("5", "4", "3.0", "1", "100.0")
    assert written["torch"]["source"] == "same cell (longest of 1 run(s): 60 s)"
    assert (written["tensorflow"]["limit_min"], written["tensorflow"]["used_s"]) == ("4", "1.0")
    assert written["tensorflow"]["source"] == "rerun: twice 2 min"
    assert (written["caffe"]["limit_min"], written["caffe"]["used_s"], written["caffe"]["jobs"]) == ("120", "", "0")
    assert (written["mxnet"]["limit_min"], written["mxnet"]["used_s"]) == ("", "1.0")
    md = (out / "tables" / "time_limits.md").read_text()
    assert "| mnist / lenet / torch | local | 5 min (--time-min 4) | same cell (longest of 1 run(s): 60 s) | 3 s | 100.0 |" in md
    assert "| 120 min | ceiling | not yet ended |" in md and "| none recorded |" in md
    page = report.index.read_text()
    assert 'id="time-limits"' in page and "rerun: twice 2 min" in page and "5 min (--time-min 4)" in page


def test_a_cell_whose_repeats_differ_is_marked_noisy(tmp_path, db_url):
    study = Study(tmp_path, url=db_url)
    study.cell(ips(100, 101, 99), framework="torch")              # CV 1 %
    study.cell(ips(100, 100, 130), framework="tensorflow")         # CV 16 %
    study.cell(ips(100), framework="mxnet")                        # one repeat: no CV
    speed = study.tables()["images_per_sec"]
    assert entry(speed, framework="torch").noisy is False
    assert entry(speed, framework="tensorflow").noisy is True
    assert entry(speed, framework="mxnet").noisy is None and entry(speed, framework="mxnet").stats.cv is None
    md = table_files.markdown(speed)
    assert "100 (n=3, CV 15.7%, noisy)" in md and "100 (n=3, CV 1.0%)" in md and "100 (n=1)" in md
    assert entry(study.tables(noisy_cv=0.2)["images_per_sec"], framework="tensorflow").noisy is False


def test_gpu_power_is_the_jobs_gpus_summed_not_averaged(tmp_path, db_url):
    """The monitor sums power over the job's GPUs (the reference study averaged it): a 2-GPU
    cell drawing 2 x 250 W shows 500 W, the median of its repeats' sums."""
    study = Study(tmp_path, url=db_url)
    study.cell(ips(900, 910, 905, gpu_power_avg_w=250.0), hardware="p100", gpus=1)
    cid = study.cell([{"images_per_sec": 1700, "gpu_power_avg_w": w} for w in (480.0, 500.0, 520.0)],
                     hardware="p100", gpus=2)
    power = study.tables()["gpu_power_avg_w"]
    assert power.spec.title == "GPU power: mean, summed over the job's GPUs" and power.spec.unit == "W"
    two = entry(power, hardware="p100", gpus=2)
    assert two.cell == cid and two.median == 500.0 and two.stats.lo == 480.0
    assert entry(power, hardware="p100", gpus=1).median == 250.0
    assert "| mnist | lenet | torch | 250 (n=3, CV 0.0%) | 500 (n=3, CV 4.0%) |" in table_files.markdown(power)


def test_scaling_speedups_from_cells_that_differ_only_in_gpus_or_threads(tmp_path, db_url):
    study = Study(tmp_path, url=db_url)
    for gpus, speed in ((1, 100.0), (2, 190.0), (4, 360.0)):
        study.cell(ips(speed, speed, energy_per_image_j=0.5 * gpus), hardware="p100", gpus=gpus, threads=16)
        study.cell(ips(speed * 1.0, speed), hardware="p100", gpus=gpus, threads=16, scaling="weak",
                   batch_size=64)
    study.cell(ips(500.0), hardware="p100", gpus=2, threads=16, batch_size=128)   # differs in batch too: alone
    for threads, speed in ((1, 50.0), (2, 95.0), (4, 150.0)):
        study.cell(ips(speed, speed), cores=2, threads=threads, hardware="cpu12")
    t = study.tables()
    speed = t["images_per_sec"]
    gpu = speedup.gpu_scaling(speed.entries)
    assert len(gpu) == 2
    strong = next(s for s in gpu if s.settings["scaling"] == "strong")
    assert [(p.x, round(p.speedup, 3), round(p.efficiency, 3)) for p in strong.points] == [
        (1, 1.0, 1.0), (2, 1.9, 0.95), (4, 3.6, 0.9)]
    assert "(strong)" in strong.label and any("(weak)" in s.label for s in gpu)
    with study.factory() as session:
        threads = speedup.thread_scaling(speed.entries, run_history.cores(session, ["s1"]))
    assert len(threads) == 1 and threads[0].cores == 2
    assert [(p.x, round(p.speedup, 2), p.ideal) for p in threads[0].points] == [(1, 1.0, 1.0), (2, 1.9, 2.0), (4, 3.0, 4.0)]

    report = study.report(tmp_path / "report")
    names = {p.name for p in report.figures}
    assert {"scaling_gpus.svg", "scaling_gpus.png", "scaling_threads.svg", "scaling_threads.png",
            "throughput_vs_energy.svg", "throughput_vs_energy.png", "throughput_mnist_lenet.svg"} <= names
    assert report.skipped == []
    assert all(p.stat().st_size > 5000 for p in report.figures)
    html = report.index.read_text()
    assert html.count("data:image/svg+xml;base64,") == len(report.figures) // 2
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html
    assert "p100 ×2" in html and "cpu12, 4 threads" in html


def test_node_scaling_per_framework_with_refusals_and_the_emulation_caveat(tmp_path, db_url):
    """Cells that differ only in `nodes`: images/s and efficiency over 1 node (weak and strong
    alike, as over GPUs), a framework refused across nodes n/a with its reason, the nodes of the
    test cluster (one address) said to share a host, real ones (distinct addresses) not; where
    gpus and nodes both vary, speedup against the GPUs in all."""
    study = Study(tmp_path, url=db_url)
    one_host, two_hosts = "127.0.0.1,127.0.0.1", "10.0.0.1,10.0.0.2"
    common = dict(hardware="cpu", threads=1, scaling="weak", dataset="synthetic")
    for nodes, speed in ((None, 100.0), (2, 180.0), (4, 320.0)):
        study.cell(ips(speed, speed), framework="torch", nodes=nodes,
                   node_addrs=",".join(["127.0.0.1"] * nodes) if nodes else None, **common)
    study.cell(ips(80.0), framework="tensorflow", **common)
    study.cell(ips(160.0), framework="tensorflow", nodes=2, node_addrs=two_hosts, **common)
    study.cell(ips(50.0), framework="mxnet", **common)
    study.refuse("mxnet/lenet/synthetic: mxnet does not support --nodes 2; it supports one node", framework="mxnet",
                 nodes=2, **common)
    for gpus, nodes, speed in ((1, None, 100.0), (2, None, 190.0), (1, 2, 180.0), (2, 2, 340.0)):
        study.cell(ips(speed), framework="torch", hardware="p100", gpus=gpus, threads=4, nodes=nodes,
                   node_addrs=one_host if nodes else None)

    speed = study.tables()["images_per_sec"]
    with study.factory() as session:
        series = speedup.node_scaling(speed.entries, run_history.node_addrs(session, ["s1"]))
    by = {(s.settings["framework"], s.settings["hardware"], s.settings["gpus"]): s for s in series}
    torch = by["torch", "cpu", 0]
    assert [(p.x, p.median, round(p.efficiency, 3)) for p in torch.points] == [(1, 100.0, 1.0), (2, 180.0, 0.9),
                                                                               (4, 320.0, 0.8)]
    assert torch.shared_host and "127.0.0.1" in torch.shared_host and torch.label.endswith("(weak)")
    tf = by["tensorflow", "cpu", 0]
    assert [(p.x, p.efficiency) for p in tf.points] == [(1, 1.0), (2, 1.0)] and tf.shared_host is None
    mxnet = by["mxnet", "cpu", 0]
    assert [p.x for p in mxnet.points] == [1] and [(m.x, m.reason) for m in mxnet.missing] == [(2, "refused")]
    assert "mxnet does not support --nodes 2" in mxnet.missing[0].detail
    assert by["torch", "p100", 2].points[1].efficiency == 340.0 / 190.0 / 2
    total = {s.settings["gpus"]: s for s in speedup.total_gpu_scaling(speed.entries)}
    assert [(p.x, p.speedup, p.efficiency) for p in total[1].points] == [(1, 1.0, 1.0), (2, 1.8, 0.9)]
    assert [(p.x, p.speedup, p.efficiency) for p in total[2].points] == [(2, 1.9, 0.95), (4, 3.4, 0.85)]
    assert speedup.shared_host(["10.0.0.1,10.0.0.2", "10.0.0.3,10.0.0.3"]) == "2 nodes at 10.0.0.3"
    assert speedup.shared_host(["node1,node2"]) is None and speedup.shared_host(["::1,::1"])

    report = study.report(tmp_path / "report")
    names = {p.name for p in report.figures}
    assert {"scaling_nodes.svg", "scaling_nodes.png", "scaling_gpus_total.svg"} <= names, report.skipped
    assert not [s for s in report.skipped if "node" in s]
    nodes_csv = list(csv.DictReader((tmp_path / "report" / "tables" / "scaling_nodes.csv").read_text().splitlines()))
    mx = [r for r in nodes_csv if r["framework"] == "mxnet"]
    assert [(r["nodes"], r["status"], r["reason"]) for r in mx] == [("1", "ok", ""), ("2", "n/a", "refused")]
    assert {r["shared_host"] != "" for r in nodes_csv if r["framework"] == "torch"} == {True}
    md = (tmp_path / "report" / "tables" / "scaling_nodes.md").read_text()
    assert "180 (speedup 1.80, efficiency 90%)" in md and "n/a (refused) [1]" in md and "says nothing about a network" in md
    html = report.index.read_text()
    section = html[html.index('<h2 id="nodes">'):html.index("<h2>Tables</h2>")]
    assert "Emulated nodes" in section and "says nothing about a network" in section
    assert "mxnet does not support --nodes 2" in section and "efficiency 80%" in section
    assert "nodes shared one host (emulated)" in (tmp_path / "report" / "figures" / "scaling_nodes.svg").read_text()


def test_a_report_without_cells_across_nodes_has_no_node_section(tmp_path):
    study = Study(tmp_path)
    study.cell(ips(100.0), framework="torch")
    report = study.report(tmp_path / "report")
    assert "scaling_nodes" not in " ".join(p.name for p in report.figures + report.tables)
    assert 'id="nodes"' not in report.index.read_text()
    assert report.skipped and not [s for s in report.skipped if "node" in s]  # a sweep that asked for none


def _right_edge_is_blank(png, columns=3):
    """Whether the rightmost `columns` pixel columns of an image are all background (a text cut at
    the figure's edge leaves glyph pixels there)."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    width, height = image.size
    edge = image.crop((width - columns, 0, width, height))
    return all(min(rgb) >= 245 for _, rgb in edge.getcolors(columns * height))


def assert_figures_fit(files, shots):
    """Nothing of any figure touches its right edge: neither in matplotlib's PNG nor in its SVG
    as Chromium draws it alone (at its own size, into `shots`), as the page shows it."""
    pngs = [p for p in files if p.suffix == ".png"]
    assert pngs and all(_right_edge_is_blank(p) for p in pngs), pngs
    for svg in (p for p in files if p.suffix == ".svg"):
        width, height = (float(svg.read_text().split(f'{k}="')[1].split("pt")[0]) * 4 / 3 for k in ("width", "height"))
        alone = shots / f"{svg.stem}.html"
        alone.write_text(f'<!DOCTYPE html><html><body style="margin:0;background:white">'
                         f'<img src="{svg.resolve().as_uri()}" style="display:block"></body></html>')
        shot = shots / f"{svg.stem}.png"
        browsed = chromium([f"--screenshot={shot}", f"--window-size={round(width)},{round(height) + 10}",
                            "--hide-scrollbars", alone.resolve().as_uri()])
        assert browsed.returncode == 0 and shot.is_file(), browsed.stderr[-2000:]
        assert _right_edge_is_blank(shot), shot


def test_figures_fit_their_titles_and_all_na_ones_are_listed_not_drawn(tmp_path):
    """A figure's title and subtitle wrap inside it (checked on matplotlib's PNG and on each SVG
    as Chromium draws it alone); a dataset × network whose every cell is n/a has no figure (no
    empty axes) but a line under "Not drawn" saying why."""
    study = Study(tmp_path)
    study.cell(ips(100, 110, 120), framework="torch")
    study.cell(ips(60, 61, 62), framework="tensorflow")
    study.cell(ips(200, 205), framework="torch", hardware="p100", gpus=1)
    study.cell(["failed:unsupported"] * 2, framework="torch", model="vgg16")
    study.refuse("numpy/vgg16/mnist: numpy does not support --gpus 1; it supports the CPU only", framework="numpy",
                 model="vgg16", gpus=1, hardware="p100")
    report = study.report(tmp_path / "report")
    names = sorted(p.name for p in report.figures)
    assert names == ["throughput_mnist_lenet.png", "throughput_mnist_lenet.svg"]
    assert report.skipped[0] == ("vgg16 on mnist: training speed: no cell has images/s: all 2 n/a "
                                 "(1 failed: unsupported, 1 refused)"), report.skipped
    html = report.index.read_text()
    not_drawn = html[html.index("<h3>Not drawn</h3>"):html.index("<h2>Tables</h2>")]
    assert "vgg16 on mnist: training speed: no cell has images/s" in not_drawn
    assert 'id="fig-throughput_mnist_vgg16"' not in html
    assert_figures_fit(report.figures, tmp_path)


def _write_scaled(source, target, factor, keep=None):
    """A copy of a table CSV with every number multiplied by `factor` (rows `keep` picks only)."""
    with open(source) as f:
        lines = list(csv.DictReader(f))
    for line in lines:
        for key in ("median", "min", "max"):
            if line[key]:
                line[key] = repr(float(line[key]) * factor)
    with open(target, "w", newline="") as f:
        writer = csv.DictWriter(f, tables.CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(line for line in lines if keep is None or keep(line))
    return target


def test_compare_round_trip_verdicts_and_exit_statuses(tmp_path, db_url):
    study = Study(tmp_path, url=db_url)
    study.cell(ips(1000, 1010, 990), framework="torch")
    study.cell(ips(200, 204, 198), framework="tensorflow")
    study.cell(ips(100, 160, 60), framework="mxnet")        # CV 46 %: a 33 % drop is no change for its noise
    study.cell(["failed:unsupported"] * 3, framework="caffe")
    report = study.report(tmp_path / "report")
    csv_path = tmp_path / "report" / "tables" / "images_per_sec.csv"
    name, entries = table_files.read_csv(csv_path)
    assert name == "images_per_sec" and len(entries) == 4
    torch = next(e for e in entries if e.settings["framework"] == "torch")
    assert torch.settings == setting_registry.filled(make_settings(framework="torch")) and torch.stats.n == 3
    assert torch.median == 1000.0 and round(torch.stats.cv, 4) == 0.01
    assert report.cells == 4
    workdir = user_dir(tmp_path)
    workdir[1]["ORCHESTRATOR_DB"] = study.url

    itself = orchestrator(["compare", "--base", str(csv_path), "--new", "s1"], workdir, timeout=120)
    assert itself.returncode == 0, itself.stdout + itself.stderr
    assert "3 cell(s) compared: 3 no change" in itself.stdout and "Benjamini-Hochberg over the 3 tested" in itself.stdout
    assert "not compared, no number: caffe/lenet/mnist" in itself.stdout
    report_dir = orchestrator(["compare", "--base", str(tmp_path / "report"), "--new", "latest"], workdir, timeout=120)
    assert report_dir.returncode == 0, report_dir.stderr

    # settings as the sides (as `--base build=A --new build=B` will): one sweep's cells, the key left out of the match
    frameworks = orchestrator(["compare", "--base", "framework=torch", "--new", "framework=tensorflow", "--sweep", "s1"],
                              workdir, timeout=120)
    assert frameworks.returncode == 1, frameworks.stdout + frameworks.stderr
    assert "where framework=torch" in frameworks.stdout and "1 cell(s) compared: 1 slower" in frameworks.stdout
    assert "REGRESSION: 1 cell(s)" in frameworks.stdout and "-79.9%" in frameworks.stdout, frameworks.stdout

    raised = _write_scaled(csv_path, tmp_path / "raised.csv", 1.5)
    slower = orchestrator(["compare", "--base", str(raised), "--new", "s1", "--threshold", "5"], workdir, timeout=120)
    assert slower.returncode == 1, slower.stdout + slower.stderr
    tail = slower.stdout[slower.stdout.index("REGRESSION"):]
    assert "torch/lenet/mnist on local" in tail and "tensorflow/lenet/mnist on local" in tail
    assert "mxnet" not in tail and "-33.3%" in tail
    assert orchestrator(["compare", "--base", str(raised), "--new", "s1", "--threshold", "40"], workdir,
                        timeout=120).returncode == 0  # slower, but by less than the threshold

    lowered = _write_scaled(csv_path, tmp_path / "lowered.csv", 0.6)
    faster = compare.compare(table_files.read_csv(lowered)[1], entries, tables.SPEC_BY_NAME["images_per_sec"].metric, 5)
    assert {m.base.settings["framework"]: m.verdict for m in faster.matched} == {
        "torch": "faster", "tensorflow": "faster", "mxnet": "no change"}

    typed = tmp_path / "typed.csv"  # published numbers typed in: the key columns and a median
    typed.write_text("dataset,model,framework,hardware,gpus,median\nmnist,lenet,torch,local,0,2000\n"
                     "mnist,lenet,vgg16,local,0,1\n")
    done = orchestrator(["compare", "--base", str(typed), "--new", "s1"], workdir, timeout=120)
    assert done.returncode == 0 and "only in base" in done.stdout and "only in new" in done.stdout, done.stdout
    assert "too few repeats" in done.stdout and "0.500" in done.stdout, done.stdout  # one number: shown, not tested

    for bad in (["--base", str(tmp_path / "nope.csv"), "--new", "s1"],
                ["--base", "s1"],
                ["--base", "s1", "--new", "s1", "--threshold", "-1"],
                ["--base", "s1", "--new", "s1", "--metric", "cpu_percent_avg"],
                ["--base", "s1", "--new", "s1", "--metric", "nope"],
                ["--base", "no-such-sweep", "--new", "s1"],
                ["--base", "nope=1", "--new", "framework=torch"],
                ["--base", "framework=", "--new", "framework=torch"],
                ["--base", str(tmp_path / "report" / "tables" / "images_per_sec.md"), "--new", "s1"]):
        done = orchestrator(["compare", *bad], workdir, timeout=120)
        assert done.returncode == 2, (bad, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and done.stderr.strip(), bad


def test_report_command_on_a_database_without_runs_says_so(tmp_path):
    done = orchestrator(["report", "--out", str(tmp_path / "r")], user_dir(tmp_path), timeout=120)
    assert done.returncode == 1 and "run a sweep first" in done.stderr and "Traceback" not in done.stderr


# --- a real sweep on this machine, its report in a real browser ------------------------------------

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium(args, timeout=120):
    """Headless Chromium with a fresh profile (the Debian package; scripts/test.sh installs it)."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("BROWSER TEST SKIPPED: no chromium; scripts/test.sh installs Debian's `chromium` when run as "
                    "root (or: sudo apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)


@pytest.mark.slow
def test_a_real_sweeps_report_renders_in_chromium(tmp_path, torch_python):
    """torch and numpy × 1 and 2 threads × 3 repeats, and gpus=1: numpy's refused at expansion,
    torch's fails (no GPU here, class unsupported). The report's page opens in Chromium with
    every figure loaded and the n/a reasons on it; compare of the sweep against its own CSV says
    no change, against it raised by 50 % names the cells found slower."""
    workdir = user_dir(tmp_path)
    start = time.time()
    done = orchestrator(["-m", "framework=torch,numpy", "model=lenet", "threads=1,2", "gpus=0,1", "repeats=3",
                         "batch_size=16", *FAST], workdir)
    assert done.returncode == 0, done.stderr
    # the two numpy cells refused for one reason: one line, counted, the cells named
    assert "refused 2 cells: " in done.stdout and done.stdout.count("numpy/lenet/synthetic") == 2
    wait_until_final(workdir, poll=3)
    assert orchestrator(["collect"], workdir).returncode == 0
    assert rows(workdir, "select count(*) from refusals") == [(2,)]

    out = tmp_path / "report"
    made = orchestrator(["report", "--sweep", "latest", "--out", str(out)], workdir, timeout=300)
    assert made.returncode == 0, made.stderr
    assert "6 cells" not in made.stdout and "8 cells" in made.stdout  # 6 placed, 2 refused
    for spec in tables.SPECS:
        assert (out / "tables" / f"{spec.metric.name}.csv").is_file()
        assert (out / "tables" / f"{spec.metric.name}.md").is_file()
    speed_md = (out / "tables" / "images_per_sec.md").read_text()
    assert "n/a (failed: unsupported)" in speed_md and "n/a (refused)" in speed_md
    assert "local, 1 thread" in speed_md and "local ×1, 2 threads" in speed_md
    figures = sorted(p.name for p in (out / "figures").iterdir())
    assert figures == ["scaling_threads.png", "scaling_threads.svg", "throughput_synthetic_lenet.png",
                       "throughput_synthetic_lenet.svg"]

    shot = tmp_path / "shot.png"
    page = (out / "index.html").resolve().as_uri()
    browsed = chromium([f"--screenshot={shot}", "--window-size=1400,3000", "--hide-scrollbars", page])
    assert browsed.returncode == 0 and shot.is_file(), browsed.stderr[-2000:]
    from PIL import Image

    image = Image.open(shot)
    assert image.size == (1400, 3000)
    colours = image.convert("RGB").resize((140, 300)).getcolors(140 * 300)
    assert len(colours) > 50 and max(n for n, _ in colours) < 0.9 * 140 * 300  # drawn, not a blank page
    assert_figures_fit(list((out / "figures").iterdir()), tmp_path)
    dom = chromium(["--virtual-time-budget=10000", "--dump-dom", page]).stdout
    assert 'data-figures="2"' in dom and 'data-figures-loaded="2"' in dom, dom[:500]
    assert "failed: unsupported" in dom and "numpy does not support --gpus 1" in dom
    assert '<td class="na">n/a<span class="why">refused' in dom

    csv_path = out / "tables" / "images_per_sec.csv"
    itself = orchestrator(["compare", "--base", str(csv_path), "--new", "latest"], workdir, timeout=120)
    assert itself.returncode == 0, itself.stdout + itself.stderr
    assert "4 cell(s) compared: 4 no change" in itself.stdout
    raised = _write_scaled(csv_path, tmp_path / "raised.csv", 1.5)
    slower = orchestrator(["compare", "--base", str(raised), "--new", "latest"], workdir, timeout=120)
    _, base = table_files.read_csv(raised)
    _, new = table_files.read_csv(csv_path)
    expected = compare.compare(base, new, tables.SPEC_BY_NAME["images_per_sec"].metric, 5.0).regressions
    quiet = [e for e in new if e.stats and e.stats.cv is not None and e.stats.cv < 0.1]
    assert len(expected) >= len(quiet)  # a drop of a third is beyond the noise of every quiet cell
    assert slower.returncode == (1 if expected else 0), slower.stdout
    for m in expected:
        assert compare.label(m.base) in slower.stdout[slower.stdout.index("REGRESSION"):]
    print(f"real sweep, report, browser and compare: {time.time() - start:.0f} s")


@pytest.mark.slow
def test_a_sweep_over_nodes_on_the_test_cluster_reports_node_scaling_with_the_emulation_caveat(slurm_workdir):
    """torch and tensorflow on 1 and 2 nodes of the test cluster, numpy too (refused across
    nodes): the report draws images/s and efficiency against nodes, tables them with numpy's
    2-node cell n/a and why, and says that these nodes shared one host, so that their efficiency
    says nothing about a network."""
    from helpers import SMALL

    launched = orchestrator(["-m", *SMALL, "framework=torch,tensorflow,numpy", "model=lenet", "dataset=synthetic",
                             "nodes=1,2", "batch_size=8"], slurm_workdir)
    assert launched.returncode == 0, launched.stderr
    wait_until_final(slurm_workdir)
    assert orchestrator(["collect"], slurm_workdir).returncode == 0
    assert rows(slurm_workdir, "select count(*), count(distinct node_addrs) from runs join cells on "
                               "cells.id = runs.cell_id where nodes = 2 and state = 'done'") == [(2, 1)], \
        rows(slurm_workdir, "select framework, nodes, state, error_class, error_message from runs join cells "
                            "on cells.id = runs.cell_id")
    out = slurm_workdir[0] / "report"
    made = orchestrator(["report", "--sweep", "latest", "--out", str(out)], slurm_workdir, timeout=300)
    assert made.returncode == 0, made.stderr
    assert {"scaling_nodes.svg", "scaling_nodes.png"} <= {p.name for p in (out / "figures").iterdir()}
    table = list(csv.DictReader((out / "tables" / "scaling_nodes.csv").read_text().splitlines()))
    got = {(r["framework"], r["nodes"]): r for r in table}
    assert sorted(got) == [("numpy", "1"), ("numpy", "2"), ("tensorflow", "1"), ("tensorflow", "2"),
                           ("torch", "1"), ("torch", "2")]
    for framework in ("torch", "tensorflow"):
        assert got[framework, "1"]["efficiency"] == "1.0" and float(got[framework, "2"]["efficiency"]) > 0
        assert "127.0.0.1" in got[framework, "2"]["shared_host"]  # the test cluster's nodes: one address
    assert (got["numpy", "2"]["status"], got["numpy", "2"]["reason"]) == ("n/a", "refused")
    assert "numpy does not support --nodes 2" in got["numpy", "2"]["detail"]
    html = (out / "index.html").read_text()
    section = html[html.index('<h2 id="nodes">'):html.index("<h2>Tables</h2>")]
    assert "Emulated nodes" in section and "says nothing about a network" in section
    assert "numpy does not support --nodes 2" in section
    assert 'id="fig-scaling_nodes"' in html


# --- presets -------------------------------------------------------------------------------------

def test_the_study_preset_expands_to_270_cells_by_hardware(tmp_path):
    """Before the Kepler builds (issue 39 item 6): 216 to run, 54 refused (18 each of tensorflow, torch and
    mxnet on k20m ×1/×2: their GPU builds start at 6.0, 6.0 and 5.0). Now all 270 run: those 54 at
    build=kepler (preset.builds.k20m), Caffe's and CNTK's K20m cells at their default build (their CUDA 10
    images cover 3.5), and every cell listed before keeps its id."""
    done = orchestrator(["-m", "+preset=study", "cluster=slurm", "dry_run=true"], user_dir(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "270 cells by hardware: 270 to run" in out
    counts = {line.split()[0] + (" " + line.split()[1] if line.split()[1].startswith("×") else ""): line.split()[-2:]
              for line in out.splitlines() if line.strip().startswith(("cpu", "k20m", "p100", "all"))}
    assert counts["cpu12"] == ["45", "45"] and counts["p100 ×2"] == ["45", "45"]
    assert counts["k20m ×1"] == ["45", "45"] and counts["k20m ×2"] == ["45", "45"] and counts["all"] == ["270", "270"]
    assert not [line for line in out.splitlines() if line.startswith("refused ")]
    header = next(line.split() for line in out.splitlines() if line.startswith("cell "))
    cells = [line.split() for line in out.splitlines() if re.match(r"^[0-9a-f]{12} ", line)]
    fw, hw, build = (header.index(name) for name in ("framework", "hardware", "build"))
    kepler = [c for c in cells if c[hw] == "k20m" and c[fw] in ("tensorflow", "torch", "mxnet")]
    assert len(kepler) == 54 and {c[build] for c in kepler} == {"kepler"}
    others = sorted(c[0] for c in cells if c not in kepler)
    assert {c[build] for c in cells if c not in kepler} == {"default"}
    # sha256 of the sorted ids of the 216 cells the dry run listed before the Kepler builds (cand47)
    assert hashlib.sha256(" ".join(others).encode()).hexdigest()[:16] == "1c2c091887ef70ac"
    # its CIFAR-10 VGG16 and GoogLeNet are the networks adapted for 32x32, the ImageNet ones only on ImageNet
    cases = {tuple(line.split()[2:4]) for line in out.splitlines() if re.match(r"^[0-9a-f]{12} ", line)}
    assert {("vgg16_cifar", "cifar10"), ("googlenet_cifar", "cifar10"), ("vgg16", "imagenet")} <= cases
    assert not {("vgg16", "cifar10"), ("googlenet", "cifar10"), ("vgg16_cifar", "imagenet")} & cases
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing


def test_the_study_presets_cifar10_cells_are_the_32x32_networks(tmp_path):
    """The study ran CIFAR-10's own networks: its CIFAR-10 AlexNet and ResNet cells are AlexNet-R
    and ResNet-56 at 32x32, not the ImageNet networks fed 224x224."""
    done = orchestrator(["-m", "+preset=study", "+preset/net=alexnet_cifar10,resnet50_cifar10", "framework=torch",
                         "+preset/on=cpu12", "cluster=slurm", "dry_run=true"], user_dir(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    listed = [[c.strip() for c in line.split("│")[2:5]] for line in done.stdout.splitlines() if line.startswith("│")]
    assert sorted(listed) == [["torch", "alexnet_r", "cifar10"], ["torch", "resnet56", "cifar10"]], done.stdout
    assert "ran at" not in done.stdout and " input " not in done.stdout


def test_an_imagenet_network_on_small_images_says_it_ran_at_224(tmp_path):
    """model=alexnet dataset=cifar10 keeps its cell (the ImageNet network, upsampled): the dry run's
    listing says it ran at 224x224 (trainers.common.inputs.ran_at), and only there."""
    done = orchestrator(["-m", "model=alexnet,alexnet_r", "dataset=cifar10", "framework=torch", "dry_run=true"],
                        user_dir(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split("│")[3].strip(): line for line in done.stdout.splitlines() if line.startswith("│")}
    assert "ran at 224x224" in rows["alexnet"] and "ran at" not in rows["alexnet_r"], done.stdout
    assert " input " in done.stdout


def test_the_report_says_an_imagenet_network_on_cifar10_ran_at_224(tmp_path, db_url):
    study = Study(tmp_path, url=db_url)
    study.cell(ips(100), model="alexnet", dataset="cifar10")
    study.cell(ips(900), model="alexnet_r", dataset="cifar10")
    md = table_files.markdown(study.tables()["images_per_sec"])
    assert "| cifar10 | alexnet (ran at 224x224) | torch |" in md and "| cifar10 | alexnet_r | torch |" in md, md


def test_the_threads_and_batch_presets(tmp_path):
    workdir = user_dir(tmp_path)
    done = orchestrator(["-m", "+preset=threads", "framework=numpy", "hardware=cpu12", "dry_run=true"], workdir)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "5 cells (dry run" in done.stdout  # 1, 2, 4, 8 and the node's 12
    assert "4 cell(s) left out: more threads than the node's CPUs" in done.stdout
    done = orchestrator(["-m", "+preset=batch", "framework=numpy", "dry_run=true"], workdir)
    assert done.returncode == 0 and "6 cells (dry run" in done.stdout, done.stderr[-3000:]


def test_compare_never_matches_a_one_node_cell_with_a_two_node_one():
    from orchestrator.metric_registry import BY_NAME
    from orchestrator.report import compare as comparing
    from orchestrator.report import query
    from orchestrator.report.tables import OK, Entry

    def entry(nodes, median):
        settings = {s: None for s in comparing.setting_registry.NAMES}
        settings.update(dataset="mnist", model="lenet", framework="torch", hardware="cpu12", gpus=0, nodes=nodes)
        return Entry(settings, OK, stats=query.Stats(3, median, median, 0.0, median, median))

    # the database stores a 1-node cell's nodes as empty; a typed CSV without the column leaves it empty too
    done = comparing.compare([entry(None, 1000.0), entry(2, 1800.0)], [entry(2, 1900.0), entry(1, 990.0)],
                             BY_NAME["images_per_sec"], threshold=5.0)
    assert {(m.base.settings["nodes"], m.new.settings["nodes"]) for m in done.matched} == {(2, 2), (None, 1)}


def test_an_inference_cell_below_the_validity_rule_is_reported_so(tmp_path, db_url):
    """The report's latency tables carry an inference cell's figures, with a note where its repeats timed
    fewer batches or seconds than the validity rule; a cell that met it has none; p99 n/a says why."""
    study = Study(tmp_path, url=db_url)
    rule = dict(phase="inference", min_batches=20, min_seconds=0.1)
    study.cell([{"images_per_sec": 900.0, "latency_p50_s": 0.004, "below_rule": 1.0}] * 2, framework="torch", **rule)
    study.cell([{"images_per_sec": 800.0, "latency_p50_s": 0.005, "latency_p99_s": 0.009, "below_rule": 0.0}],
               framework="jax", phase="inference", min_batches=64, min_seconds=10.0)
    shown = study.tables()
    short = entry(shown["latency_p50_s"], framework="torch", **rule)
    assert short.median == 0.004 and "below the validity rule in all of its 2 repeats" in short.detail
    assert entry(shown["latency_p50_s"], framework="jax", phase="inference", min_batches=64,
                 min_seconds=10.0).detail == ""
    assert entry(shown["latency_p99_s"], framework="torch", **rule).status != tables.OK


def test_a_dollar_in_a_name_from_the_database_is_drawn_as_text_not_tex(tmp_path):
    """A name a figure shows comes from the database (a model, a build, a framework a site added): an
    unbalanced `$` there is a dollar sign, where matplotlib's TeX parser raised and the report failed."""
    from matplotlib import pyplot, rc_context

    from orchestrator.report import drawing

    with rc_context(drawing.STYLE):
        fig, ax = pyplot.subplots()
        ax.set_title("model $\\frac{ on build=$(id)")
        ax.bar(["a $\\frac{1"], [1.0])
        written = drawing.save(fig, tmp_path, "dollars", "names with dollars")
    assert "model $\\frac{ on build=$(id)" in written.svg.read_text()
