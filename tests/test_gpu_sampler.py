"""The GPU sampler (orchestrator/job/monitor/nvml.py): what it records without NVML, and what it samples.

Which GPUs it watches is pure and tested on its own (tests/test_gpu_ids.py); so is the energy
arithmetic, here. Where this machine has no NVML (CI), the no-GPU path runs for real. NVML
itself is replaced by a stand-in in one test (the sampling logic: process filtering, totals,
unsupported readings); the real NVML path runs where a GPU is present
(`test_real_nvml_samples_this_machines_gpu`).
"""
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from orchestrator.job import energy, metrics
from orchestrator.job.monitor import GpuSampler, HostSampler, Monitor, SamplerUnavailable


def test_gpus_zero_records_no_gpu_monitor_and_the_run_carries_on(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    monitor = Monitor([HostSampler(), GpuSampler(0)], period_s=0.05, path=tmp_path / "s.jsonl")
    monitor.measure_idle(1.0).start(proc.pid)
    proc.wait()
    samples = monitor.stop()
    assert samples and all(s["sampler"] == "host" for s in samples)
    (gpu,) = [d for d in monitor.describe() if d["name"] == "gpu"]
    assert gpu == {"name": "gpu", "method": "nvml", "samples": 0,
                   "unavailable": "no GPU monitor: the cell asks for no GPU (gpus=0)"}


#: The skips the `gpu` markers below allow under CI (tests/ci_skips.py): one path or the other runs.
HAS_NVML = "this machine has NVML; the real path is tested below"
NO_NVML = "needs an NVIDIA GPU and its driver (NVML)"


def _nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.gpu(reason=HAS_NVML)
@pytest.mark.skipif(_nvml_works(), reason=HAS_NVML)
def test_without_nvml_the_reason_is_recorded_for_real():
    sampler = GpuSampler(1, environ={})
    with pytest.raises(SamplerUnavailable) as caught:
        sampler.start(os.getpid())
    message = str(caught.value)
    assert message.startswith("no GPU monitor: ")
    assert "NVML" in message or "nvidia-ml-py" in message


class FakeNVML:
    """A stand-in for the pynvml module: two GPUs, the second without an energy counter or a
    temperature sensor, and a compute-process list holding the trainer's child and a stranger."""

    NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = 1, 0

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    def __init__(self, trainer_child: int):
        self.child = trainer_child
        self.calls: dict[str, int] = {}
        self.shut = False
        self.t0 = time.time()

    def _count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    def nvmlInit(self): pass
    def nvmlShutdown(self): self.shut = True
    def nvmlDeviceGetCount(self): return 2
    def nvmlDeviceGetHandleByIndex(self, i): return f"h{i}"
    def nvmlDeviceGetUUID(self, h): return {"h0": b"GPU-0000", "h1": b"GPU-1111"}[h]
    def nvmlDeviceGetName(self, h): return b"Tesla P100-PCIE-16GB"
    def nvmlSystemGetDriverVersion(self): return b"535.104.05"
    def nvmlSystemGetCudaDriverVersion(self): return 12020
    def nvmlDeviceGetEnforcedPowerLimit(self, h): return 250000

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=16 * 2**30, used={"h0": 3 * 2**30, "h1": 2**30}[h])

    def nvmlDeviceGetPowerUsage(self, h): return {"h0": 150000, "h1": 100000}[h]
    def nvmlDeviceGetUtilizationRates(self, h): return SimpleNamespace(gpu=90, memory=40)
    def nvmlDeviceGetClockInfo(self, h, kind): return 1300

    def nvmlDeviceGetTemperature(self, h, kind):
        self._count("temp:" + h)
        if h == "h1":
            raise self.NVMLError_NotSupported("Not Supported")
        return 60

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if h == "h1":
            raise self.NVMLError_NotSupported("Not Supported")
        return 1_000_000 + int((time.time() - self.t0) * 150_000)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=self.child, usedGpuMemory=2**30),
                SimpleNamespace(pid=1, usedGpuMemory=5 * 2**30)]  # someone else's process


def test_sampler_with_a_stand_in_for_nvml_watches_the_jobs_gpu_and_its_processes(tmp_path):
    # The trainer is a parent whose child holds the GPU memory: only a tree walk finds it.
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys; subprocess.run([sys.executable, '-c', "
                               "'import time; time.sleep(1.0)'])"])
    time.sleep(0.3)
    import psutil

    child = psutil.Process(parent.pid).children()[0].pid
    nvml = FakeNVML(child)
    sampler = GpuSampler(1, environ={"CUDA_VISIBLE_DEVICES": "GPU-1111"}, nvml=nvml)
    monitor = Monitor([sampler], period_s=0.05, path=tmp_path / "s.jsonl")
    monitor.measure_idle(0.2).start(parent.pid)
    parent.wait()
    samples = monitor.stop()
    idle = [s for s in samples if s.get("phase") == "idle"]
    run = [s for s in samples if s.get("phase") != "idle"]
    assert len(idle) >= 3 and len(run) >= 5
    last = run[1]  # while the child runs
    assert [g["uuid"] for g in last["gpus"]] == ["GPU-1111"]  # the job's GPU, not NVML's first
    assert last["power_w"] == 100.0 and last["mem_used_bytes"] == 2**30
    assert last["proc_mem_bytes"] == 2**30 and last["gpus"][0]["other_procs"] == 1
    assert "temp_c" not in last and "energy_mj" not in last  # not supported on this GPU
    assert nvml.calls["temp:h1"] == 1, "an unsupported reading is not asked for again"
    (described,) = monitor.describe()
    assert described["energy_method"] == "trapezoid" and described["driver"] == "535.104.05"
    assert described["cuda_driver"] == "12.2" and described["selected_by"] == "CUDA_VISIBLE_DEVICES"
    assert described["gpus"] == [{"index": 1, "uuid": "GPU-1111", "name": "Tesla P100-PCIE-16GB",
                                  "memory_total_bytes": 16 * 2**30, "power_limit_w": 250.0,
                                  "energy_counter": False}]
    assert described["idle_samples"] == len(idle) and described["samples"] == len(run)
    assert nvml.shut

    # and on GPU 0, which has an energy counter, the counter is read
    nvml0 = FakeNVML(child)
    s0 = GpuSampler(1, environ={"CUDA_VISIBLE_DEVICES": "0"}, nvml=nvml0)
    s0.start(os.getpid())
    rec = s0.sample()
    assert rec["energy_mj"] >= 1_000_000 and rec["temp_c"] == 60 and s0.describe()["energy_method"] == "counter"


def test_trapezoid_energy_interpolates_the_window_ends():
    t = [0.0, 1.0, 2.0, 3.0]
    w = [100.0, 100.0, 200.0, 200.0]
    assert energy.trapezoid_energy(t, w, 0.0, 3.0) == pytest.approx(100 + 150 + 200)
    # a window between samples: power at 0.5 is 100, at 2.5 is 200
    assert energy.trapezoid_energy(t, w, 0.5, 2.5) == pytest.approx(50 + 150 + 100)
    # held flat beyond the samples
    assert energy.trapezoid_energy([1.0], [50.0], 0.0, 4.0) == pytest.approx(200.0)
    assert energy.trapezoid_energy(t, w, 2.0, 2.0) == 0.0


def test_counter_energy_needs_samples_around_the_window():
    t = [0.0, 1.0, 2.0]
    mj = [5000.0, 105000.0, 305000.0]
    assert energy.counter_energy(t, mj, 0.5, 1.5) == pytest.approx((205000 - 55000) / 1000)
    assert energy.counter_energy(t, mj, 0.5, 2.5) is None  # not covered
    assert energy.counter_energy(t, [5.0, 3.0, 4.0], 0.0, 2.0) is None  # a counter reset


@pytest.mark.gpu(reason=NO_NVML)
@pytest.mark.skipif(not _nvml_works(), reason=NO_NVML)
def test_real_nvml_samples_this_machines_gpu(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0)"])
    monitor = Monitor([GpuSampler(1)], period_s=0.1, path=tmp_path / "s.jsonl")
    monitor.measure_idle(0.5).start(proc.pid)
    proc.wait()
    samples = monitor.stop()
    (described,) = monitor.describe()
    assert "unavailable" not in described and "error" not in described, described
    assert described["gpus"][0]["uuid"].startswith(("GPU-", "MIG-")) and described["driver"]
    assert [s for s in samples if s.get("phase") == "idle"]
    assert all(s["power_w"] > 0 and s["mem_used_bytes"] > 0 for s in samples)
