"""The monitor samples a real process tree; its samples carry the clock the trainer uses; one
loop polls both the idle phase and the run."""
import json
import os
import subprocess
import sys
import time

from orchestrator.job.monitor import HostSampler, Monitor

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


class CountingSampler:
    """A sampler without a device, polled in the idle phase too: numbers its readings, fails the third."""

    name, method, idle = "counting", "none", True

    def __init__(self):
        self.pids, self.n = [], 0

    def start(self, pid):
        self.pids.append(pid)

    def sample(self):
        self.n += 1
        if self.n == 3:
            raise ValueError("a reading failed")
        return {"n": self.n}

    def close(self):
        pass

    def describe(self):
        return {"name": self.name, "method": self.method}


def test_the_idle_phase_is_the_same_loop_run_for_a_fixed_time_before_the_trainer(tmp_path):
    counting = CountingSampler()
    monitor = Monitor([HostSampler(), counting], period_s=0.05, path=tmp_path / "samples.jsonl")
    before = time.monotonic()
    monitor.measure_idle(0.2)  # in this thread: it returns when the idle phase is over
    assert time.monotonic() - before > 0.14  # ticks at 0, 0.05, 0.10, 0.15 s
    idle = list(monitor.samples)
    # the idle samplers alone, 0.2 s / 0.05 s = 4 ticks, the third of which failed
    assert [(s["sampler"], s["phase"], s["n"]) for s in idle] == [("counting", "idle", n) for n in (1, 2, 4)]
    assert counting.pids == [os.getpid()]  # the trainer has no pid yet
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    monitor.start(proc.pid)
    proc.wait()
    samples = monitor.stop()
    assert counting.pids == [os.getpid(), proc.pid]
    run = samples[len(idle):]
    assert {s["sampler"] for s in run} == {"host", "counting"} and not any("phase" in s for s in run)
    written = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert written == samples  # one file: the idle phase first, then the run, as taken
    described = {d["name"]: d for d in monitor.describe()}
    assert described["counting"]["idle_s"] == 0.2 and described["counting"]["idle_samples"] == 3
    assert described["counting"]["samples"] == sum(s["sampler"] == "counting" for s in run)
    assert described["counting"]["error"] == "idle: ValueError: a reading failed"  # the first, with its phase
    assert "idle_s" not in described["host"] and "error" not in described["host"]
