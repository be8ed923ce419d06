"""The CPU packages' energy (RAPL) on canned powercap trees: which zones count, the counter's
wrap, the window's ends, and why it is n/a where it cannot be read (this machine has no RAPL)."""
from pathlib import Path

import pytest

from orchestrator.job import energy
from orchestrator.job.metrics import compute
from orchestrator.job.monitor import Monitor, RaplSampler, SamplerUnavailable, default_samplers
from orchestrator.job.monitor.rapl import package_zones
from test_metrics import stream

RANGE_UJ = 262_143_328_850  # a Xeon's max_energy_range_uj


def zone(root: Path, folder: str, name: str, uj: int, range_uj: int = RANGE_UJ) -> Path:
    path = root / folder
    path.mkdir(parents=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{uj}\n")
    (path / "max_energy_range_uj").write_text(f"{range_uj}\n")
    return path


def canned_tree(root: Path) -> Path:
    """Two packages (with their core and DRAM subzones as Linux nests them), the MMIO twin of
    package 0, a platform zone (psys) and eleven packages' worth of ordering (10 after 2)."""
    zone(root, "intel-rapl:0", "package-0", 1_000)
    zone(root, "intel-rapl:0/intel-rapl:0:0", "core", 500)
    zone(root, "intel-rapl:0/intel-rapl:0:1", "dram", 300)
    zone(root, "intel-rapl:1", "package-1", 2_000)
    zone(root, "intel-rapl:2", "psys", 9_000)
    zone(root, "intel-rapl:10", "package-10", 3_000)
    zone(root, "intel-rapl-mmio:0", "package-0", 1_000)
    (root / "intel-rapl:0:0").symlink_to(root / "intel-rapl:0" / "intel-rapl:0:0")  # as /sys lists subzones too
    return root


def test_only_package_zones_count_in_package_order(tmp_path):
    zones = package_zones(canned_tree(tmp_path))
    assert [z.name for z in zones] == ["intel-rapl:0", "intel-rapl:1", "intel-rapl:10"]


def test_the_sampler_reads_each_package_and_keeps_its_zones_for_the_record(tmp_path):
    root = canned_tree(tmp_path)
    sampler = RaplSampler(root)
    sampler.start(1)
    assert sampler.sample() == {"energy_uj": [1_000, 2_000, 3_000], "range_uj": [RANGE_UJ] * 3}
    (root / "intel-rapl:1" / "energy_uj").write_text("2500\n")
    sampler.start(2)  # the trainer's pid: the node's packages stay
    assert sampler.sample()["energy_uj"] == [1_000, 2_500, 3_000]
    sampler.close()
    assert sampler.describe()["zones"] == ["intel-rapl:0", "intel-rapl:1", "intel-rapl:10"]


def test_no_rapl_or_an_unreadable_counter_is_n_a_with_the_reason(tmp_path, monkeypatch):
    with pytest.raises(SamplerUnavailable, match="no RAPL package zone under .*CPU energy n/a"):
        RaplSampler(tmp_path / "absent").start(1)
    root = canned_tree(tmp_path / "tree")
    (root / "intel-rapl:1" / "energy_uj").unlink()
    (root / "intel-rapl:1" / "energy_uj").mkdir()  # unreadable as a file
    with pytest.raises(SamplerUnavailable, match="cannot be read"):
        RaplSampler(root).start(1)
    # root reads anything, so the kernel's root-only mode (Linux >= 5.10) is a refused read here
    real = Path.read_text

    def refused(path, *args, **kwargs):
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refused)
    with pytest.raises(SamplerUnavailable, match=r"energy_uj is readable by root only .*CVE-2020-8694"):
        RaplSampler(canned_tree(tmp_path / "other")).start(1)


def test_a_job_here_records_why_its_cpu_energy_is_n_a():
    """This VM has no /sys/class/powercap: the monitor's entry says so, and the run goes on."""
    monitor = Monitor(default_samplers(0, {}), period_s=0.01)
    monitor.start(1)
    monitor.stop()
    (rapl,) = [m for m in monitor.describe() if m["name"] == "rapl"]
    assert rapl["samples"] == 0 and "CPU energy n/a" in rapl["unavailable"], rapl


def test_unwrapping_adds_the_range_at_each_step_down():
    assert energy.unwrapped([90, 95, 3, 8, 1], 100) == [90, 95, 103, 108, 201]


def rapl_samples(times, watts, start_uj, range_uj):
    """Samples of two packages drawing `watts` each, their counters wrapping at `range_uj`."""
    out, uj = [], list(start_uj)
    for i, t in enumerate(times):
        if i:
            uj = [(u + w * (t - times[i - 1]) * 1e6) % range_uj for u, w in zip(uj, watts)]
        out.append({"t": t, "sampler": "rapl", "energy_uj": [int(round(u)) for u in uj], "range_uj": [range_uj] * 2})
    return out


def test_cpu_energy_over_the_measured_window_across_a_wrap():
    """Two packages at 50 W and 30 W, sampled every 0.1 s; package 0's counter wraps inside the
    window: 80 W x the window's length, per image too, through metrics.compute."""
    events, start, end = stream()  # a 0.9 s window of 320 images
    times = [start - 1.0 + 0.1 * i for i in range(int((end - start + 2.0) / 0.1) + 1)]
    samples = rapl_samples(times, (50.0, 30.0), (RANGE_UJ - 60e6, 0), RANGE_UJ)
    assert any(b["energy_uj"][0] < a["energy_uj"][0] for a, b in zip(samples, samples[1:]))  # it wraps
    m = compute(events, samples)
    assert m["cpu_energy_j"] == pytest.approx(80.0 * (end - start), rel=1e-6)
    assert m["cpu_energy_per_image_j"] == pytest.approx(80.0 * (end - start) / 320, rel=1e-6)


def test_samples_that_do_not_cover_the_window_give_no_cpu_energy():
    events, start, end = stream()
    late = rapl_samples([start + 0.2 + 0.1 * i for i in range(20)], (50.0, 30.0), (0, 0), RANGE_UJ)
    m = compute(events, late)
    assert "cpu_energy_j" not in m and "images_per_sec" in m
