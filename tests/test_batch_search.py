"""batch_size=auto (issue 38 item 4), the trainer's side: the stop rule on canned throughputs (a pure
function), the search stopping at a fake out-of-memory and at a real one (torch on the CPU under an
address-space limit), and the arguments it refuses."""
import os
import subprocess

import pytest

from trainers.common import batch_search, inference
from trainers.common.protocol import Config
from trainers.common.trainer import Trainer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_search_doubles_until_two_points_in_a_row_gain_under_5_percent_on_the_best():
    assert batch_search.stop([100.0]) is None
    assert batch_search.stop([100.0, 190.0, 350.0]) is None
    assert batch_search.stop([100.0, 105.0, 110.25]) is None  # exactly 5 % each time: still gaining
    assert batch_search.stop([100.0, 190.0, 350.0, 360.0]) is None  # one flat point: not yet
    why = batch_search.stop([100.0, 190.0, 350.0, 360.0, 340.0])
    assert why == ("throughput (batch / median latency) gained under 5% on batch 4's 350 samples/s at "
                   "the 2 points after it (batch 8, 16)")
    # one noisy slow point does not end the curve: the next beats the best by 5 %
    assert batch_search.stop([100.0, 60.0, 300.0, 600.0]) is None
    # a point slower than the best, then one barely above it: both count against the best, not the previous
    assert batch_search.stop([100.0, 300.0, 200.0, 310.0]) is not None
    assert "on batch 1's 100 samples/s" in batch_search.stop([100.0, 90.0, 95.0])
    assert batch_search.stop([100.0, 200.0, 240.0], gain=1.5) is not None
    assert batch_search.stop([100.0, 90.0, 95.0], patience=3) is None
    rising = [float(2 ** i) for i in range(17)]
    assert batch_search.stop(rising) == "batch 65536 is the largest the search tries"
    assert batch_search.stop(rising[:16]) is None


class _Events(object):
    def __init__(self):
        self.got = []

    def emit(self, kind, **fields):
        self.got.append(dict(fields, event=kind))


class _Fake(Trainer):
    """Infers until a batch of `limit` images, which it cannot hold (as a framework raises)."""

    def __init__(self, limit, error=MemoryError):
        self.limit, self.error = limit, error

    def infer(self, batch):
        if len(batch) >= self.limit:
            raise self.error("cannot allocate a batch of %d" % len(batch))
        return [[0.0]] * len(batch)

    def is_out_of_memory(self, exc):
        return isinstance(exc, RuntimeError) and "allocate" in str(exc)


def _search(fake, gain=-1.0):
    cfg = Config(global_batch=1, per_device_batch=1, warmup=1, min_batches=2, min_seconds=0.0)
    events = _Events()
    points = batch_search.run(fake, cfg, events, lambda point: [[0] * point.global_batch] * 3, gain=gain)
    return points, events.got


def test_the_search_stops_at_the_batch_the_device_cannot_hold():
    """gain=-1: no throughput stops it, only the fake out-of-memory at batch 8 (the framework's own
    exception, recognised through is_out_of_memory)."""
    points, events = _search(_Fake(8, RuntimeError))
    assert [b for b, _ in points] == [1, 2, 4] and all(rate > 0 for _, rate in points)
    assert [e["batch"] for e in events if e["event"] == "point"] == [1, 2, 4, 8]
    assert [e["event"] for e in events].count("run_end") == 3
    oom = [e for e in events if e["event"] == "point_oom"]
    assert oom == [{"event": "point_oom", "batch": 8, "message": "cannot allocate a batch of 8"}]
    assert events[-1] == {"event": "search_end", "points": 3, "stopped": "batch 8 ran out of memory"}


def test_an_error_other_than_memory_and_a_first_point_out_of_memory_end_the_run():
    with pytest.raises(ValueError):
        _search(_Fake(4, ValueError))
    with pytest.raises(MemoryError):
        _search(_Fake(1))


def test_auto_is_refused_where_it_does_not_apply(framework_run):
    base = ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist", "--threads", "1"]
    for more, why in ((["--batch-size", "auto"], "--batch-size auto searches inference's batches"),
                      (["--batch-size", "big", "--phase", "inference"], "--batch-size takes N")):
        proc, events = framework_run("numpy", base + more)
        assert events[-1]["class"] == "unsupported" and why in events[-1]["message"], events[-1]


REAL_OOM = """
import resource, sys
import torch
from trainers.common import batch_search
from trainers.common.events import Events
from trainers.common.protocol import build_parser, resolve
from trainers.torch.trainer import TorchTrainer
cfg = resolve(build_parser().parse_args(sys.argv[1:]))
t = TorchTrainer(); t.setup(cfg)
size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (size + (256 << 20), resource.RLIM_INFINITY))
points = batch_search.run(t, cfg, Events(sys.stdout), lambda p: batch_search.synthetic_pool(p, t.to_batch),
                          gain=-1.0)
print("POINTS", [b for b, _ in points])
"""


def test_torch_on_the_cpu_runs_out_of_memory_for_real_under_a_limit(framework_env):
    """256 MiB of address space beyond the built model: a CIFAR-shaped pool of 2**13 images (100 MiB a
    batch, three batches) cannot be made, whichever allocation (numpy's or torch's) fails first."""
    python, env = framework_env("torch")
    args = ["--model", "lenet", "--dataset", "synthetic", "--like", "cifar10", "--batch-size", "auto",
            "--threads", "1", "--phase", "inference", "--warmup", "0", "--min-batches", "2", "--min-seconds", "0"]
    out = subprocess.run([python, "-c", REAL_OOM] + args, cwd=REPO, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    import json
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    oom = [e for e in events if e["event"] == "point_oom"]
    assert len(oom) == 1 and events[-1]["event"] == "search_end" and "ran out of memory" in events[-1]["stopped"]
    points = eval(out.stdout.split("POINTS", 1)[1])
    assert points == [2 ** i for i in range(len(points))] and oom[0]["batch"] == 2 * points[-1] <= 2 ** 13


@pytest.mark.parametrize("name", ["numpy", "torch", "jax", "tensorflow", "mxnet", "caffe", "cntk"])
def test_every_framework_searches_its_batches_in_one_process(framework_run, name):
    """Each point is a fixed run of its own batch (its first batch, warm-up and rule), the batch
    doubling from 1, until the stop rule; Caffe's net is reshaped for each point's batch."""
    proc, events = framework_run(name, ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist",
                                        "--batch-size", "auto", "--threads", "1", "--phase", "inference",
                                        "--warmup", "1", "--min-batches", "3", "--min-seconds", "0.02"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    batches = [e["batch"] for e in events if e["event"] == "point"]
    assert len(batches) >= 3 and batches == [2 ** i for i in range(len(batches))]
    firsts = [e["images"] for e in events if e["event"] == "first_batch"]
    assert firsts == batches and [e["event"] for e in events].count("run_end") == len(batches)
    assert events[-1]["event"] == "search_end" and events[-1]["points"] == len(batches)
    assert "gained under 5% on batch" in events[-1]["stopped"] or "memory" in events[-1]["stopped"]


def test_the_launcher_relays_each_points_run_end_in_place_and_holds_back_the_last_event():
    """An isolated trainer (Caffe, CNTK) runs in a child whose parent held back every run_end but the
    last, so that a search's points lost theirs: a run_end the leader's events follow goes out in
    place; the stream's last (search_end) only once the process ended well."""
    import io
    import json
    from trainers.common import launch
    from trainers.common.events import Events

    stream = io.StringIO()
    relay = launch.Relay(Events(stream))
    for kind in ("point", "run_end", "point", "run_end", "search_end"):
        relay.line(0, json.dumps({"event": kind, "t": 0.0}))
    relay.line(1, json.dumps({"event": "run_end", "t": 0.0}))  # another rank's: dropped
    assert [json.loads(l)["event"] for l in stream.getvalue().splitlines()] == ["point", "run_end", "point",
                                                                                 "run_end"]
    assert launch.verdict(relay, [("rank 0", 0, [])]) == 0
    assert json.loads(stream.getvalue().splitlines()[-1])["event"] == "search_end"


def test_a_sequence_network_searches_at_its_own_seq_len(framework_run):
    """Each point's random sequences are as long as the run's --seq-len (lstm_ptb's own 35 is not
    ptb's 32; here 6 against imdb's 500), not the data shape's."""
    proc, events = framework_run("torch", ["--model", "lstm_imdb", "--dataset", "synthetic", "--like", "imdb",
                                           "--seq-len", "6", "--batch-size", "auto", "--threads", "1", "--phase",
                                           "inference", "--warmup", "1", "--min-batches", "2", "--min-seconds", "0"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert events[0]["input_shape"] == [6] and events[-1]["event"] == "search_end"
