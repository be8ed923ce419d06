"""Facts about the host that every framework reports the same way."""
import os
import platform


def available_cpus():
    """CPUs this process may run on (its affinity mask, which Slurm and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_name():
    """The CPU's model name, for the run's `devices` list on a CPU run."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"
