"""The monitor samples a real process tree; its samples carry the clock the trainer uses."""
import subprocess
import sys
import time

from orchestrator.monitor import HostSampler, Monitor

BURN = "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass\n"


def test_host_sampler_follows_a_busy_process_tree(tmp_path):
    # A parent that spawns a busy child: the CPU is spent in the child, so only a tree walk sees it.
    parent = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BURN!r}])"])
    before = time.time()
    monitor = Monitor([HostSampler()], period_s=0.05, path=tmp_path / "samples.jsonl").start(parent.pid)
    parent.wait()
    samples = monitor.stop()
    assert len(samples) >= 5
    stamps = [s["t"] for s in samples]
    assert stamps == sorted(stamps) and before - 1 < stamps[0] < time.time()
    # the child's busy loop (the parent alone idles near 0 %; > 20 leaves room for a loaded machine)
    assert max(s["proc_cpu_percent"] for s in samples) > 20
    assert max(s["proc_rss_bytes"] for s in samples) > 1_000_000
    assert all(0 <= s["host_cpu_percent"] <= 100 for s in samples)
    written = (tmp_path / "samples.jsonl").read_text().splitlines()
    assert len(written) == len(samples)
    (described,) = monitor.describe()
    assert described["method"] == "psutil" and described["period_s"] == 0.05
    assert described["samples"] == len(samples)


class BrokenSampler:
    name, method = "broken", "none"

    def start(self, pid):
        raise RuntimeError("no such device")


def test_a_sampler_that_cannot_start_is_recorded_not_fatal():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    monitor = Monitor([BrokenSampler(), HostSampler()], period_s=0.05).start(proc.pid)
    proc.wait()
    samples = monitor.stop()
    assert samples and all(s["sampler"] == "host" for s in samples)
    broken = [d for d in monitor.describe() if d["name"] == "broken"]
    assert broken == [{"name": "broken", "error": "RuntimeError: no such device", "samples": 0}]
