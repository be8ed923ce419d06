"""The GPUs a run uses, as nvidia-smi names them, for frameworks that cannot tell themselves
(MXNet and Caffe report neither GPU names nor compute capabilities)."""
import os
import subprocess


def _query(fields):
    out = subprocess.check_output(
        ["nvidia-smi", "--query-gpu=%s" % fields, "--format=csv,noheader"],
        stderr=subprocess.STDOUT, universal_newlines=True, timeout=30)
    return [[part.strip() for part in line.split(",")] for line in out.splitlines()
            if line.strip()]


def nvidia_smi(count, capabilities=False):
    """[(name, (major, minor) or None)] of the first `count` GPUs this process may use
    (CUDA_VISIBLE_DEVICES as indices; count None: all), or None when nvidia-smi cannot tell. With
    `capabilities`, None also when a compute capability is unknown (older drivers)."""
    try:
        try:
            rows = [(name, tuple(int(v) for v in cap.split(".")))
                    for name, cap in _query("name,compute_cap")]
        except (subprocess.CalledProcessError, ValueError):
            rows = [(row[0], None) for row in _query("name")]
    except (OSError, subprocess.SubprocessError):
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        try:
            rows = [rows[int(i)] for i in visible.split(",") if i.strip()]
        except (ValueError, IndexError):
            pass
    count = len(rows) if count is None else count
    if len(rows) < count or (capabilities and any(cap is None for _, cap in rows[:count])):
        return None
    return rows[:count]


def gpu_names(count):
    """The names of the first `count` GPUs ('gpu<i>' where nvidia-smi cannot tell)."""
    found = nvidia_smi(count)
    return [name for name, _ in found] if found else ["gpu%d" % i for i in range(count)]
