"""Metric aggregation over hand-made trainer event streams and host samples."""
import json

import pytest

from orchestrator.job import energy, metrics
from orchestrator import metric_registry
from orchestrator.metric_registry import unit_of
from orchestrator.job.metrics import (
    Metrics, NoWindow, compute, host_metrics, measured_steps, measured_window, throughput, window_samples,
)

T0 = 1_700_000_000.0


def stream(warmup_dts=(5.0, 5.0), measured=((0.1, 64), (0.2, 64), (0.1, 64), (0.4, 64), (0.1, 64))):
    """run_start, warm-up steps, warmup_end, measured steps, run_end, with consistent clocks."""
    t = T0
    events = [{"event": "run_start", "t": t, "framework": "torch", "params": 61706}]
    step = 0
    for dt in warmup_dts:
        t += dt
        events.append({"event": "step", "t": t, "step": step, "dt": dt, "images": 64, "loss": 2.3})
        step += 1
    events.append({"event": "warmup_end", "t": t, "step": len(warmup_dts)})
    start = t
    for dt, images in measured:
        t += dt
        events.append({"event": "step", "t": t, "step": step, "dt": dt, "images": images, "loss": 1.0})
        step += 1
    events.append({"event": "run_end", "t": t, "steps": len(measured), "images": sum(i for _, i in measured)})
    return events, start, t


def test_window_opens_at_warmup_end_and_closes_at_run_end():
    events, start, end = stream()
    assert measured_window(events) == {"start": start, "end": end, "steps": 5, "images": 320}


def test_warmup_steps_are_excluded_from_throughput():
    events, _, _ = stream(warmup_dts=(50.0, 50.0, 50.0))
    assert [s["step"] for s in measured_steps(events)] == [3, 4, 5, 6, 7]
    m = throughput(events)
    # 320 images over 0.9 s of measured step time; the 150 s of warm-up would give ~2 img/s.
    assert m["images_per_sec"] == pytest.approx(320 / 0.9)
    assert m["step_time_mean"] == pytest.approx(0.18)
    assert m["step_time_median"] == pytest.approx(0.1)


def test_per_step_rate_statistics_on_known_numbers():
    # rates: 640, 320, 640, 160, 640 -> median 640; |x - 640| = 0, 320, 0, 480, 0 -> MAD 0
    events, _, _ = stream()
    m = throughput(events)
    assert m["images_per_sec_median"] == pytest.approx(640.0)
    assert m["images_per_sec_mean"] == pytest.approx((640 + 320 + 640 + 160 + 640) / 5)
    assert m["images_per_sec_mad"] == pytest.approx(0.0)
    # rates 100, 200, 300, 400, 1000 -> median 300; deviations 200, 100, 0, 100, 700 -> MAD 100
    events, _, _ = stream(measured=((1.0, 100), (1.0, 200), (1.0, 300), (1.0, 400), (1.0, 1000)))
    m = throughput(events)
    assert m["images_per_sec_median"] == pytest.approx(300.0)
    assert m["images_per_sec_mad"] == pytest.approx(100.0)
    assert m["images_per_sec_std"] == pytest.approx(316.22776601683796)  # population std
    assert m["images_per_sec"] == pytest.approx(2000 / 5.0)


def test_steps_after_warmup_end_in_stream_order_not_by_time_stamp():
    # A coarse clock can stamp the first measured step with warmup_end's own time; it is still
    # measured, because it comes after warmup_end in the stream. The warm-up step is not.
    events = [
        {"event": "step", "t": T0 + 1.0, "step": 0, "dt": 1.0, "images": 10},
        {"event": "warmup_end", "t": T0 + 1.0, "step": 1},
        {"event": "step", "t": T0 + 1.0, "step": 1, "dt": 0.5, "images": 10},
        {"event": "step", "t": T0 + 1.5, "step": 2, "dt": 0.5, "images": 10},
        {"event": "run_end", "t": T0 + 1.5, "steps": 2, "images": 20},
    ]
    assert [s["step"] for s in measured_steps(events)] == [1, 2]
    assert throughput(events)["images_per_sec"] == pytest.approx(20.0)


def test_samples_are_cut_to_the_window_and_other_samplers_ignored():
    events, start, end = stream()
    samples = [
        {"t": start - 1.0, "sampler": "host", "proc_cpu_percent": 999.0, "proc_rss_bytes": 10**12,
         "host_cpu_percent": 100.0, "host_mem_used_bytes": 10**12},  # start-up: outside
        {"t": start + 0.1, "sampler": "host", "proc_cpu_percent": 100.0, "proc_rss_bytes": 1000,
         "host_cpu_percent": 50.0, "host_mem_used_bytes": 5000},
        {"t": start + 0.5, "sampler": "host", "proc_cpu_percent": 200.0, "proc_rss_bytes": 3000,
         "host_cpu_percent": 70.0, "host_mem_used_bytes": 7000},
        {"t": start + 0.6, "sampler": "nvml", "proc_cpu_percent": 5000.0, "gpu_mem_used_bytes": 1},
        {"t": end + 2.0, "sampler": "host", "proc_cpu_percent": 999.0, "proc_rss_bytes": 10**12,
         "host_cpu_percent": 100.0, "host_mem_used_bytes": 10**12},  # tear-down: outside
    ]
    inside = window_samples(samples, start, end)
    assert [s["t"] for s in inside] == [start + 0.1, start + 0.5, start + 0.6]
    assert host_metrics(inside) == {
        "cpu_percent_avg": 150.0, "cpu_percent_peak": 200.0, "rss_peak_bytes": 3000.0,
        "host_cpu_percent_avg": 60.0, "host_mem_used_peak_bytes": 7000.0,
    }


def test_compute_returns_all_metrics_as_a_json_ready_dict():
    events, start, end = stream()
    samples = [{"t": start + 0.2, "sampler": "host", "proc_cpu_percent": 120.0, "proc_rss_bytes": 2**20,
                "host_cpu_percent": 40.0, "host_mem_used_bytes": 2**30}]
    m = compute(events, samples)
    assert isinstance(m, Metrics) and m.reason is None
    assert m.window == {"start": start, "end": end, "steps": 5, "images": 320}
    assert set(m) == {"images_per_sec", "images_per_sec_mean", "images_per_sec_median", "images_per_sec_std",
                      "images_per_sec_mad", "step_time_mean", "step_time_median", "cpu_percent_avg",
                      "cpu_percent_peak", "rss_peak_bytes", "host_cpu_percent_avg", "host_mem_used_peak_bytes"}
    assert json.loads(json.dumps(m)) == dict(m)
    assert set(m) <= set(metric_registry.BY_NAME), "every metric computed is declared"


def test_a_sequence_networks_run_counts_tokens_per_second_too():
    """DLBench's LSTM on ptb-shaped data: its images are sequences of seq_len tokens (run_start's
    input_shape [seq_len]); an image network's run has no tokens_per_sec."""
    events, _, _ = stream()
    events[0].update(model="lstm", like="ptb", input_shape=[64], classes=10000)
    m = compute(events)
    assert m["tokens_per_sec"] == pytest.approx(m["images_per_sec"] * 64) and m["images_per_sec"] > 0
    assert unit_of("tokens_per_sec") == "tok/s"
    events[0].update(model="lenet", like="mnist", input_shape=[1, 28, 28], classes=10)
    assert "tokens_per_sec" not in compute(events)


def test_no_run_end_gives_no_metrics_and_quotes_the_error():
    events, _, _ = stream()
    events = [e for e in events if e["event"] != "run_end"]
    events.append({"event": "error", "t": T0 + 99, "class": "out_of_memory", "message": "CUDA out of memory"})
    with pytest.raises(NoWindow, match="no run_end"):
        measured_window(events)
    m = compute(events, [])
    assert dict(m) == {} and m.window is None
    assert "no run_end" in m.reason and "out_of_memory: CUDA out of memory" in m.reason


def test_no_warmup_end_is_no_window():
    events, _, _ = stream()
    events = [e for e in events if e["event"] != "warmup_end"]
    m = compute(events, [])
    assert dict(m) == {} and "no warmup_end" in m.reason


def test_empty_window_has_no_throughput_and_says_why():
    events, start, end = stream(measured=())
    m = compute(events, [{"t": start, "sampler": "host", "proc_cpu_percent": 10.0}])
    assert "images_per_sec" not in m
    assert m["cpu_percent_avg"] == 10.0
    assert "no throughput" in m.reason and "0 steps" in m.reason


def test_missing_host_samples_are_reported_not_zero():
    events, _, _ = stream()
    m = compute(events, [])
    assert "images_per_sec" in m and "cpu_percent_avg" not in m
    assert "no host sample" in m.reason


def test_the_registry_declares_each_metric_once_with_its_view_column():
    names = [m.name for m in metric_registry.METRICS]
    columns = [m.column for m in metric_registry.VIEW_METRICS]
    assert len(set(names)) == len(names) and len(set(columns)) == len(columns)
    assert all(m.unit and m.description for m in metric_registry.METRICS)
    rss = metric_registry.BY_NAME["rss_peak_bytes"]
    assert (rss.unit, rss.column, rss.divisor, rss.column_unit) == ("B", "peak_rss_mb", 2**20, "MB")
    assert metric_registry.BY_NAME["images_per_sec"].larger_is_better is True
    assert metric_registry.BY_NAME["energy_per_image_j"].larger_is_better is False
    assert unit_of("images_per_sec") == "img/s" and unit_of("gpu_temp_peak_c") == "°C"


def test_unit_of_unknown_names_by_suffix():
    assert unit_of("gpu_mem_peak_bytes") == "B"
    assert unit_of("nvlink_rx_bytes") == "B"
    assert unit_of("mystery") is None


def gpu_sample(t, power, mem=2**30, proc=2**29, util=90.0, energy_mj=None, phase=None):
    s = {"t": t, "sampler": "gpu", "power_w": power, "mem_used_bytes": mem, "proc_mem_bytes": proc,
         "util_gpu_percent": util, "util_mem_percent": 40.0, "sm_clock_mhz": 1300.0, "temp_c": 60.0}
    if energy_mj is not None:
        s["energy_mj"] = energy_mj
    if phase:
        s["phase"] = phase
    return s


def test_gpu_metrics_over_the_window_with_idle_power_and_net_energy():
    events, start, end = stream()  # a 0.9 s window of 320 images
    idle = [gpu_sample(T0 - 10 + 0.1 * i, 200.0 if i < 4 else 50.0, phase="idle") for i in range(6)]
    run = [gpu_sample(start - 0.1, 300.0, mem=10**9),  # start-up: outside the window
           gpu_sample(start + 0.1, 100.0), gpu_sample(start + 0.5, 300.0, mem=2 * 2**30, proc=2**30),
           gpu_sample(end + 0.1, 100.0)]
    m = compute(events, run + idle)
    assert m["gpu_power_avg_w"] == 200.0 and m["gpu_power_peak_w"] == 300.0
    assert m["gpu_mem_peak_bytes"] == 2 * 2**30 and m["gpu_mem_avg_bytes"] == 1.5 * 2**30
    assert m["gpu_proc_mem_peak_bytes"] == 2**30 and m["gpu_util_avg"] == 90.0
    # idle power is the idle phase's last third (the GPU still held its clocks at first)
    assert m["gpu_idle_power_w"] == 50.0
    # no energy counter: the trapezoid rule over power, the window's ends interpolated
    # the longest stretch without a sample: start+0.5 s to the window's end (0.9 s)
    assert m.energy == {"method": "trapezoid", "samples": 4, "max_gap_s": pytest.approx(0.4, abs=1e-3)}
    expected = energy.trapezoid_energy([s["t"] for s in run], [s["power_w"] for s in run], start, end)
    assert m["energy_j"] == pytest.approx(expected)
    assert m["energy_net_j"] == pytest.approx(expected - 50.0 * (end - start))
    assert m["energy_per_image_j"] == pytest.approx(expected / 320)
    assert m["images_per_sec_per_w"] == pytest.approx(m["images_per_sec"] / 200.0)
    assert set(m) <= set(metric_registry.BY_NAME), "every metric computed is declared"


def test_energy_counter_is_preferred_where_every_sample_has_one():
    events, start, end = stream()
    run = [gpu_sample(start - 0.2 + 0.1 * i, 100.0, energy_mj=1e6 + 150.0 * 100 * i) for i in range(14)]
    m = compute(events, run)
    assert m.energy == {"method": "counter", "samples": 14, "max_gap_s": pytest.approx(0.1, abs=1e-3)}
    assert m["energy_j"] == pytest.approx(150.0 * (end - start))  # 150 W by the counter, not 100 by power
    assert "energy_net_j" not in m  # no idle phase, no net energy
    assert "short window" in m.reason


def test_cpu_runs_have_no_gpu_metrics_and_no_complaint():
    events, start, _ = stream()
    m = compute(events, [{"t": start + 0.1, "sampler": "host", "proc_cpu_percent": 10.0}])
    assert not any(k.startswith(("gpu_", "energy")) for k in m) and m.energy is None
    assert m.reason is None
