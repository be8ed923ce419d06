"""Inference in the report (issue 38 items 6 and 7): energy per sample over the timed batches, the
per-batch table with batch_size=auto's points, the latency-throughput figure (in Chromium), and
`compare` on inference latency with the noise rule. Databases are made by hand (test_report.Study), on
SQLite and PostgreSQL; the energy on canned NVML counter and RAPL samples (no GPU or RAPL here)."""
import csv

import pytest
from test_report import Study, _write_scaled, assert_figures_fit, chromium
from helpers import orchestrator, user_dir

from orchestrator.job.metrics import compute
from orchestrator.report import compare, query, table_files

RANGE_UJ = 262_143_328_850


def _inference_events(first_s, batches, dt, images=4):
    """run_start, a first batch of `first_s`, one warm-up batch, then `batches` measured of `dt` each."""
    out = [{"event": "run_start", "t": 0.0, "phase": "inference", "model": "lenet"},
           {"event": "first_batch", "t": first_s, "dt": first_s, "cold": True, "images": images},
           {"event": "step", "t": first_s + dt, "step": 0, "dt": dt, "images": images},
           {"event": "warmup_end", "t": first_s + dt, "step": 1}]
    t = first_s + dt
    for i in range(batches):
        t += dt
        out.append({"event": "step", "t": t, "step": 1 + i, "dt": dt, "images": images})
    return out + [{"event": "run_end", "t": t, "steps": batches, "images": batches * images}], first_s + dt, t


def _counters(start, end, split, watts_before, watts_after, step=0.05):
    """GPU samples with NVML's energy counter (mJ) and RAPL samples (two packages, uJ, one wrapping) of a
    power that is watts_before until `split` and watts_after from it."""
    gpu, rapl, mj, uj = [], [], 5e6, [RANGE_UJ - 1e6, 0.0]
    t, last = start, start
    while t <= end + 1e-9:
        w = watts_before if t <= split else watts_after
        mj += w * (t - last) * 1e3
        uj = [(u + w / 2 * (t - last) * 1e6) % RANGE_UJ for u in uj]
        gpu.append({"t": t, "sampler": "gpu", "power_w": w, "energy_mj": mj, "mem_used_bytes": 2**30,
                    "proc_mem_bytes": 2**29, "util_gpu_percent": 90.0})
        rapl.append({"t": t, "sampler": "rapl", "energy_uj": [int(round(u)) for u in uj], "range_uj": [RANGE_UJ] * 2})
        last, t = t, t + step
    return gpu + rapl


def test_an_inference_runs_energy_per_sample_covers_its_timed_batches_not_its_first():
    """A 2 s first batch (compilation) at 300 W, then the warm-up and 20 timed batches of 0.05 s at 100 W
    (GPU, NVML's counter) and 100 W (CPU, RAPL, two packages, one counter wrapping): the energy per
    sample is 100 W x 1 s / 80 samples on both, not a share of the first batch's 600 J."""
    events, start, end = _inference_events(2.0, 20, 0.05)
    got = compute(events, _counters(0.0, end + 0.2, start, 300.0, 100.0))
    assert (start, end) == (pytest.approx(2.05), pytest.approx(3.05)) and got["first_batch_s"] == 2.0
    assert got["energy_per_image_j"] == pytest.approx(100.0 * 1.0 / 80, rel=1e-3)
    assert got["cpu_energy_per_image_j"] == pytest.approx(100.0 * 1.0 / 80, rel=1e-3)


def _point(ips, p50, p99=None, **more):
    return {"images_per_sec": ips, "latency_p50_s": p50, **({"latency_p99_s": p99} if p99 else {}), **more}


def _auto(batches):
    """One batch_size=auto run's metrics: its fastest point's figures and every point's."""
    out = {}
    for b, (ips, p50) in batches.items():
        out.update({f"auto.b{b:05d}.images_per_sec": ips, f"auto.b{b:05d}.latency_p50_s": p50,
                    f"auto.b{b:05d}.below_rule": 1.0})
    best = max(batches, key=lambda b: batches[b][0])
    return {**out, "images_per_sec": batches[best][0], "latency_p50_s": batches[best][1], "auto_batch": float(best)}


def _inference_study(tmp_path, url=None):
    study = Study(tmp_path, url=url)
    inf = dict(phase="inference", min_batches=8, min_seconds=0.5)
    for batch, ips, p50 in ((1, 900.0, 0.0011), (8, 3000.0, 0.0027)):
        study.cell([_point(ips * f, p50 / f, 0.004, energy_per_image_j=0.05 / batch, cpu_energy_per_image_j=0.02,
                           below_rule=float(batch == 8 and f == 0.99)) for f in (1.0, 1.01, 0.99)],
                   framework="torch", batch_size=batch, **inf)  # one repeat of batch 8 below the rule
    study.cell([_auto({1: (500.0, 0.002), 2: (800.0, 0.0025), 4: (1100.0, 0.0036)})] * 2, framework="jax",
               batch_size=1, batch_search="auto", **inf)
    study.cell([_point(ips, p50) for ips, p50 in ((400.0, 0.001), (150.0, 0.003), (600.0, 0.0006))],
               framework="mxnet", batch_size=1, **inf)  # CV ~60 %: noisy
    study.cell([{"images_per_sec": 77.0}], framework="torch", batch_size=8)  # a train cell: in no inference view
    return study


@pytest.fixture
def inference_report(tmp_path):
    study = _inference_study(tmp_path)
    return study, study.report(tmp_path / "report")


def test_every_batch_size_is_a_row_and_a_point_of_the_latency_throughput_figure(tmp_path, db_url):
    """torch at batch 1 and 8 and mxnet at 1 (three repeats each) and a jax batch_size=auto run (points 1,
    2, 4, two repeats) are six rows and six points, medians over the repeats; the train cell none."""
    study = _inference_study(tmp_path, db_url)
    with study.factory() as session:
        points = query.inference_points(session, [study.sweep])
    got = {(p.settings["framework"], p.batch, p.searched): (p.n, p.values["images_per_sec"]) for p in points}
    assert got == {("torch", 1, False): (3, 900.0), ("torch", 8, False): (3, 3000.0),
                   ("jax", 1, True): (2, 500.0), ("jax", 2, True): (2, 800.0), ("jax", 4, True): (2, 1100.0),
                   ("mxnet", 1, False): (3, 400.0)}
    report = study.report(tmp_path / "report")
    with (tmp_path / "report" / "tables" / "inference_by_batch.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [(r["series"], r["batch_size"], r["from"]) for r in table] == [
        ("jax auto", "1", "auto search"), ("jax auto", "2", "auto search"), ("jax auto", "4", "auto search"),
        ("mxnet", "1", "cell"), ("torch", "1", "cell"), ("torch", "8", "cell")]
    assert float(table[4]["energy_per_image_j"]) == 0.05 and table[5]["energy_per_image_j"] == "0.00625"
    assert table[0]["latency_p99_s"] == "" and table[0]["rule"] == "below" and table[4]["rule"] == "met"
    assert table[5]["rule"] == "below"  # one of its three repeats was
    assert table[3]["energy_per_image_j"] == "" and table[3]["rule"] == "n/a"
    svg = (tmp_path / "report" / "figures" / "latency_throughput.svg")
    assert svg in report.figures and all(f">b{b}<" in svg.read_text() for b in (1, 2, 4, 8))
    page = report.index.read_text()
    assert "Inference by batch size" in page and '<td class="num">0.05</td>' in page  # GPU J/sample, torch b1
    assert '<td class="num">3,000</td>' in page  # torch b8's samples/s, with its thousands marked


@pytest.mark.slow
def test_the_inference_report_renders_in_chromium(inference_report, tmp_path):
    """The page with the latency-throughput figure opens in Chromium, every figure decoded, none cut."""
    _, report = inference_report
    dom = chromium(["--virtual-time-budget=10000", "--dump-dom", report.index.resolve().as_uri()]).stdout
    drawn = len([f for f in report.figures if f.suffix == ".svg"])
    assert f'data-figures="{drawn}"' in dom and f'data-figures-loaded="{drawn}"' in dom, dom[:500]
    assert 'id="fig-latency_throughput"' in dom and "Inference by batch size" in dom
    assert_figures_fit([f for f in report.figures if f.stem == "latency_throughput"], tmp_path)


def test_compare_judges_inference_latency_with_the_noise_rule(inference_report, tmp_path):
    """`compare --metric latency_p50_s` on inference cells: latencies 1.5 x lower in the base make the
    sweep's quiet cells worse (a regression, exit 1) and its noisy one (CV ~60 %) no change; the same
    latencies as base no change; one with two repeats is not tested."""
    study, _ = inference_report
    workdir = user_dir(tmp_path)
    workdir[1]["ORCHESTRATOR_DB"] = study.url
    csv_path = tmp_path / "report" / "tables" / "latency_p50_s.csv"
    itself = orchestrator(["compare", "--base", str(csv_path), "--new", "s1", "--metric", "latency_p50_s"], workdir)
    assert itself.returncode == 0 and "4 cell(s) compared" in itself.stdout, itself.stdout + itself.stderr
    lowered = _write_scaled(csv_path, tmp_path / "lowered.csv", 1 / 1.5)
    worse = orchestrator(["compare", "--base", str(lowered), "--new", "s1", "--metric", "latency_p50_s"], workdir)
    assert worse.returncode == 1 and "2 worse" in worse.stdout, worse.stdout + worse.stderr
    _, base = table_files.read_csv(lowered)
    verdicts = {m.base.settings["framework"] + str(m.base.settings["batch_size"]): m.verdict
                for m in compare.compare(base, table_files.read_csv(csv_path)[1], compare.metric_def("latency_p50_s"),
                                         5.0).matched}
    assert verdicts == {"torch1": "worse", "torch8": "worse", "jax1": "too few repeats", "mxnet1": "no change"}
