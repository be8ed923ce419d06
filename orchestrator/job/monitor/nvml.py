"""The NVML sampler: power, memory, utilisation, clock, temperature and energy of the job's GPUs.

NVML is reached through nvidia-ml-py's `pynvml`, imported only when a cell asks for GPUs, so a
CPU node or a machine without the driver never needs it; where it cannot start the sampler
raises `SamplerUnavailable` and the run goes on with "no GPU monitor" and the reason. Which GPUs
it watches is `gpus.resolve_gpus` over what NVML lists. A reading a GPU does not support is
asked for once and then left out, so an old GPU costs no repeated failing calls per sample.
Tests pass a stand-in for the pynvml module (tests/test_gpu_sampler.py `FakeNVML`).
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import psutil

from orchestrator.job.monitor.gpu_ids import job_gpu_ids, resolve_gpus
from orchestrator.job.monitor.sampler import SamplerUnavailable


def _text(value: Any) -> str:
    """NVML's strings: bytes from older nvidia-ml-py, str from newer."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


class GpuSampler:
    """Power, memory, utilisation, clock, temperature and energy of the job's own GPUs (NVML).

    Each sample holds a `gpus` list (one dict per GPU, by UUID) and totals over them: `power_w`
    (sum), `mem_used_bytes` (sum, whole device), `proc_mem_bytes` (sum of what the trainer's
    process tree holds, from NVML's compute-process list), `util_gpu_percent` and
    `util_mem_percent` (mean), `sm_clock_mhz` (mean), `temp_c` (max) and `energy_mj` (sum of the
    total-energy counters, where every GPU has one: Volta and later). A total is left out of a
    sample when a GPU did not give its part.
    """

    name = "gpu"
    method = "nvml"
    idle = True  # measured alone before the trainer starts (Monitor.measure_idle)

    def __init__(self, gpus: int, environ: Optional[Mapping[str, str]] = None, nvml: Any = None) -> None:
        self.gpus = gpus
        self.environ = dict(os.environ if environ is None else environ)
        self._nvml = nvml           # the pynvml module (tests may pass a stand-in for NVML itself)
        self._open = False
        self._gpus: list[dict[str, Any]] = []   # static facts per GPU, with its handle
        self._info: dict[str, Any] = {}
        self._unsupported: set[tuple[str, str]] = set()
        self._root: Optional[int] = None
        self._tree: set[int] = set()

    # NVML's errors are classes of the pynvml module; a stand-in may have none.
    def _error(self) -> type:
        return getattr(self._nvml, "NVMLError", Exception)

    def start(self, pid: int) -> None:
        if not self._open:
            self._connect()
        self._root = pid
        self._refresh_tree()

    def _connect(self) -> None:
        if self.gpus <= 0:
            raise SamplerUnavailable(f"no GPU monitor: the cell asks for no GPU (gpus={self.gpus})")
        if self._nvml is None:
            try:
                import pynvml  # optional: NVIDIA's bindings only where GPUs are sampled
            except ImportError as exc:
                raise SamplerUnavailable(f"no GPU monitor: nvidia-ml-py (pynvml) is not installed ({exc})") from None
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound on a node without the driver, ...
            raise SamplerUnavailable(f"no GPU monitor: NVML did not start ({type(exc).__name__}: {exc})") from None
        self._open = True
        try:
            handles = {i: nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())}
            devices = [(i, _text(nvml.nvmlDeviceGetUUID(h))) for i, h in handles.items()]
            ids, source = job_gpu_ids(self.environ, self.gpus)
            mig = self._mig_uuids(handles, devices) if ids and any(i.startswith("MIG-") for i in ids) else {}
            chosen = resolve_gpus(ids, devices, self.gpus, mig)
            if not chosen:
                raise SamplerUnavailable(f"no GPU monitor: {source} names no GPU")
            self._info = {"selected_by": source, "driver": self._call("nvmlSystemGetDriverVersion"),
                          "cuda_driver": self._cuda_version()}
            for index, uuid in chosen:
                handle = handles[index]
                gpu = {"index": index, "uuid": uuid, "handle": handle,
                       "name": _text(nvml.nvmlDeviceGetName(handle)),
                       "memory_total_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total)}
                limit = self._call("nvmlDeviceGetEnforcedPowerLimit", handle)
                if limit is not None:
                    gpu["power_limit_w"] = limit / 1000.0
                gpu["energy_counter"] = self._call("nvmlDeviceGetTotalEnergyConsumption", handle) is not None
                self._gpus.append(gpu)
        except SamplerUnavailable:
            self.close()
            raise
        except Exception as exc:
            self.close()
            raise SamplerUnavailable(f"no GPU monitor: NVML could not list the GPUs ({type(exc).__name__}: {exc})") from None

    def _mig_uuids(self, handles: dict[int, Any], devices: list[tuple[int, str]]) -> dict[str, str]:
        """MIG device UUID -> its GPU's UUID, for every MIG device NVML lists."""
        out = {}
        for (index, uuid) in devices:
            count = self._call("nvmlDeviceGetMaxMigDeviceCount", handles[index]) or 0
            for k in range(count):
                mig = self._call("nvmlDeviceGetMigDeviceHandleByIndex", handles[index], k)
                if mig is not None:
                    out[_text(self._nvml.nvmlDeviceGetUUID(mig))] = uuid
        return out

    def _cuda_version(self) -> Optional[str]:
        version = self._call("nvmlSystemGetCudaDriverVersion")
        return None if version is None else f"{version // 1000}.{version % 1000 // 10}"

    def _call(self, name: str, *args: Any) -> Any:
        """An NVML query, or None where this GPU or driver does not answer it."""
        try:
            value = getattr(self._nvml, name)(*args)
        except (self._error(), AttributeError):
            return None
        return _text(value) if isinstance(value, bytes) else value

    def _field(self, gpu: dict[str, Any], key: str, name: str, *args: Any) -> Any:
        """One per-sample reading; a reading a GPU does not support is not asked for again."""
        if (gpu["uuid"], key) in self._unsupported:
            return None
        try:
            return getattr(self._nvml, name)(gpu["handle"], *args)
        except self._error() as exc:
            not_supported = getattr(self._nvml, "NVMLError_NotSupported", None)
            if not_supported is not None and isinstance(exc, not_supported):
                self._unsupported.add((gpu["uuid"], key))
            return None
        except AttributeError:  # an older nvidia-ml-py without this call
            self._unsupported.add((gpu["uuid"], key))
            return None

    def _refresh_tree(self) -> None:
        """The trainer's process tree (its pids), to pick its processes out of NVML's list."""
        if self._root is None:
            return
        try:
            root = psutil.Process(self._root)
            self._tree = {self._root, *(p.pid for p in root.children(recursive=True))}
        except psutil.Error:
            self._tree = {self._root}

    def sample(self) -> dict[str, Any]:
        nvml = self._nvml
        per_gpu, refreshed = [], False
        for gpu in self._gpus:
            rec: dict[str, Any] = {"uuid": gpu["uuid"]}
            power = self._field(gpu, "power", "nvmlDeviceGetPowerUsage")
            if power is not None:
                rec["power_w"] = power / 1000.0
            mem = self._field(gpu, "memory", "nvmlDeviceGetMemoryInfo")
            if mem is not None:
                rec["mem_used_bytes"] = int(mem.used)
            util = self._field(gpu, "util", "nvmlDeviceGetUtilizationRates")
            if util is not None:
                rec["util_gpu_percent"], rec["util_mem_percent"] = float(util.gpu), float(util.memory)
            clock = self._field(gpu, "sm_clock", "nvmlDeviceGetClockInfo", getattr(nvml, "NVML_CLOCK_SM", 1))
            if clock is not None:
                rec["sm_clock_mhz"] = float(clock)
            temp = self._field(gpu, "temp", "nvmlDeviceGetTemperature", getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
            if temp is not None:
                rec["temp_c"] = float(temp)
            if gpu["energy_counter"]:
                energy = self._field(gpu, "energy", "nvmlDeviceGetTotalEnergyConsumption")
                if energy is not None:
                    rec["energy_mj"] = float(energy)
            procs = self._field(gpu, "procs", "nvmlDeviceGetComputeRunningProcesses")
            if procs is not None:
                if not refreshed and any(p.pid not in self._tree for p in procs):
                    self._refresh_tree()  # a new process of the trainer's, or someone else's
                    refreshed = True
                mine = [p for p in procs if p.pid in self._tree]
                used = [getattr(p, "usedGpuMemory", None) for p in mine]
                if all(isinstance(u, int) for u in used):  # None: the driver does not say
                    rec["proc_mem_bytes"] = int(sum(used))
                rec["procs"], rec["other_procs"] = len(mine), len(procs) - len(mine)
            per_gpu.append(rec)
        out: dict[str, Any] = {"gpus": per_gpu}
        for key, reduce in (("power_w", sum), ("mem_used_bytes", sum), ("proc_mem_bytes", sum),
                            ("util_gpu_percent", _mean), ("util_mem_percent", _mean),
                            ("sm_clock_mhz", _mean), ("temp_c", max), ("energy_mj", sum)):
            values = [g[key] for g in per_gpu if key in g]
            if values and len(values) == len(per_gpu):
                out[key] = reduce(values)
        return out

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass

    def describe(self) -> dict[str, Any]:
        gpus = [{k: v for k, v in g.items() if k != "handle"} for g in self._gpus]
        energy = "counter" if gpus and all(g["energy_counter"] for g in gpus) else "trapezoid"
        return {"name": self.name, "method": self.method, **self._info, "energy_method": energy, "gpus": gpus}
