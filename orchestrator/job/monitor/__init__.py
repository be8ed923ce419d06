"""The monitor: what the job measures beside the trainer, on the trainer's clock.

One module per idea:

- `sampler`: the interface a sampler offers the loop (`Sampler`), and `SamplerUnavailable`,
  how one that has nothing to measure here stands aside without failing the run;
- `host_sampler`: the host sampler (psutil): the trainer's process tree and the whole node;
- `nvml`: the GPU sampler (NVML through nvidia-ml-py): the job's own GPUs, with energy;
- `rapl`: the CPU packages' energy counters (RAPL, through Linux's powercap tree), where readable;
- `gpu_ids`: which GPUs the job was given, read from its environment and matched by UUID (pure);
- `loop`: `Monitor`, the one polling loop, run for the idle phase and for the measured run.

The job builds `Monitor(default_samplers(gpus, env), period_s, samples_path)`, calls
`measure_idle(idle_s)`, starts the trainer, `start(pid)`, and `stop()` once it has ended;
`describe()` is result.json's `monitor` list.
"""
from __future__ import annotations

from typing import Mapping, Optional

from orchestrator.job.monitor.gpu_ids import GPU_VARIABLES, job_gpu_ids, parse_gpu_list, resolve_gpus
from orchestrator.job.monitor.host_sampler import HostSampler
from orchestrator.job.monitor.loop import Monitor
from orchestrator.job.monitor.nvml import GpuSampler
from orchestrator.job.monitor.rapl import RaplSampler
from orchestrator.job.monitor.sampler import Sampler, SamplerUnavailable

__all__ = ["GPU_VARIABLES", "GpuSampler", "HostSampler", "Monitor", "RaplSampler", "Sampler", "SamplerUnavailable",
           "default_samplers", "job_gpu_ids", "parse_gpu_list", "resolve_gpus"]


def default_samplers(gpus: int = 0, environ: Optional[Mapping[str, str]] = None) -> list[Sampler]:
    """The samplers a job runs: the host's, the GPUs' (which stands aside when gpus=0) and the CPU
    packages' energy (which stands aside, with the reason, where RAPL cannot be read)."""
    return [HostSampler(), GpuSampler(gpus, environ), RaplSampler()]
