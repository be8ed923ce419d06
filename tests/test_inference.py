"""phase=inference (issue 38): the latency figures on canned latencies, the trainers' forward-only runs
(real frameworks, tiny shapes, a short rule), the same seed's same outputs in a second process, and the
refusals at run time and at expansion."""
import os

import numpy as np
import pytest

from orchestrator.job import latency, metrics
from trainers.common import support

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SHORT = ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist", "--batch-size", "4",
         "--threads", "1", "--phase", "inference", "--warmup", "2", "--min-batches", "6",
         "--min-seconds", "0.05"]


# ------------------------------------------------------------------ the figures, on canned latencies

def test_percentiles_take_loadgens_rank_floor_n_p():
    """LoadGen (loadgen/results.cc) takes sorted[floor(n x p)]: for 1..n ms, p50 of 10 is the 6th
    value, p99 of 100 the largest, p90 of 20 the 19th; interpolation or ceil(n p)-1 would differ."""
    ten, hundred, twenty = (np.arange(1, n + 1) / 1000.0 for n in (10, 100, 20))
    assert latency.loadgen_percentile(ten, 0.5) == 0.006
    assert latency.loadgen_percentile(hundred, 0.99) == 0.100
    assert latency.loadgen_percentile(twenty, 0.9) == 0.019
    assert latency.loadgen_percentile(ten, 0.05) == 0.001  # numpy's 'higher' would give 0.002
    thousand = np.arange(1, 1001) / 1000.0
    assert latency.loadgen_percentile(thousand, 0.999) == 1.0


def test_jitter_is_1_4826_mad_and_ignores_a_few_slow_batches():
    values = np.array([1.0, 2.0, 3.0, 4.0, 100.0])
    assert latency.jitter(values) == pytest.approx(1.4826 * 1.0)  # median 3, |dev| median 1
    rng = np.random.default_rng(0)
    normal = rng.normal(0.010, 0.001, 20000)
    assert latency.jitter(normal) == pytest.approx(0.001, rel=0.03)


@pytest.mark.parametrize("n, stated", [
    (9, {"latency_p50_s"}),
    (19, {"latency_p50_s", "latency_p90_s"}),
    (33, {"latency_p50_s", "latency_p90_s", "latency_p95_s"}),
    (99, {"latency_p50_s", "latency_p90_s", "latency_p95_s", "latency_p97_s"}),
    (100, {"latency_p50_s", "latency_p90_s", "latency_p95_s", "latency_p97_s", "latency_p99_s"}),
    (999, {"latency_p50_s", "latency_p90_s", "latency_p95_s", "latency_p97_s", "latency_p99_s"}),
    (1000, set(latency.PERCENTILES)),
])
def test_a_percentile_is_stated_only_from_the_count_that_supports_it(n, stated):
    out = latency.distribution(np.linspace(0.001, 0.002, n))
    assert {k for k in out if k in latency.PERCENTILES} == stated
    assert out["latency_batches"] == n


def test_below_the_rule_needs_both_batches_and_seconds():
    assert latency.below_rule(64, 10.0) is None
    assert "63 batches" in latency.below_rule(63, 50.0)
    assert "at least 64 batches and 10 s" in latency.below_rule(1000, 9.99)


def _events(dts, first=0.5, cold=True, phase="inference"):
    start = {"event": "run_start", "t": 0.0, "phase": phase, "model": "lenet"}
    out = [start, {"event": "first_batch", "t": 0.5, "dt": first, "cold": cold, "images": 4},
           {"event": "warmup_end", "t": 1.0}]
    t = 1.0
    for i, dt in enumerate(dts):
        t += dt
        out.append({"event": "step", "t": t, "step": i, "dt": dt, "images": 4})
    return out + [{"event": "run_end", "t": t, "steps": len(dts), "images": 4 * len(dts)}]


def test_an_inference_runs_metrics_and_its_reasons():
    """Through metrics.compute, as the job computes result.json: samples/s from the same step events,
    the percentiles their count supports, the first batch apart, the rule's flag and why."""
    dts = [0.01] * 50 + [0.02] * 50
    got = metrics.compute(_events(dts))
    assert got["images_per_sec"] == pytest.approx(400 / 1.5)
    assert (got["latency_p50_s"], got["latency_p99_s"], got["latency_batches"]) == (0.02, 0.02, 100)
    assert "latency_p999_s" not in got and got["first_batch_s"] == 0.5 and got["first_batch_cold"] == 1
    assert got["below_rule"] == 1 and "below the validity rule: 100 batches over 1.5 s" in got.reason
    assert "latency_p999_s (needs 1000)" in got.reason
    long = metrics.compute(_events([0.2] * 64, cold=False))
    assert long["below_rule"] == 0 and long["first_batch_cold"] == 0 and "validity" not in (long.reason or "")
    assert not {"latency_p50_s", "below_rule"} & set(metrics.compute(_events(dts, phase="train")))


# ------------------------------------------------------------------ the trainers, for real

def _run(framework_run, name, *more):
    proc, events = framework_run(name, SHORT + list(more))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return events


@pytest.mark.parametrize("name", ["numpy", "torch", "jax", "tensorflow", "mxnet", "caffe", "cntk"])
def test_a_framework_runs_forward_only_until_both_rules_are_met(framework_run, name):
    """The first batch alone, the warm-up, then measured batches with no loss until 6 batches and 0.05 s;
    the same seed gives the same first outputs in a second process, another seed others."""
    events = _run(framework_run, name)
    kinds = [e["event"] for e in events]
    assert kinds[:2] == ["run_start", "first_batch"] and kinds[-1] == "run_end"
    assert kinds.index("warmup_end") == 4 and events[0]["phase"] == "inference"
    measured = [e for e in metrics.measured_steps(events)]
    assert len(measured) >= 6 and sum(e["dt"] for e in measured) >= 0.05
    assert all("loss" not in e and e["images"] == 4 for e in measured)
    assert events[-1]["steps"] == len(measured)
    again = _run(framework_run, name)
    assert again[1]["outputs_sha256"] == events[1]["outputs_sha256"]
    other = _run(framework_run, name, "--seed", "1")
    assert other[1]["outputs_sha256"] != events[1]["outputs_sha256"]


#: The token networks at CI's shapes (test_conformance's): DLBench's LSTM, a two-layer GPT.
TOKENS = {"lstm": ["--model", "lstm", "--like", "ptb", "--seq-len", "6"],
          "gpt": ["--model", "gpt", "--like", "ptb", "--seq-len", "32", "--layers", "2", "--width", "64", "--heads", "2"]}


@pytest.mark.parametrize("name, model", [(n, "lstm") for n in ("torch", "jax", "tensorflow", "mxnet", "caffe", "cntk")]
                         + [(n, "gpt") for n in ("torch", "jax", "tensorflow", "mxnet")])
def test_the_token_networks_run_forward_only_where_they_are_built(framework_run, name, model):
    """The LSTM and the Transformer (issue 37) in inference, in every framework that builds them: their
    token ids go in as they are (jax's forward pass transposed every input as an image)."""
    events = _run(framework_run, name, *TOKENS[model])
    assert [e["event"] for e in events][:2] == ["run_start", "first_batch"] and events[-1]["event"] == "run_end"
    assert events[0]["model"] == model and len(events[0]["input_shape"]) == 1
    measured = metrics.measured_steps(events)
    assert len(measured) >= 6 and all("loss" not in e and e["images"] == 4 for e in measured)


TORCH_EVAL = """
import sys
import numpy as np
from trainers.common.protocol import build_parser, resolve
from trainers.torch.trainer import TorchTrainer
cfg = resolve(build_parser().parse_args(sys.argv[1:]))
t = TorchTrainer()
t.setup(cfg)
images = np.random.default_rng(0).random((2,) + cfg.input_shape, dtype=np.float32)
batch = t.to_batch(images, np.zeros(2, dtype=np.int64))
first, second = t.infer(batch), t.infer(batch)
print(t.model.training, t.optimizer is None, bool(np.array_equal(first, second)), first.shape)
"""


def test_torch_infers_in_evaluation_form_without_an_optimizer(framework_env):
    """Dropout off (AlexNet has dropout: training form would give one batch two answers), no
    optimizer built, and the logits on the host."""
    import subprocess
    python, env = framework_env("torch")
    out = subprocess.run([python, "-c", TORCH_EVAL, "--model", "alexnet", "--dataset", "synthetic", "--like",
                          "cifar10", "--batch-size", "2", "--threads", "1", "--phase", "inference"],
                         cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-5:] == ["False", "True", "True", "(2,", "10)"]


def test_accuracy_mode_and_the_loader_are_refused_in_inference(framework_run):
    proc, events = framework_run("numpy", SHORT + ["--mode", "accuracy"])
    assert events[-1]["class"] == "unsupported" and "use --mode throughput with --phase inference" in \
        events[-1]["message"]
    proc, events = framework_run("numpy", SHORT + ["--min-batches", "0"])
    assert events[-1]["class"] == "unsupported" and "--min-batches must be at least 1" in events[-1]["message"]


def test_a_framework_without_inference_is_refused_with_its_reason():
    declared = support.Support("demo", cpu=["fp32"], notes={"inference": "its net has no TEST phase"})
    problem = declared.problem("fp32", 0, "lenet", phase="inference")
    assert problem == ("demo does not support --phase inference; it supports --phase train only "
                       "(its net has no TEST phase)")
    assert declared.problem("fp32", 0, "lenet") is None
    able = support.Support("demo", cpu=["fp32"], inference=True, multi_gpu=support.REPLICAS)
    assert able.problem("fp32", 0, "lenet", phase="inference") is None
    assert "inference on one device" in able.problem("fp32", 2, "lenet", phase="inference")


# ------------------------------------------------------------------ one cell, Slurm to `results`

@pytest.mark.slow
def test_an_inference_cell_lands_its_latencies_in_results_through_the_slurm_cluster(slurm_workdir):
    """A torch cell at phase=inference on the test cluster: expansion passes the phase and the short rule
    to the trainer, the collector lands the latency metrics, and `results` shows them with the flag
    (a rule of 20 batches is below the validity rule's 64); a train cell beside it keeps its old id.
    min_seconds=0 makes the count exactly min_batches: with min_seconds=0.1 a fast node timed 1 ms
    batches past 100, where p99 is stated (latency.SUPPORTED_FROM), and the test read the node's speed."""
    from helpers import SMALL, orchestrator, rows, wait_until_final

    launched = orchestrator(["-m", *SMALL, "framework=torch", "model=lenet", "dataset=synthetic", "batch_size=4",
                             "phase=train,inference", "min_batches=20", "min_seconds=0", "warmup=2",
                             "iterations=4"], slurm_workdir)
    assert launched.returncode == 0, launched.stderr
    wait_until_final(slurm_workdir)
    assert orchestrator(["collect"], slurm_workdir).returncode == 0
    got = rows(slurm_workdir, "select phase, min_batches, state, images_per_sec, latency_p50_s, latency_p99_s, "
                              "latency_batches, first_batch_s, below_rule from results order by phase")
    assert [r[:3] for r in got] == [("inference", 20, "done"), ("train", None, "done")], got
    phase, _, _, rate, p50, p99, batches, first, below = got[0]
    assert batches == 20 < latency.SUPPORTED_FROM["latency_p99_s"], got
    assert rate > 0 and 0 < p50 and p99 is None and first > 0 and below == 1
    assert got[1][4:] == (None,) * 5
    shown = orchestrator(["results", "--where", "phase=inference"], slurm_workdir)
    assert shown.returncode == 0 and "p50 ms" in shown.stdout and "first ms" in shown.stdout, shown.stdout
    line = next(l for l in shown.stdout.splitlines() if " done " in l)
    # the rule column by its header's place: the host columns after it are blank for a run shorter than
    # the monitor's period (20 batches of ~1 ms), so counting words from the end reads another column
    header = next(l for l in shown.stdout.splitlines() if " rule " in l)
    assert line[header.index(" rule "):].split()[0] == "below", shown.stdout
    assert f"{p50 * 1000:.3g}" in line and " n/a " in line, shown.stdout
    assert len(rows(slurm_workdir, "select * from metrics where name = 'latency_p99_s'")) == 0


def test_expansion_refuses_what_inference_cannot_be_and_resolves_what_it_can(monkeypatch):
    """At expansion, in one line naming the way out: accuracy mode, the loader, several GPUs; a
    framework that declares no inference (its reason quoted). A train cell reads no rule."""
    from helpers import composed
    from orchestrator.sweep.cell import Cell, CellError

    def cell(*overrides):
        return Cell.from_plain(composed(["framework=torch", "model=lenet", "dataset=synthetic", *overrides]))

    made = cell("phase=inference", "min_batches=8", "min_seconds=0.5")
    assert (made.settings["phase"], made.settings["min_batches"], made.settings["min_seconds"]) == ("inference", 8, 0.5)
    assert (cell("min_batches=8").settings["min_batches"], cell().id) == (None, cell("phase=train").id)
    for overrides, why in ((["mode=accuracy", "dataset=digits"], "use mode=throughput with phase=inference"),
                           (["hardware=p100", "gpus=2"], "inference on one device"),
                           (["min_batches=0"], "min_batches")):
        with pytest.raises(CellError, match=why):
            cell("phase=inference", *overrides)
    from orchestrator import frameworks
    declared = support.Support("torch", cpu=["fp32"], notes={"inference": "no TEST net"})
    monkeypatch.setattr(frameworks, "support", lambda framework: declared)  # a framework declaring none
    assert cell().settings["phase"] == "train"
    with pytest.raises(CellError, match=r"torch does not support --phase inference; .*\(no TEST net\)"):
        cell("phase=inference")


# ------------------------------------------------------------------ +preset=mlperf_like

def test_the_mlperf_like_preset_sets_loadgens_minimums_and_they_reach_the_trainer(framework_run):
    """+preset=mlperf_like is inference at 600 s and 1,000 batches (conf/preset/mlperf_like.yaml cites
    LoadGen's files), passed to the trainer as its rule; with both lowered by override (a test cannot
    run 600 s) the flags carry the lowered rule, the torch trainer times the lowered batch count (at 0 s,
    so the count is exact on any node), and LoadGen's p95 and p97 are stated."""
    from helpers import composed
    from orchestrator import setting_registry
    from orchestrator.sweep.cell import Cell

    def flags(*overrides):
        cell = Cell.from_plain(composed(["+preset=mlperf_like", "framework=torch", "model=lenet",
                                         "dataset=synthetic", *overrides]))
        told = setting_registry.trainer_flags(cell.settings)
        return cell.settings, {k: told[told.index(k) + 1] for k in ("--phase", "--min-batches", "--min-seconds")}

    settings, told = flags()
    assert (settings["phase"], settings["min_batches"], settings["min_seconds"]) == ("inference", 1000, 600.0)
    assert told == {"--phase": "inference", "--min-batches": "1000", "--min-seconds": "600.0"}
    _, told = flags("min_batches=40", "min_seconds=0.05")
    assert told["--min-batches"] == "40"
    # --min-seconds 0: exactly 40 batches, under p99's 100 on any node (0.05 s timed 53 batches here, and
    # past 100 on a node twice as fast, where p99 is stated)
    events = _run(framework_run, "torch", "--min-batches", told["--min-batches"], "--min-seconds", "0")
    assert events[0]["min_batches"] == 40 and len(metrics.measured_steps(events)) == 40
    got = metrics.compute(events)
    assert got["latency_p50_s"] <= got["latency_p95_s"] <= got["latency_p97_s"] and "latency_p99_s" not in got


def test_a_run_is_held_to_the_rule_it_asked_for_when_that_is_more_than_the_default():
    """100 batches over 12.5 s meet the default rule; the same run asking for the preset's 1,000 batches
    and 600 s (run_start) is below its rule; asking for less than the default never lowers it."""
    def asked(**rule):
        events = _events([0.125] * 100)
        events[0].update(rule)
        return metrics.compute(events)

    assert asked()["below_rule"] == 0 and asked(min_batches=8, min_seconds=0.05)["below_rule"] == 0
    held = asked(min_batches=1000, min_seconds=600.0)
    assert held["below_rule"] == 1 and "the rule is at least 1000 batches and 600 s" in held.reason
