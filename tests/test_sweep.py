"""End to end: a Hydra sweep through the project's launcher, real jobs, real trainer, real DB.

These run the PyTorch trainer in the environment the venv runtime builds (first use: minutes)
through submitit's local executor, exactly as `python -m orchestrator -m ...` does for a user.
"""
import fcntl
import json
import os
import signal
import time
from pathlib import Path

import pytest

from orchestrator.envs.venv_runtime import default_cache

from helpers import FAST, harness_site, orchestrator, rows, user_dir, wait_until_final

@pytest.fixture
def workdir(tmp_path, torch_python):
    return user_dir(tmp_path)


@pytest.mark.slow
def test_issue_example_sweep_lands_four_rows_and_is_not_resubmitted(workdir):
    assert orchestrator(["data", "generate", "mnist", "-n", "256"], workdir).returncode == 0
    sweep = ["-m", "framework=torch", "model=lenet,alexnet", "dataset=synthetic,mnist", *FAST,
             "model.batch_size.mnist=8", "model.batch_size.imagenet=4"]
    started = time.time()
    launched = orchestrator(sweep, workdir)
    assert launched.returncode == 0, launched.stderr
    assert "4 cells submitted" in launched.stdout
    # It returned without waiting: the four jobs run one at a time, so some are still open.
    still_open = rows(workdir, "select count(*) from runs where state in ('pending','submitted','running')")
    assert still_open[0][0] >= 1, f"all jobs ended within {time.time() - started:.1f}s of the launch"
    assert rows(workdir, "select count(*) from runs where job_id is not null") == [(4,)]

    status = wait_until_final(workdir)
    assert "done" in status
    collected = orchestrator(["collect"], workdir)
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert "4 added" in collected.stdout

    results = rows(workdir, "select framework, model, dataset, images_per_sec, params, state from results "
                            "order by model, dataset")
    assert len(results) == 4, results
    assert all(r[0] == "torch" and r[5] == "done" and r[3] > 0 for r in results), results
    params = {(r[1], r[2]): r[4] for r in results}
    # AlexNet runs at 224x224 on every dataset; its first conv takes the dataset's channels and its
    # last layer its classes: MNIST (1 channel, 10 classes) = 61,100,840 - 2*64*121 - 990*4097.
    assert params[("alexnet", "synthetic")] == 61_100_840
    assert params[("alexnet", "mnist")] == 57_029_322
    assert params[("lenet", "mnist")] == 431_080  # Caffe's LeNet at 28x28x1, 10 classes

    run_dir = Path(rows(workdir, "select run_dir from runs limit 1")[0][0])
    for name in ("config.yaml", "events.jsonl", "trainer.log", "samples.jsonl", "result.json", "job.json"):
        assert (run_dir / name).exists(), name
    result = json.loads((run_dir / "result.json").read_text())
    assert result["window"]["steps"] == 3 and result["monitor"][0]["method"] == "psutil"

    again = orchestrator(sweep, workdir)
    assert again.returncode == 0, again.stderr
    assert "0 cells submitted" in again.stdout and again.stdout.count("already done") == 4
    assert rows(workdir, "select count(*) from runs") == [(4,)]
    assert orchestrator(["collect"], workdir).stdout.startswith("0 added")


@pytest.mark.slow
def test_a_failing_cell_fails_alone_with_class_message_and_log(workdir):
    # an MNIST folder without its files (a folder that is not there is refused before submission,
    # test_bad_input): that cell's trainer stops with a data error, the other one measures
    (workdir[0] / "data" / "mnist").mkdir(parents=True)
    launched = orchestrator(["-m", "model=lenet", "dataset=synthetic,mnist", *FAST, "wait=true"], workdir)
    assert launched.returncode == 0, launched.stderr
    by_dataset = {r[0]: r[1:] for r in rows(
        workdir, "select c.dataset, r.state, r.error_class, r.error_message, r.log_path "
                 "from runs r join cells c on c.id = r.cell_id")}
    assert by_dataset["synthetic"][0] == "done"
    state, error_class, message, log_path = by_dataset["mnist"]
    assert (state, error_class) == ("failed", "unsupported")
    assert "not found in" in message and "data/mnist" in message and Path(log_path).exists()
    status = orchestrator(["status"], workdir).stdout
    assert "unsupported" in status and log_path in status.replace("\n", "")


@pytest.mark.slow
def test_foreground_run_without_m_lands_one_row(workdir):
    done = orchestrator(["model=lenet", *FAST], workdir)
    assert done.returncode == 0, done.stderr
    assert rows(workdir, "select state, images_per_sec > 0 from results") == [("done", 1)]


@pytest.mark.slow
def test_a_job_killed_before_its_result_ends_as_lost(workdir):
    cache = default_cache()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "local-node.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # hold the node: the job waits in line, writes nothing
        launched = orchestrator(["-m", "model=lenet", *FAST], workdir)
        assert launched.returncode == 0, launched.stderr
        (job_id,) = rows(workdir, "select job_id from runs")[0]
        os.killpg(int(job_id), signal.SIGKILL)  # the job's controller started a session of its own
        time.sleep(0.5)
    status = orchestrator(["status"], workdir)
    assert rows(workdir, "select state, error_class from runs") == [("lost", "lost")]
    assert "lost" in status.stdout


@pytest.mark.slow
def test_a_site_trainer_named_by_its_framework_yaml_runs_in_the_env_it_names(workdir, tmp_path_factory):
    site = harness_site(tmp_path_factory.mktemp("site-conf"))
    done = orchestrator([site, "framework=harness", "model=lenet", *FAST], workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = rows(workdir, "select framework, state, params, images_per_sec > 0 from results")
    assert row == ("harness", "done", 431080, 1), row  # the numpy framework's LeNet, another module name
    result = json.loads(next(workdir[0].glob("runs/*/*/0/result.json")).read_text())
    assert result["argv"][1:3] == ["-m", "tests.numpy_trainer"] and "/envs/torch-" in result["argv"][0]
    assert result["trainer"]["framework"] == "numpy"
