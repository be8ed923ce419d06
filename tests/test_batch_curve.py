"""batch_size=auto (issue 38 item 4), the orchestrator's side: its own cell id and refusals at expansion,
the trainer's command line, a search's events kept as one run with per-batch metrics, and one real
auto cell through the trainer on the test Slurm cluster."""
import pytest

from orchestrator import setting_registry
from orchestrator.job import batch_curve, metrics


def _cell(*overrides):
    from helpers import composed
    from orchestrator.sweep.cell import Cell
    return Cell.from_plain(composed(["framework=torch", "model=lenet", "dataset=synthetic", "threads=1",
                                     "phase=inference", *overrides]))


def test_auto_is_a_cell_of_its_own_that_tells_the_trainer_auto():
    auto, one = _cell("batch_size=auto"), _cell("batch_size=1")
    assert auto.id != one.id and (auto.settings["batch_size"], auto.settings["batch_search"]) == (1, "auto")
    assert one.settings["batch_search"] == "fixed" and "batch_search" not in setting_registry.hashed_keys(one.settings)
    flags = setting_registry.trainer_flags(auto.settings)
    assert flags[flags.index("--batch-size") + 1] == "auto" and "--batch-search" not in flags
    assert "bs=auto" in auto.label


@pytest.mark.parametrize("overrides, why", [
    (["phase=train"], "batch_size=auto searches inference's batches; use phase=inference"),
    (["dataset=mnist"], "batch_size=auto makes each point's batches from random data; use dataset=synthetic"),
])
def test_expansion_refuses_auto_where_it_does_not_apply(overrides, why):
    from orchestrator.sweep.cell import CellError
    with pytest.raises(CellError, match=why):
        _cell("batch_size=auto", *overrides)


def _point(batch, dt, t0, n=4, stalls=()):
    """A point's events: n batches of dt seconds each, except those `stalls` sets ({index: seconds})."""
    out = [{"event": "point", "t": t0, "batch": batch},
           {"event": "first_batch", "t": t0 + 0.5, "dt": 0.5, "cold": True, "images": batch},
           {"event": "warmup_end", "t": t0 + 1.0, "step": 0}]
    t = t0 + 1.0
    for i in range(n):
        took = dict(stalls).get(i, dt)
        t += took
        out.append({"event": "step", "t": t, "step": i, "dt": took, "images": batch})
    return out + [{"event": "run_end", "t": t, "steps": n, "images": n * batch, "measured_s": t - t0 - 1.0}]


def test_a_search_lands_as_one_run_its_fastest_point_first_and_every_point_by_batch():
    """Canned: batch 1 at 100/s, 2 at 160/s, 4 at 200/s, batch 8 out of memory."""
    events = [{"event": "run_start", "t": 0.0, "phase": "inference", "model": "lenet"}]
    events += _point(1, 0.01, 1.0) + _point(2, 0.0125, 10.0) + _point(4, 0.02, 20.0)
    events += [{"event": "point_oom", "t": 30.0, "batch": 8, "message": "CUDA out of memory"},
               {"event": "search_end", "t": 30.0, "points": 3, "stopped": "batch 8 ran out of memory"}]
    got = metrics.compute(events)
    assert got["images_per_sec"] == pytest.approx(200.0) and got["auto_batch"] == 4
    assert (got["auto_points"], got["auto_oom_batch"]) == (3, 8)
    assert got["auto.b00002.images_per_sec"] == pytest.approx(160.0) and got["auto.b00001.latency_p50_s"] == 0.01
    assert "batch search stopped: batch 8 ran out of memory" in got.reason
    curve = batch_curve.curve(dict(got))
    assert [p["batch"] for p in curve] == [1, 2, 4]
    assert [round(p["images_per_sec"]) for p in curve] == [100, 160, 200]
    assert all(p["below_rule"] == 1 for p in curve)  # 4 batches: below the default rule's 64


def test_the_fastest_point_is_read_from_its_median_batch_not_from_batches_a_neighbour_stalled():
    """Canned, as measured on this 2-core VM with a neighbour's burst: batch 2's ten batches of 0.1 s
    hold one of 2 s (summed-time samples/s 7.1, median 20/s), batch 4's run steadily at 0.25 s (16/s).
    The run's point is batch 2, the one the trainer's stop rule also calls best (decision_rate)."""
    from trainers.common import batch_search
    events = [{"event": "run_start", "t": 0.0, "phase": "inference", "model": "resnet50"}]
    events += _point(2, 0.1, 1.0, n=10, stalls={3: 2.0}) + _point(4, 0.25, 20.0, n=10)
    events += [{"event": "search_end", "t": 30.0, "points": 2, "stopped": "canned"}]
    got = metrics.compute(events)
    assert got["auto.b00002.images_per_sec"] == pytest.approx(20 / 2.9)
    assert got["auto_batch"] == 2 and got["images_per_sec"] == pytest.approx(20 / 2.9)
    assert batch_search.decision_rate(2, [0.1] * 3 + [2.0] + [0.1] * 6) == pytest.approx(20.0)
    assert batch_search.decision_rate(4, [0.25] * 10) == pytest.approx(16.0)
    assert batch_search.decision_rate(4, []) == 0.0


def test_a_search_without_a_measured_point_says_so():
    events = [{"event": "run_start", "t": 0.0, "phase": "inference"}, {"event": "point", "t": 1.0, "batch": 1}]
    got = metrics.compute(events)
    assert dict(got) == {} and got.reason == "no measured point in the batch search"


@pytest.mark.slow
def test_an_auto_cell_lands_its_curve_through_the_slurm_cluster(slurm_workdir):
    """One torch batch_size=auto cell on the test cluster: one job, one run whose metrics hold each point
    the trainer measured (the doubling until the stop rule), and `results` shows it as auto."""
    from helpers import SMALL, orchestrator, rows, wait_until_final

    launched = orchestrator(["-m", *SMALL, "framework=torch", "model=lenet", "dataset=synthetic", "batch_size=auto",
                             "phase=inference", "min_batches=5", "min_seconds=0.05", "warmup=1"], slurm_workdir)
    assert launched.returncode == 0, launched.stderr
    wait_until_final(slurm_workdir)
    assert orchestrator(["collect"], slurm_workdir).returncode == 0
    got = rows(slurm_workdir, "select batch_size, batch_search, state, images_per_sec from results")
    assert len(got) == 1 and got[0][:3] == (1, "auto", "done") and got[0][3] > 0, got
    named = dict(rows(slurm_workdir, "select name, value from metrics"))
    curve = batch_curve.curve(named)
    assert len(curve) == named["auto_points"] >= 2 and [p["batch"] for p in curve] == [2 ** i for i in range(len(curve))]
    # the run's point: the fastest by batch / median latency (the stop rule's rate), not by summed-time samples/s
    best = max(curve, key=lambda p: p["batch"] / p["latency_p50_s"])
    assert named["auto_batch"] == best["batch"] and named["images_per_sec"] == best["images_per_sec"]
    shown = orchestrator(["results", "--where", "batch_search=auto"], slurm_workdir)
    assert shown.returncode == 0 and f" auto→{named['auto_batch']:g} " in shown.stdout, shown.stdout
    assert rows(slurm_workdir, "select auto_batch from results") == [(named["auto_batch"],)]


@pytest.mark.parametrize("times", [[1.0, 3.0], [0.1, 0.4, 0.2, 0.3], [0.5] * 3 + [0.2, 0.9, 0.7]])
def test_the_trainer_and_the_run_read_a_points_median_by_one_rule_for_an_even_count_too(times):
    """The trainer's stop rule (batch_search.decision_rate) and the run's headline point (steady_rate of
    latency_p50_s) read the same median: LoadGen's rank rule, the upper middle of an even count (64
    batches, the default rule, is even). With the mean of the two middles the trainer called batch 1
    ([1 s, 3 s]: 0.5/s) best over batch 2 (4.4 s: 0.45/s) while the run's headline named batch 2."""
    from orchestrator.job import latency
    from trainers.common import batch_search
    assert batch_search.decision_rate(3, times) == batch_curve.steady_rate(3, latency.distribution(times))
    assert batch_search.decision_rate(1, [1.0, 3.0]) < batch_search.decision_rate(2, [4.4, 4.4])
