"""The monitor: samplers polled on a fixed period beside the trainer, every sample timestamped.

Samples are stamped with `time.time()`, the clock the trainer stamps its events with, so the
metrics can be cut to the trainer's measured window (warmup_end → run_end) afterwards instead of
averaging over the job's lifetime. Samplers are independent objects with one small interface —
`start(pid)`, `sample() -> dict`, `close()`, `describe() -> dict` — so the NVML sampler slots in
beside the host sampler without the monitor changing. Raw samples go to a JSONL file in the run
directory as they are taken, so a crash keeps what was measured.

The GPU sampler (NVML, through nvidia-ml-py's `pynvml`) watches exactly the GPUs the job was
given, matched by UUID (docs/protocol.md §4). Before the trainer starts, `Monitor.measure_idle`
samples it alone for a few seconds; those samples carry `"phase": "idle"` and give the idle
power that net energy is taken against. A sampler that cannot measure here (no NVML library, a
CPU node, gpus=0) raises `SamplerUnavailable` from `start`: the monitor records "no GPU monitor"
with the reason and the run carries on.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol

import psutil


class Sampler(Protocol):
    name: str
    method: str

    def start(self, pid: int) -> None: ...
    def sample(self) -> dict[str, Any]: ...
    def close(self) -> None: ...
    def describe(self) -> dict[str, Any]: ...


class SamplerUnavailable(RuntimeError):
    """A sampler that has nothing to measure here (no library, no device, gpus=0): not an error."""


class HostSampler:
    """CPU and memory of the trainer's process tree (psutil) and of the whole host."""

    name = "host"
    method = "psutil"

    def __init__(self) -> None:
        self._root: psutil.Process | None = None
        self._procs: dict[int, psutil.Process] = {}

    def start(self, pid: int) -> None:
        self._root = psutil.Process(pid)
        self._procs = {}
        psutil.cpu_percent(None)  # prime: the next call measures since now
        self._tree()

    def _tree(self) -> list[psutil.Process]:
        """The root and its descendants, reusing Process objects so cpu_percent has a baseline."""
        try:
            current = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return []
        alive = []
        for proc in current:
            known = self._procs.get(proc.pid)
            if known is None:
                known = self._procs[proc.pid] = proc
                try:
                    known.cpu_percent(None)  # first call only sets the baseline
                except psutil.Error:
                    continue
            alive.append(known)
        return alive

    def sample(self) -> dict[str, Any]:
        cpu, rss = 0.0, 0
        for proc in self._tree():
            try:
                with proc.oneshot():
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
            except psutil.Error:  # exited between listing and reading
                continue
        return {
            "proc_cpu_percent": cpu,
            "proc_rss_bytes": rss,
            "host_cpu_percent": psutil.cpu_percent(None),
            "host_mem_used_bytes": psutil.virtual_memory().used,
        }

    def close(self) -> None:
        self._procs = {}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "method": self.method, "cpus": psutil.cpu_count()}


# --- GPUs (NVML) ------------------------------------------------------------------------------

#: Variables that say which GPUs a job was given, in the order they are believed.
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")


def parse_gpu_list(value: str) -> list[str]:
    """The ids in a CUDA_VISIBLE_DEVICES-style list, read as CUDA reads it.

    Indices (`0,1`), UUIDs (`GPU-8932f937-...`, or a unique prefix) and MIG ids (`MIG-...`)
    may be mixed; an empty value or `-1` means no GPU, and CUDA stops at the first id it cannot
    use, so the list is cut there.
    """
    ids = []
    for token in value.split(","):
        token = token.strip()
        if not token or token.startswith("-"):
            break
        ids.append(token)
    return ids


def job_gpu_ids(environ: Mapping[str, str], gpus: int) -> tuple[Optional[list[str]], str]:
    """Which GPUs the job was given (ids as the first variable that is set names them) and
    where that came from; None when no variable is set, meaning the first `gpus` GPUs."""
    for var in GPU_VARIABLES:
        if var in environ:
            return parse_gpu_list(environ[var]), var
    return None, f"first {gpus} (no {'/'.join(GPU_VARIABLES)} set)"


def resolve_gpus(ids: Optional[list[str]], devices: list[tuple[int, str]], count: int,
                 mig: Optional[Mapping[str, str]] = None) -> list[tuple[int, str]]:
    """The physical GPUs, as NVML's (index, uuid), that the job's GPU ids name, in their order.

    `devices` is NVML's (index, uuid) list; an integer id is an NVML index (PCI bus order, as
    Slurm and nvidia-smi number GPUs) translated to its UUID; a `GPU-` id is matched by UUID or
    unique UUID prefix; a `MIG-` id by `mig` (MIG UUID -> its GPU's UUID) or, in the old
    `MIG-GPU-<uuid>/<gi>/<ci>` form, by the GPU UUID it holds (power and energy of a MIG slice
    are its whole GPU's). Only the first `count` ids are taken (the trainer uses those); None
    means the first `count` devices. Raises SamplerUnavailable naming an id that matches nothing.
    """
    devices = sorted(devices)
    if ids is None:
        if len(devices) < count:
            raise SamplerUnavailable(f"no GPU monitor: the cell asks for {count} GPUs, NVML lists {len(devices)}")
        return devices[:count]
    by_index = dict(devices)
    chosen: list[tuple[int, str]] = []
    for ident in ids[:count] if count > 0 else ids:
        if ident.isdigit():
            index = int(ident)
            if index not in by_index:
                raise SamplerUnavailable(f"no GPU monitor: GPU index {index} is not among NVML's "
                                         f"{sorted(by_index)}")
            match = [(index, by_index[index])]
        else:
            uuid = ident
            if ident.startswith("MIG-"):
                uuid = (mig or {}).get(ident) or (ident[4:].split("/")[0] if ident.startswith("MIG-GPU-") else "")
                if not uuid:
                    raise SamplerUnavailable(f"no GPU monitor: MIG device {ident} is not among NVML's MIG devices")
            match = [d for d in devices if d[1] == uuid] or [d for d in devices if d[1].startswith(uuid)]
            if len(match) != 1:
                raise SamplerUnavailable(f"no GPU monitor: {ident} matches {len(match)} of NVML's GPUs "
                                         f"({', '.join(u for _, u in devices) or 'none'})")
        if match[0] not in chosen:  # two MIG slices of one GPU: that GPU once
            chosen.append(match[0])
    return chosen


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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
                import pynvml
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


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


class Monitor:
    """Polls its samplers every `period_s` on a thread and appends the samples to `path`."""

    def __init__(self, samplers: list[Sampler], period_s: float = 0.1, path: Path | None = None):
        if period_s <= 0:
            raise ValueError(f"monitor.period_s={period_s} must be > 0")
        self.samplers = samplers
        self.period_s = period_s
        self.path = path
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._counts = {s.name: 0 for s in samplers}
        self._errors: dict[str, str] = {}
        self._unavailable: dict[str, tuple[str, str]] = {}  # name -> (method, reason)
        self._idle: dict[str, dict[str, Any]] = {}          # name -> {"idle_s", "idle_samples"}

    def _start_one(self, sampler: Sampler, pid: int) -> bool:
        """Starts a sampler; one that cannot start is recorded and dropped, never fatal."""
        try:
            sampler.start(pid)
            return True
        except SamplerUnavailable as exc:
            self._unavailable[sampler.name] = (getattr(sampler, "method", ""), str(exc))
        except Exception as exc:
            self._errors[sampler.name] = f"{type(exc).__name__}: {exc}"
        self.samplers.remove(sampler)
        return False

    def measure_idle(self, seconds: float) -> "Monitor":
        """Before the trainer starts: samples the samplers with `idle = True` (the GPU's) alone.

        Their samples carry `"phase": "idle"`, go to the same file and list, and give the idle
        power (metrics.gpu_metrics). Nothing runs for `seconds <= 0`.
        """
        idle = [s for s in list(self.samplers) if getattr(s, "idle", False)]
        idle = [s for s in idle if self._start_one(s, os.getpid())]
        if not idle or seconds <= 0:
            return self
        out = open(self.path, "a") if self.path else None
        try:
            start = time.monotonic()
            counts = {s.name: 0 for s in idle}
            tick = 0
            while True:
                for sampler in idle:
                    t = time.time()
                    try:
                        record = {"t": t, "sampler": sampler.name, "phase": "idle", **sampler.sample()}
                    except Exception as exc:
                        self._errors.setdefault(sampler.name, f"idle: {type(exc).__name__}: {exc}")
                        continue
                    self.samples.append(record)
                    counts[sampler.name] += 1
                    if out:
                        out.write(json.dumps(record) + "\n")
                tick += 1
                if tick * self.period_s >= seconds:
                    break
                delay = start + tick * self.period_s - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        finally:
            if out:
                out.close()
        for name, n in counts.items():
            self._idle[name] = {"idle_s": seconds, "idle_samples": n}
        return self

    def start(self, pid: int) -> "Monitor":
        for sampler in list(self.samplers):
            self._start_one(sampler, pid)
        self._thread = threading.Thread(target=self._loop, name="monitor", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        out = open(self.path, "a") if self.path else None
        try:
            start = time.monotonic()
            tick = 0
            while not self._stop.is_set():
                self._take(out)
                tick += 1  # fixed schedule: a slow sample does not shift later ones
                delay = start + tick * self.period_s - time.monotonic()
                if delay > 0:
                    self._stop.wait(delay)
            self._take(out)  # one last sample at the stop, so a short run is still covered
        finally:
            if out:
                out.close()

    def _take(self, out) -> None:
        for sampler in self.samplers:
            t = time.time()
            try:
                record = sampler.sample()
            except Exception as exc:
                self._errors.setdefault(sampler.name, f"{type(exc).__name__}: {exc}")
                continue
            record = {"t": t, "sampler": sampler.name, **record}
            self.samples.append(record)
            self._counts[sampler.name] += 1
            if out:
                out.write(json.dumps(record) + "\n")
        if out:
            out.flush()

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        if self._thread:
            self._thread.join()
        for sampler in self.samplers:
            sampler.close()
        return self.samples

    def describe(self) -> list[dict[str, Any]]:
        """How each sampler measured: method, period and sample count (for result.json)."""
        described = []
        for sampler in self.samplers:
            described.append({**sampler.describe(), "period_s": self.period_s,
                              "samples": self._counts.get(sampler.name, 0),
                              **self._idle.get(sampler.name, {}),
                              **({"error": self._errors[sampler.name]} if sampler.name in self._errors else {})})
        for name, error in self._errors.items():
            if name not in {s.name for s in self.samplers}:
                described.append({"name": name, "error": error, "samples": 0})
        for name, (method, reason) in self._unavailable.items():
            described.append({"name": name, "method": method, "samples": 0, "unavailable": reason})
        return described


def default_samplers(gpus: int = 0, environ: Optional[Mapping[str, str]] = None) -> list[Sampler]:
    """The samplers a job runs: the host's, and the GPUs' (which stands aside when gpus=0)."""
    return [HostSampler(), GpuSampler(gpus, environ)]
