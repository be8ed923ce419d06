"""Time limits learned from earlier runs (orchestrator/sweep/time_limits.py) on canned history, and
what they become in the sbatch script. The real-cluster half is in test_slurm_limits.py."""
import pytest
from hydra import compose, initialize_config_dir

from orchestrator.sweep import time_limits
from orchestrator.backends import backend_for
from orchestrator.backends.sbatch import sbatch_options
from orchestrator.sweep.cell import Cell
from orchestrator.sweep.config_checks import ConfigError
from orchestrator.sweep.time_limits import Past, doubled, predict, scaled, step_factor

from trainers.common import architectures, flops

from helpers import REPO

#: a resolved cell's settings: every one, defaults included (cell.resolve_settings)
LENET = {"framework": "torch", "model": "lenet", "dataset": "mnist", "like": None, "hardware": "cpu12", "gpus": 0,
         "nodes": 1, "threads": 12, "iterations": 50, "warmup": 10, "batch_size": 64, "scaling": "strong", "seed": 0,
         "precision": "fp32", "mode": "throughput", "epochs": None, "target_accuracy": None, "input": "memory"}


def test_the_same_cells_longest_recent_run_times_safety_plus_allowance_and_its_time_min():
    # newest first: the fourth run (900 s) is older than the `recent` three and does not count
    history = [Past("a", 40, LENET), Past("a", 150, LENET), Past("a", 90, LENET), Past("a", 900, LENET),
               Past("b", 6000, dict(LENET, iterations=5000))]
    limit = predict("a", LENET, history, ceiling_min=120, safety=2, allowance_min=3, recent=3)
    assert (limit.minutes, limit.floor) == (8, 7)  # 150 s = 2.5 min: ceil(2.5 * 2 + 3), ceil(2.5 * 1.4 + 3)
    assert limit.source.startswith(time_limits.SAME_CELL)
    # capped by the partition's MaxTime, and the floor never above the limit
    capped = predict("a", LENET, history, ceiling_min=120, safety=2, allowance_min=3, max_time_min=4)
    assert (capped.minutes, capped.floor) == (4, 4)
    # a job runs its cell's repeats one after another under one limit: each counts, the allowance once
    three = predict("a", LENET, history, ceiling_min=120, safety=2, allowance_min=3, recent=3, runs=3)
    assert (three.minutes, three.floor) == (18, 14)  # 3 x 2.5 min: ceil(7.5 * 2 + 3), ceil(7.5 * 1.4 + 3)
    assert three.source.endswith("x 3 repeats")


def test_similar_cells_scale_only_the_steps_by_their_work_and_give_no_time_min():
    done = dict(LENET, iterations=290, batch_size=32)  # 300 steps in 600 s, 290 measured of 1.5 s: 165 s start-up
    wanted = dict(LENET, iterations=590, batch_size=32)  # twice the steps, the same start-up
    limit = predict("new", wanted, [Past("old", 600, done, step_s=1.5)], ceiling_min=120, safety=1, allowance_min=0)
    assert (limit.minutes, limit.floor) == (18, None) and limit.source.startswith(time_limits.SIMILAR)  # 165 + 600 x 1.5
    # weak scaling: the batch is per GPU, the same per GPU on 2; strong: 2 GPUs halve it, and 1 GPU after 2 doubles it
    assert step_factor(dict(done, scaling="weak", gpus=2), done) == 1
    assert step_factor(dict(done, gpus=2), done) == 1  # more GPUs are never assumed faster
    assert step_factor(done, dict(done, gpus=2)) == 2 and step_factor(done, dict(done, nodes=2)) == 2
    # threads: fewer are up to proportionally slower, more never assumed faster
    assert step_factor(dict(done, threads=1), dict(done, threads=12)) == 12
    assert step_factor(dict(done, threads=12), dict(done, threads=1)) == 1
    # image size: one sample's training FLOPs by the layer tables
    from trainers.common import flops
    assert step_factor(dict(done, dataset="cifar10"), done) == pytest.approx(
        flops.training_flops("lenet", (3, 32, 32), 10) / flops.training_flops("lenet", (1, 28, 28), 10))
    # precision: not scaled, so not similar (fp16 history says nothing of an fp32 cell's time)
    fp16 = predict("new", dict(LENET, precision="fp32"), [Past("old", 600, dict(LENET, precision="fp16"))], ceiling_min=120)
    assert fp16.source == time_limits.CEILING
    # accuracy mode: epochs over the same dataset; a throughput run says nothing about it
    accuracy = dict(LENET, mode="accuracy", epochs=4)
    assert scaled(dict(accuracy, epochs=8), Past("old", 60, accuracy)) == 120
    alone = predict("new", accuracy, [Past("old", 600, done)], ceiling_min=120)
    assert (alone.minutes, alone.floor, alone.source) == (120, None, time_limits.CEILING)


def test_accuracy_mode_scales_by_old_over_new_devices_under_weak_scaling_too():
    """Issue 35 review, 1: an epoch is the whole dataset, so on half the devices each steps
    through twice the samples, weak scaling or strong."""
    for scaling in ("weak", "strong"):
        two = dict(LENET, mode="accuracy", epochs=4, gpus=2, scaling=scaling, batch_size=64 * (1 if scaling == "weak" else 2))
        one = dict(two, gpus=1, batch_size=64)
        assert scaled(one, Past("old", 600, two)) == 1200, scaling


def test_channels_alone_never_scale_a_guess_down():
    """Issue 35 review, 2: vgg16 like=imagenet (3 x 224 x 224) predicting like=mnist (1 x 224 x
    224) was a third of the pixels; its FLOPs are nearly the same (only the first convolution's
    input channels differ), and the step floor keeps it from shrinking at all."""
    vgg = dict(LENET, model="vgg16", dataset="synthetic", like="imagenet", hardware="p100", gpus=1)
    mnist = dict(vgg, like="mnist")
    assert time_limits.work_ratio(mnist, vgg) > 0.99
    # 100 s start-up + 50 steps of 10 s: the same 100 s + its 10 warm-up and 50 steps at 10 s each
    assert scaled(mnist, Past("old", 600, vgg, step_s=10.0)) == 100 + 60 * 10


def test_scaling_down_never_makes_a_step_or_the_start_up_cheaper_than_the_history():
    """Issue 35 review, 3: a smaller batch per device costs more per sample, so a step of it is
    never assumed cheaper than the history's (a: per-step floor); the start-up is never scaled
    (b); a step time from a few short steps is not extrapolated (c); larger work scales linearly."""
    big = dict(LENET, batch_size=512, iterations=100, warmup=0)
    past = Past("old", 300, big, step_s=2.0)  # 200 s of steps, 100 s start-up
    assert scaled(dict(big, batch_size=8), past) == 300  # not 100 + 200 / 64
    assert scaled(dict(big, batch_size=2048), past) == 100 + 4 * 200  # up: linearly
    assert scaled(dict(big, iterations=10), past) == 100 + 10 * 2  # fewer steps: the start-up stays
    # factor by factor: a batch 64 times smaller on an input 64 times larger is not the same step
    lenet = dict(big, dataset="synthetic", like="mnist", batch_size=64)
    larger = time_limits.work_ratio(dict(lenet, like="imagenet", batch_size=64), lenet)
    assert larger > 30 and step_factor(dict(lenet, like="imagenet", batch_size=1), lenet) == pytest.approx(larger)
    accuracy = dict(big, mode="accuracy", epochs=4)
    assert scaled(dict(accuracy, epochs=1), Past("old", 300, accuracy)) == 300  # never below its wall time
    assert scaled(dict(accuracy, batch_size=64), Past("old", 300, accuracy)) == 300 * 8  # 8 x the steps per epoch
    few = [Past("old", 300, dict(big, iterations=10), step_s=2.0), Past("old", 300, big, step_s=0.01),
           Past("old", 300, big)]  # 10 steps; 1 s of steps; no step time
    for p in few:
        assert predict("new", dict(big, iterations=5000), [p], ceiling_min=120).source == time_limits.CEILING, p
    assert predict("new", dict(big, iterations=5000), [past], ceiling_min=1000).source.startswith(time_limits.SIMILAR)


def test_input_and_weak_scaling_onto_more_devices_are_not_similar():
    """Issue 35 review, 5: input=pipeline pays for a data pipeline memory does not; a weak-scaling
    cell on more devices than its history adds communication nothing models."""
    past = Past("old", 300, dict(LENET, batch_size=64, iterations=100), step_s=2.0)
    assert predict("new", dict(past.settings, input="pipeline"), [past], ceiling_min=120).source == time_limits.CEILING
    weak = Past("old", 300, dict(past.settings, scaling="weak", gpus=1), step_s=2.0)
    strong = Past("old", 300, dict(past.settings, gpus=1), step_s=2.0)
    for run in (weak, strong):  # strong: a quarter of the batch each saves less than 4 devices' all-reduce adds
        for more in (dict(gpus=4), dict(nodes=2), dict(gpus=0, nodes=2)):
            assert predict("new", dict(run.settings, **more), [run], ceiling_min=120).source == time_limits.CEILING
    assert predict("new", dict(weak.settings, iterations=200), [weak], ceiling_min=120).source.startswith(
        time_limits.SIMILAR)


def test_a_cpu_cell_is_not_similar_to_a_gpu_history_nor_the_reverse():
    """Issue 35 review: a gpus=0 cell counts as one device, so a 1-GPU history's step time was
    scaled to it as if a CPU stepped as fast as a GPU (and a GPU cell from a CPU history)."""
    gpu = Past("old", 300, dict(LENET, batch_size=64, iterations=100, gpus=1), step_s=2.0)
    cpu = Past("old", 300, dict(gpu.settings, gpus=0), step_s=2.0)
    for cell, run in ((cpu.settings, gpu), (gpu.settings, cpu)):
        assert predict("new", dict(cell, iterations=200), [run], ceiling_min=120).source == time_limits.CEILING
    for run in (gpu, cpu):  # each side of the choice is still similar to its own
        assert predict("new", dict(run.settings, iterations=200), [run], ceiling_min=120).source.startswith(
            time_limits.SIMILAR)


def test_a_cell_that_timed_out_gets_at_least_twice_the_limit_it_timed_out_at():
    """Issue 35 review, 4: a cell whose only history is a timeout at 240 min was given a similar
    cell's guess (or the ceiling) below it."""
    similar_run = Past("y", 30, dict(LENET, iterations=50), step_s=0.2)
    limit = predict("x", dict(LENET, iterations=50000), [similar_run], ceiling_min=120, timed_out_min=240)
    assert limit.minutes == 480 and "timed out at 240 min" in limit.source
    assert predict("x", LENET, [], ceiling_min=120, timed_out_min=240, max_time_min=300).minutes == 300
    assert predict("x", LENET, [], ceiling_min=120, timed_out_min=30).minutes == 120  # the guess is already more


def test_a_job_that_will_build_its_environment_is_given_the_build_time_too():
    history = [Past("a", 600, LENET)]
    built = predict("a", LENET, history, ceiling_min=120, safety=1.5, allowance_min=1)
    building = predict("a", LENET, history, ceiling_min=120, safety=1.5, allowance_min=1, build_min=15, builds=True)
    assert (built.minutes, built.floor) == (16, 15)  # 10 min x 1.5 + 1, 10 min x 1.4 + 1
    assert (building.minutes, building.floor) == (31, 30)  # and 15 for the build, in --time-min too


def test_nothing_similar_gives_the_ceiling_capped_by_maxtime():
    assert predict("x", LENET, [], ceiling_min=120) == time_limits.Limit(120, None, time_limits.CEILING)
    assert predict("x", LENET, [], ceiling_min=120, max_time_min=60).minutes == 60


def test_a_timeout_is_retried_with_twice_its_limit_up_to_maxtime_and_refused_at_it():
    assert doubled(7, 2880) == 14 and doubled(7, None) == 14
    assert doubled(2000, 2880) == 2880
    assert doubled(2880, 2880) is None


def cell(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return Cell.from_config(compose("config", overrides=list(overrides)), tuple(overrides))


def test_a_learned_limit_reaches_the_script_as_time_and_time_min(tmp_path):
    from submitit.slurm.slurm import _make_sbatch_string

    config = cell("cluster=slurm", "hardware=cpu12").config
    assert config["hardware"]["time_min"] == time_limits.AUTO
    config["cluster"]["sbatch"] = {"mail-type": "END"}
    backend = backend_for(config["cluster"])
    assert backend.resources(config)["time"] == 120  # not learned yet: the ceiling, hardware.time_max
    config["hardware"].update(time_min=7, time_floor=5, time_source="same cell")
    params = backend.resources(config)
    script = _make_sbatch_string(command="true", folder=tmp_path, **params)
    assert "#SBATCH --time=7\n" in script and "#SBATCH --time-min=5\n" in script, script
    assert "#SBATCH --mail-type=END" in script  # the site's own options stay
    with pytest.raises(ConfigError, match="set hardware.time_min=auto instead"):
        sbatch_options("cluster.sbatch", {"time-min": 3})  # a site cannot set it by hand


def test_bad_time_limit_settings_are_refused_with_the_way_out():
    with pytest.raises(ConfigError, match="time_limits.safety"):
        time_limits.options({"time_limits": {"safety": 0.5}})
    assert time_limits.options({}) == {"safety": 1.5, "floor_safety": 1.4, "allowance_min": 1.0, "build_min": 15.0,
                                       "recent": 3}
    assert time_limits.options(cell().config) == time_limits.options({})  # conf/config.yaml says the same
    from orchestrator.sweep.cell import CellError
    with pytest.raises(CellError, match="or auto"):
        cell("hardware=cpu12", "hardware.time_min=soon")


def test_retry_timeout_counts_attempts_and_the_follow_up_opens_the_same_database(tmp_path):
    from orchestrator.launch import retry

    assert retry.timeouts({}) == 0 and retry.timeouts({"retry": {"timeout": 2}}) == 2
    two = {"retry": {"timeout": 2}}  # two retries: attempts 1 and 2 are followed up, attempt 3 is the last
    assert [retry.retry_left(two, attempt) for attempt in (1, 2, 3)] == [True, True, False]
    assert not retry.retry_left({}, 1)
    # counted from the sweep's first attempt of the repeat: one that began at attempt 3 has 3 and 4 followed up
    assert [retry.retry_left(two, attempt, first=3) for attempt in (3, 4, 5)] == [True, True, False]
    with pytest.raises(ConfigError, match="retry.timeout=-1 must be an integer from 0 to 5"):
        retry.timeouts({"retry": {"timeout": -1}})
    # the follow-up job runs elsewhere: a relative SQLite path is made absolute, a server URL kept
    assert retry.database_url("sqlite:///results.db", tmp_path) == f"sqlite:///{tmp_path}/results.db"
    assert retry.database_url("sqlite:////abs/r.db", tmp_path) == "sqlite:////abs/r.db"
    assert retry.database_url("postgresql+psycopg://bench@db/bench", tmp_path) == "postgresql+psycopg://bench@db/bench"


def test_rerun_follow_up_takes_no_class_or_time(tmp_path):
    from helpers import run_cli

    done = run_cli(["rerun", "--failed", "--follow-up", "--class", "crash"], tmp_path)
    assert done.returncode == 1 and "--follow-up picks timed-out repeats" in done.stdout + done.stderr, done


def test_whether_a_job_will_build_its_environment_is_read_from_the_cache(tmp_path):
    from orchestrator.envs.runtime import make_runtime

    venv = make_runtime("venv", "torch", cache=tmp_path)
    assert venv.builds_in_job()  # an empty cache: the job builds it first
    (venv.env_dir).mkdir(parents=True)
    (venv.env_dir / ".ready").touch()
    assert not venv.builds_in_job()
    assert make_runtime("container", "torch", cache=tmp_path).builds_in_job()  # no image for the recipe
    assert not make_runtime("apptainer", "torch", images=tmp_path).builds_in_job()  # refused, never built



def test_retry_timeout_counts_the_retries_of_its_own_sweep_not_the_attempts_of_earlier_ones(tmp_path):
    """Issue 35, 4: a cell that timed out in sweep `a` (attempt 1) is typed again in sweep `b`
    with retry.timeout=1; its attempt there is 2, and counting attempts (2 > 1) gave it no retry.
    The follow-up's pick (rerun.pick, follow_up) against a real SQLite results database."""
    import time

    from orchestrator.store import db, schema
    from orchestrator.launch import rerun
    from orchestrator.launch.rerun_config import Site

    config = cell("cluster=slurm", "hardware=cpu12", "retry.timeout=1").config  # retry.timeout needs a scheduler
    config = {**config, "hardware": {**config["hardware"], "time_min": 3, "time_source": time_limits.SET}}
    url = f"sqlite:///{tmp_path}/results.db"
    factory, site = db.open_db(url), Site([], url, str(tmp_path / "runs"))
    c = Cell.from_plain(config)

    def timed_out(sweep, attempt, latest=True):
        run = schema.Run(uid=f"{sweep}:{c.id}:0:{attempt}", sweep_id=sweep, cell_id=c.id, repeat=0,
                         attempt=attempt, state="pending", executor="slurm", latest=latest)
        run.state = "submitted"  # each move one the run-state model allows
        run.state, run.error_class = "failed", "timeout"
        session.add(run)

    with factory.begin() as session:
        session.add(schema.Cell(id=c.id, settings=c.settings, created_at=time.time(), **c.settings))
        for sweep in ("a", "b"):
            session.add(schema.Sweep(id=sweep, created_at=time.time(), argv=[], overrides=[], n_cells=1))
            session.flush()
            session.add(schema.SweepCell(sweep_id=sweep, cell_id=c.id, config=config))
        timed_out("a", 1, latest=False)
        timed_out("b", 2)
    with factory() as session:
        picks, problems = rerun.pick(session, site, sweep_id="b", follow_up=True)
    assert [(p.attempt, p.cell.config["hardware"]["time_min"]) for p in picks] == [(3, 6)], problems
    with factory.begin() as session:  # the retry timed out too: sweep b's one retry is spent
        session.query(schema.Run).filter_by(attempt=2).one().latest = False
        timed_out("b", 3)
    with factory() as session:
        assert rerun.pick(session, site, sweep_id="b", follow_up=True)[0] == []


def test_a_sequence_networks_work_grows_with_its_seq_len():
    """A learned limit scales by work per sample: an LSTM cell at seq_len 64 does twice the FLOPs
    of one at 32 (trainers/common/flops.py), not the same (its shape alone, ptb, says 32)."""
    short = {"model": "lstm", "dataset": "synthetic", "like": "ptb", "seq_len": 32}
    assert time_limits._sample_flops({**short, "seq_len": 64}) == 2 * time_limits._sample_flops(short) > 0


def test_a_transformers_work_follows_its_shape():
    """A learned limit scales a gpt cell by its own layers, width, heads and context (PaLM's count,
    trainers/common/flops.py), not GPT-2 small's whatever its shape."""
    small = {"model": "gpt", "dataset": "synthetic", "like": "ptb", "seq_len": 32, "layers": 2, "width": 64, "heads": 2}
    assert time_limits._sample_flops(small) == flops.training_flops(
        "gpt", (32,), 10000, architectures.Transformer(2, 64, 2)) == 32 * (6 * (2 * 12 * 64 ** 2 + 64 * 10000) + 12 * 2 * 64 * 32)
    assert time_limits._sample_flops({**small, "layers": 4}) > time_limits._sample_flops(small)
