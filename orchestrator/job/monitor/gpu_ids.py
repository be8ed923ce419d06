"""Which physical GPUs a job was given: its environment's GPU ids, resolved against NVML's list.

Pure functions (no NVML, no environment of their own), so every form of id a scheduler or a
user may write is tested on canned device lists (tests/test_gpu_sampler.py); the NVML sampler
feeds them what NVML lists. The rules are docs/protocol.md §4: ids are read as CUDA reads
`CUDA_VISIBLE_DEVICES`, and matched by UUID, so the sampler watches the GPUs the job holds and
not NVML's first ones.
"""
from __future__ import annotations

from typing import Mapping, Optional

from orchestrator.job.monitor.sampler import SamplerUnavailable

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
