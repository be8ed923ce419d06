"""Facts about the host, read one way for every trainer and for the orchestrator's provenance.

The trainers put the CPU's name in a CPU run's `devices` list and size their thread pools by
the CPUs they may use; the job records the same facts in result.json's `provenance`
(orchestrator/provenance.py imports this module), so the two can never disagree. Standard
library only, and Python 3.6 (the Caffe and CNTK containers).
"""
import os
import platform

#: /proc/cpuinfo keys that name the CPU: x86 ("model name"), ARM boards ("Model", "Hardware"), MIPS ("cpu model")
CPU_MODEL_KEYS = ("model name", "Model", "cpu model", "Hardware")


def available_cpus():
    """CPUs this process may run on (its affinity mask, which Slurm and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_model(cpuinfo="/proc/cpuinfo"):
    """The CPU's model name: the first model line of `cpuinfo` (Linux), else the platform's
    word for the processor; None when neither says."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in CPU_MODEL_KEYS and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def cpu_name():
    """The CPU's name for a CPU run's `devices` list: its model, else the machine type, else "cpu"."""
    return cpu_model() or platform.machine() or "cpu"
