"""The aggregation on a real recording: a PyTorch ResNet-50 run (batch 128, fp32, 300 steps after
30 warm-up) under the job's monitor on an NVIDIA H200 (driver 580.159.04, CUDA 13.0, torch
2.11.0+cu130, NVML sampled every 0.1 s, 3 s idle phase first), recorded by
benchmarks/gpu_check.py. tests/data/h200-resnet50-b128/ holds its events, samples and the
result the job wrote from them at the time.

The H200 has NVML's energy counter, so the recording can check the trapezoid rule (the only
method on a K20m or P100) against the counter on the same samples, and can be cut to make the
awkward series a real job meets: one with a gap, one whose GPU samples start late.
"""
import gzip
import json
from pathlib import Path

import pytest

from orchestrator.job import energy, metrics
from orchestrator.job.metrics import compute

DATA = Path(__file__).parent / "data" / "h200-resnet50-b128"


def jsonl(name):
    with gzip.open(DATA / name, "rt") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def recording():
    events, samples = jsonl("events.jsonl.gz"), jsonl("samples.jsonl.gz")
    return events, samples, metrics.measured_window(events)


def gpu_run(samples):
    return [s for s in samples if s["sampler"] == "gpu" and s.get("phase") != "idle"]


def test_the_recording_gives_the_figures_the_job_wrote_then(recording):
    events, samples, window = recording
    m = compute(events, samples)
    written = json.loads((DATA / "result.json").read_text())
    assert m.energy["method"] == written["energy"]["method"] == "counter"
    for name, value in written["metrics"].items():
        assert m[name] == pytest.approx(value, rel=1e-9), name
    assert m.reason is None
    # the figures themselves are a real H200 under ResNet-50
    assert 300 < m["gpu_power_avg_w"] <= m["gpu_power_peak_w"] <= 700  # the H200's power limit
    assert 50 < m["gpu_idle_power_w"] < 150 and m["gpu_util_avg"] > 90
    assert m["energy_per_image_j"] == pytest.approx(m["energy_j"] / window["images"])
    assert 0 < m["energy_net_j"] < m["energy_j"]


def test_counter_and_trapezoid_energy_agree_within_five_percent(recording):
    events, samples, window = recording
    counter = compute(events, samples)["energy_j"]
    run = gpu_run(samples)
    trapezoid = energy.trapezoid_energy([s["t"] for s in run], [s["power_w"] for s in run],
                                         window["start"], window["end"])
    assert trapezoid == pytest.approx(counter, rel=0.05)
    # and without the counter in the samples (a K20m or P100), the job takes the trapezoid path
    no_counter = [{k: v for k, v in s.items() if k != "energy_mj"} for s in samples]
    m = compute(events, no_counter)
    assert m.energy["method"] == "trapezoid" and m["energy_j"] == pytest.approx(trapezoid)


def test_a_gap_in_the_series_is_bridged_and_named(recording):
    events, samples, window = recording
    whole = compute(events, samples)
    mid = (window["start"] + window["end"]) / 2
    holed = [s for s in samples if not (s["sampler"] == "gpu" and mid - 1.5 < s["t"] < mid + 1.5)]
    m = compute(events, holed)
    # the counter reads through the gap: NVML kept counting while nobody sampled
    assert m.energy["method"] == "counter" and m["energy_j"] == pytest.approx(whole["energy_j"], rel=1e-3)
    assert m.energy["max_gap_s"] == pytest.approx(3.0, abs=0.2) and whole.energy["max_gap_s"] < 0.5
    assert "GPU samples missing for 3." in m.reason
    # the trapezoid rule bridges it with a straight line: steady training power keeps it close
    no_counter = [{k: v for k, v in s.items() if k != "energy_mj"} for s in holed]
    assert compute(events, no_counter)["energy_j"] == pytest.approx(whole["energy_j"], rel=0.05)
    # averages are over the samples that exist: fewer of them, about the same power
    assert m["gpu_power_avg_w"] == pytest.approx(whole["gpu_power_avg_w"], rel=0.02)


def test_samples_from_before_warmup_end_are_left_out_of_the_averages(recording):
    events, samples, window = recording
    run = gpu_run(samples)
    early = [s for s in run if s["t"] < window["start"]]
    inside = metrics.window_samples(run, window["start"], window["end"])
    assert early and inside  # the series starts well before warm-up ends (start-up, warm-up)
    m = compute(events, samples)
    assert m["gpu_power_avg_w"] == pytest.approx(sum(s["power_w"] for s in inside) / len(inside))
    # taking the start-up in would have changed the figure: the cut matters on this series
    everything = sum(s["power_w"] for s in run) / len(run)
    assert abs(everything - m["gpu_power_avg_w"]) > 5


def test_a_series_that_starts_after_the_window_opened_falls_back_to_trapezoids(recording):
    events, samples, window = recording
    late = [s for s in samples if not (s["sampler"] == "gpu" and s.get("phase") != "idle"
                                       and s["t"] < window["start"] + 1.0)]
    m = compute(events, late)
    # the counter cannot be read at the window's start, so the power samples are integrated,
    # the first one held back to the start
    assert m.energy["method"] == "trapezoid" and m.energy["max_gap_s"] >= 1.0
    assert m["energy_j"] == pytest.approx(compute(events, samples)["energy_j"], rel=0.05)
