"""Against the real four-node Slurm cluster of slurm/ (started by scripts/test.sh as root).

Cells go through submitit's Slurm executor and a real sbatch to a real slurmctld; their fate is
read back with sacct/squeue by `orchestrator status`. The cluster's GPUs are typed but fake
(no device behind them), so GPU cells are checked for placement, not for training.
"""
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import REPO
from helpers import SMALL, harness_site, orchestrator, rows, wait_until_final

pytestmark = pytest.mark.slow

def sacct(slurm_workdir, *job_ids, fields="JobID,JobName,Partition,State,ReqTRES%60,TimelimitRaw"):
    """sacct's rows for these jobs or array tasks. A task still pending is listed only under its
    array's base id, as one row `BASE_[0-3,5]` (`sacct -j BASE_0` then lists nothing): the base ids are
    asked, and a pending range stands for each task asked for that it covers, under that task's id
    (a base id asked for gets every row of its job, as `sacct -j BASE` gives)."""
    bases = sorted({j.split("_")[0] for j in job_ids})
    out = subprocess.run(["sacct", "-X", "-n", "-P", f"--format={fields}", "-j", ",".join(bases)],
                         env=slurm_workdir[1], capture_output=True, text=True, check=True).stdout
    names = fields.replace("%60", "").split(",")
    got = []
    for line in out.splitlines():
        row = dict(zip(names, line.split("|")))
        if row["JobID"].split("_")[0] in job_ids:  # a whole job or array asked for: every row of it
            got.append(row)
        else:
            got += [dict(row, JobID=j) for j in job_ids if _covers(row["JobID"], j)]
    return got


def _covers(listed, job_id):
    """Whether sacct's JobID `listed` (`BASE`, `BASE_3` or a pending `BASE_[0-3,5%2]`) is `job_id`."""
    if listed == job_id:
        return True
    base, _, spec = listed.partition("_[")
    want_base, _, index = job_id.partition("_")
    if not spec or base != want_base or not index.isdigit():
        return False
    for part in spec.rstrip("]").split("%")[0].split(","):
        low, _, high = part.partition("-")
        if int(low) <= int(index) <= int(high or low):
            return True
    return False


def test_a_pending_array_task_is_found_under_the_range_sacct_lists_it_in():
    # canned sacct JobIDs: a pending task is listed only as its array's range (seen on the test cluster)
    assert _covers("293_[0-1]", "293_1") and _covers("293_[0-3,5%2]", "293_5") and _covers("293_4", "293_4")
    assert not _covers("293_[0-3,5%2]", "293_4") and not _covers("2931_[0]", "293_0") and not _covers("293_[0-1]", "293")


def sacct_eventually(slurm_workdir, job_ids, want, timeout=60):
    """sacct rows for these jobs once it lists `want` of them in full (accounting lags
    submission: a first record can say JobName=allocation with no partition)."""
    deadline = time.time() + timeout
    while True:
        got = [r for r in sacct(slurm_workdir, *job_ids) if r["JobName"].startswith("orch-")]
        if len(got) >= want or time.time() > deadline:
            return got
        time.sleep(1)


def test_cells_become_one_array_per_resource_signature_on_their_partition(slurm_workdir):
    assert orchestrator(["data", "generate", "mnist", "-n", "200"], slurm_workdir).returncode == 0
    launched = orchestrator(["-m", *SMALL, "model=lenet", "dataset=synthetic,mnist",
                             "hardware=cpu12,p100", "gpus=0,1", "batch_size=8"], slurm_workdir)
    assert launched.returncode == 0, launched.stderr
    # cpu12 with gpus=1 cannot be placed: refused by name, never submitted
    assert "refused" in launched.stdout and "cpu12 has no GPUs" in launched.stdout, launched.stdout
    jobs = dict(rows(slurm_workdir, "select c.hardware || ':' || c.gpus || ':' || c.dataset, r.job_id "
                              "from runs r join cells c on c.id = r.cell_id"))
    assert len(jobs) == 6, jobs  # cpu12 gpus=0, p100 gpus=0 and gpus=1, each × 2 datasets
    # one array per signature: the two datasets of a (hardware, gpus) share its base job id
    for hw in ("cpu12:0", "p100:0", "p100:1"):
        ids = {jobs[f"{hw}:synthetic"], jobs[f"{hw}:mnist"]}
        assert {i.split("_")[0] for i in ids} == {next(iter(ids)).split("_")[0]} and all("_" in i for i in ids), jobs
    assert len({j.split("_")[0] for j in jobs.values()}) == 3

    by_id = {r["JobID"]: r for r in sacct_eventually(slurm_workdir, list(jobs.values()), 6)}
    assert by_id[jobs["cpu12:0:mnist"]]["Partition"] == "cpu"
    assert by_id[jobs["p100:1:mnist"]]["Partition"] == "p100"
    assert "gres/gpu:p100=1" in by_id[jobs["p100:1:mnist"]]["ReqTRES"], by_id
    assert "gres/gpu" not in by_id[jobs["p100:0:mnist"]]["ReqTRES"], by_id
    script = next(Path(slurm_workdir[0], "runs").glob("*/.submitit/*submission.sh"))
    assert "#SBATCH --exclusive" in script.read_text()

    wait_until_final(slurm_workdir)
    states = dict(rows(slurm_workdir, "select c.hardware || ':' || c.gpus || ':' || c.dataset, r.state || ':' || "
                                "coalesce(r.error_class, '') from runs r join cells c on c.id = r.cell_id"))
    assert states["cpu12:0:synthetic"] == "done:" and states["p100:0:mnist"] == "done:", states
    # the fake GPU has no device behind it: the trainer says so and the cell fails cleanly
    assert states["p100:1:synthetic"].startswith("failed:"), states
    assert orchestrator(["collect"], slurm_workdir).returncode == 0
    assert len(rows(slurm_workdir, "select * from results where images_per_sec > 0")) == 4


def test_pending_reason_cancellation_and_status_from_a_later_shell(slurm_workdir):
    launched = orchestrator(["-m", *SMALL, "model=lenet", "seed=1,2,3", "iterations=400",
                             "cluster.array_parallelism=1"], slurm_workdir)
    assert launched.returncode == 0, launched.stderr
    job_ids = [j for (j,) in rows(slurm_workdir, "select job_id from runs order by job_id")]
    assert len(job_ids) == 3
    deadline = time.time() + 60
    while True:  # the array runs one task at a time: the others wait, and Slurm says why
        status = orchestrator(["status"], slurm_workdir)
        if "JobArrayTaskLimit" in status.stdout or time.time() > deadline:
            break
        time.sleep(2)
    assert re.search(r"\d submitted: PENDING \(JobArrayTaskLimit\)", status.stdout), status.stdout
    subprocess.run(["scancel", job_ids[-1]], env=slurm_workdir[1], check=True)
    deadline = time.time() + 20
    while True:  # (the controller may list it for a moment more)
        status = orchestrator(["status"], slurm_workdir)
        cancelled = rows(slurm_workdir, f"select state, error_class from runs where job_id = '{job_ids[-1]}'")
        if cancelled[0][0] != "submitted" or time.time() > deadline:
            break
        time.sleep(1)
    assert cancelled == [("cancelled", "cancelled")], (cancelled, status.stdout)
    assert "cancelled" in status.stdout


def test_timeout_then_rerun_with_more_time(slurm_workdir):
    # ResNet-50 for 10,000 steps on one CPU cannot finish in a minute
    launched = orchestrator(["-m", *SMALL, "model=resnet50", "batch_size=2", "iterations=10000",
                             "hardware.time_min=1"], slurm_workdir)
    assert launched.returncode == 0, launched.stderr
    wait_until_final(slurm_workdir, timeout=400)
    first = rows(slurm_workdir, "select state, error_class, attempt from runs")
    assert first == [("failed", "timeout", 1)], first
    (message,) = rows(slurm_workdir, "select error_message from runs")[0]
    assert re.search(r"time limit \(?(1 min|60 s)", message), message  # the limit is named

    dry = orchestrator(["rerun", "--failed", "--class", "timeout", "--time", "7", "--dry-run"], slurm_workdir)
    assert dry.returncode == 0, dry.stderr
    assert "would resubmit 1 repeat" in dry.stdout and "attempt 2" in dry.stdout, dry.stdout
    assert "limit 7 min (rerun --time)" in dry.stdout, dry.stdout
    assert rows(slurm_workdir, "select count(*) from runs") == [(1,)]  # a dry run submits nothing
    assert "nothing to rerun" in orchestrator(["rerun", "--failed", "--class", "out_of_memory"], slurm_workdir).stdout

    # without --time, a timeout is retried with twice the limit it ran out of
    again = orchestrator(["rerun", "--failed", "--class", "timeout", "--where", "model=resnet50"], slurm_workdir)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "limit 2 min (rerun: twice 1 min)" in again.stdout, again.stdout
    second = rows(slurm_workdir, "select attempt, state, job_id, run_dir from runs where attempt = 2")
    assert len(second) == 1 and second[0][1] == "submitted" and second[0][3].endswith("/0.2"), second
    (acct,) = sacct_eventually(slurm_workdir, [second[0][2]], 1)
    assert acct["TimelimitRaw"] == "2", acct  # the rerun asked for the new time limit


def test_retry_timeout_resubmits_a_timed_out_cell_by_itself_with_twice_its_limit_once(slurm_workdir):
    # retry.timeout=1: a follow-up job, held by Slurm until the cell's job has ended, collects and
    # resubmits the timeout with twice its limit; attempt 2 is the last, so it gets no follow-up
    launched = orchestrator(["-m", *SMALL, "model=resnet50", "batch_size=2", "iterations=10000",
                             "hardware.time_min=1", "retry.timeout=1"], slurm_workdir)
    assert launched.returncode == 0, launched.stderr
    said = " ".join(launched.stdout.split())
    follow_up = re.search(r"retry.timeout=1: job (\d+)_0 resubmits", said)
    assert follow_up, said
    (sweep_id,) = rows(slurm_workdir, "select id from sweeps")[0]
    (first_job,) = rows(slurm_workdir, "select job_id from runs")[0]
    script = Path(slurm_workdir[0], "runs", sweep_id, ".submitit", f"{follow_up.group(1)}_submission.sh").read_text()
    assert f"#SBATCH --dependency=afterany:{first_job.split('_')[0]}\n" in script, script
    assert "#SBATCH --kill-on-invalid-dep=yes\n" in script and "#SBATCH --cpus-per-task=1\n" in script, script
    assert "--exclusive" not in script and "--gres" not in script, script  # none of the cell's own request

    deadline = time.time() + 400
    # attempt 2's row is recorded (pending) before its sbatch, and gets its job id after: wait for that
    while time.time() < deadline and not rows(slurm_workdir, "select 1 from runs where attempt = 2 and job_id is not null"):
        time.sleep(3)
    assert rows(slurm_workdir, "select attempt, state, error_class from runs where attempt = 1") == [
        (1, "failed", "timeout")]  # collected by the follow-up job itself
    (job_id, run_dir), = rows(slurm_workdir, "select job_id, run_dir from runs where attempt = 2")
    assert run_dir.endswith("/0.2"), run_dir
    (acct,) = sacct_eventually(slurm_workdir, [job_id], 1)
    assert acct["TimelimitRaw"] == "2", acct  # twice the limit it ran out of
    (config,) = rows(slurm_workdir, f"select config from sweep_cells where sweep_id = '{sweep_id}'")[0]
    assert '"time_source": "rerun: twice 1 min"' in config, config
    deadline = time.time() + 120
    while time.time() < deadline and [r["State"] for r in sacct_eventually(slurm_workdir, [follow_up.group(1)], 1)
                                      ] in ([], ["PENDING"], ["RUNNING"]):
        time.sleep(1)
    assert [r["State"] for r in sacct(slurm_workdir, follow_up.group(1))] == ["COMPLETED"]
    log = Path(slurm_workdir[0], "runs", sweep_id, ".submitit", f"{follow_up.group(1)}_0_0_log.out").read_text()
    assert "resubmitting 1 repeat" in log and "retry.timeout=1: job" not in log, log  # no second follow-up
    subprocess.run(["scancel", job_id.split("_")[0]], env=slurm_workdir[1], check=True)


def test_an_interrupted_submission_is_adopted_not_submitted_twice(slurm_workdir, monkeypatch):
    from hydra import compose, initialize_config_dir

    from orchestrator.sweep.cell import Cell
    from orchestrator.launch.submit import Options, submit_sweep

    tmp, env = slurm_workdir
    for key in ("ORCHESTRATOR_DB", "ORCHESTRATOR_RUNS", "ORCHESTRATOR_DATA", "SLURM_CONF"):
        monkeypatch.setenv(key, env[key])
    overrides = [*SMALL, "model=lenet", "iterations=2000"]
    cells = []
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        for seed in (1, 2):
            cells.append(Cell.from_config(compose("config", overrides=overrides + [f"seed={seed}"])))

    def interrupt(line):  # Ctrl-C lands after sbatch returned, before the job ids are committed
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        submit_sweep(cells, Options.from_config(cells[0].config), progress=interrupt)
    left = rows(slurm_workdir, "select state, job_id, state_detail from runs")
    assert len(left) == 2 and all(s == "pending" and j is None and d.startswith("submitting as") for s, j, d in left), left
    name = left[0][2].split()[2].split("[")[0]
    queued = subprocess.run(["squeue", "-h", "-r", "--name", name, "-o", "%i"], env=env,
                            capture_output=True, text=True).stdout.split()
    assert len(queued) == 2, queued  # the array did reach Slurm

    retyped = orchestrator(["-m", *overrides, "seed=1,2"], slurm_workdir)
    assert retyped.returncode == 0, retyped.stderr
    assert "0 cells submitted" in retyped.stdout and retyped.stdout.count("in flight") >= 1, retyped.stdout
    adopted = rows(slurm_workdir, "select job_id, state from runs where state != 'cancelled' order by job_id")
    assert sorted(j for j, _ in adopted) == sorted(queued), (adopted, queued)
    assert rows(slurm_workdir, "select count(*) from runs") == [(2,)]  # no second submission


def test_a_hundred_and_twenty_cells_cost_one_sbatch_per_resource_signature(slurm_workdir, tmp_path_factory):
    """The orchestration at scale: 120 cells over two signatures (the cpu and p100 partitions),
    run by the numpy harness trainer (the numpy framework as a site's trainer module)."""
    tmp, env = slurm_workdir
    site = harness_site(tmp_path_factory.mktemp("site-conf"))
    # every sbatch the launcher runs goes through this wrapper, which counts it
    bin_dir, calls = tmp_path_factory.mktemp("bin"), tmp / "sbatch-calls"
    real = shutil.which("sbatch", path=env["PATH"])
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {real} "$@"\n')
    (bin_dir / "sbatch").chmod(0o755)
    env = {**env, "PATH": f"{bin_dir}:{env['PATH']}"}

    launched = orchestrator(["-m", *SMALL, "cluster.exclusive=false", site,
                             "framework=harness", "model=lenet", "hardware=cpu12,p100", "seed=range(0,60)", "batch_size=8"],
                            (tmp, env), timeout=600)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert "120 cells submitted" in launched.stdout, launched.stdout
    assert len(calls.read_text().splitlines()) == 2, calls.read_text()
    arrays = rows(slurm_workdir, "select c.hardware, count(distinct substr(r.job_id, 1, instr(r.job_id, '_') - 1)), "
                           "count(*) from runs r join cells c on c.id = r.cell_id group by c.hardware")
    assert sorted(arrays) == [("cpu12", 1, 60), ("p100", 1, 60)], arrays

    wait_until_final(slurm_workdir, timeout=1500, poll=10)
    assert orchestrator(["collect"], slurm_workdir).returncode == 0
    states = rows(slurm_workdir, "select state, count(*) from runs group by state")
    assert states == [("done", 120)], states
    landed = rows(slurm_workdir, "select count(*), count(distinct cell) from results where framework = 'harness' "
                           "and images_per_sec > 0 and params = 431080")  # the numpy framework's LeNet
    assert landed == [(120, 120)], landed


def _daemon_pid(name):
    """The test cluster's own daemon `name`, from its pid file (never a process found by name)."""
    state = Path(os.environ.get("SLURM_TEST_DIR", "/tmp/orchestrator-slurm"))
    pid = int((state / "run" / f"{name}.pid").read_text().strip())
    assert Path(f"/proc/{pid}/comm").read_text().strip() == name
    return pid


def test_a_controller_outage_loses_nothing_and_offers_nothing_for_rerun(slurm_workdir):
    """slurmctld stopped mid-sweep: `status` and `rerun --failed --dry-run` while it is down mark
    nothing lost and offer nothing; after it is back every cell ends done exactly once."""
    # cells that last (several seconds each, two at a time): the outage must find runs in flight,
    # however fast this machine is (four nodes finished 60-step cells before accounting had caught up)
    launched = orchestrator(["-m", *SMALL, "model=lenet", "seed=range(0,4)", "iterations=2000",
                             "cluster.array_parallelism=2"], slurm_workdir)
    assert launched.returncode == 0, launched.stderr
    job_ids = [j for (j,) in rows(slurm_workdir, "select job_id from runs")]
    sacct_eventually(slurm_workdir, job_ids, 1)  # accounting knows the array
    deadline = time.time() + 120
    while time.time() < deadline:  # a run is measuring now
        orchestrator(["status"], slurm_workdir)
        if rows(slurm_workdir, "select count(*) from runs where state = 'running'") != [(0,)]:
            break
        time.sleep(1)
    open_runs = rows(slurm_workdir, "select count(*) from runs where state in ('submitted', 'running')")
    assert open_runs != [(0,)], rows(slurm_workdir, "select state, count(*) from runs group by state")
    # no grace: a job Slurm does not know would be lost at once, if silence counted as "does not know"
    down = (slurm_workdir[0], {**slurm_workdir[1], "ORCHESTRATOR_LOST_GRACE_S": "0"})
    for daemon in ("slurmctld", "slurmdbd"):  # neither squeue nor sacct answers
        os.kill(_daemon_pid(daemon), 15)
    try:
        time.sleep(2)
        for _ in range(2):
            status = orchestrator(["status"], down)
            assert status.returncode == 0, status.stderr
            assert "slurm did not answer" in status.stdout, status.stdout
            dry = orchestrator(["rerun", "--failed", "--dry-run"], down)
            assert dry.returncode == 0 and "nothing to rerun" in dry.stdout, dry.stdout
            states = dict(rows(slurm_workdir, "select state, count(*) from runs group by state"))
            assert not set(states) & {"lost", "failed", "cancelled"}, (states, status.stdout)
            time.sleep(3)
    finally:
        subprocess.run(["bash", str(REPO / "slurm" / "start.sh")], env=slurm_workdir[1], check=True,
                       capture_output=True)
    wait_until_final(slurm_workdir, timeout=600)
    assert orchestrator(["collect"], slurm_workdir).returncode == 0
    assert rows(slurm_workdir, "select state, count(*) from runs group by state") == [("done", 4)]
    assert rows(slurm_workdir, "select count(*), count(distinct cell) from results where images_per_sec > 0") == [(4, 4)]
    tasks = sacct(slurm_workdir, *{j.split("_")[0] for j in job_ids}, fields="JobID,State")
    assert sorted(t["JobID"] for t in tasks) == sorted(job_ids), tasks  # each task ran once


def _slow_sbatch(tmp_path, env, before_s=0, after_s=0):
    """PATH with an sbatch that waits before and/or after the real one, and the file it writes
    the real sbatch's answer to once that has returned."""
    bin_dir, landed = tmp_path / "slow-bin", tmp_path / "sbatch-landed"
    bin_dir.mkdir(exist_ok=True)
    real = shutil.which("sbatch", path=env["PATH"])
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\nsleep {before_s}\nout=$({real} "$@") || exit $?\n'
                                    f'echo "$out" >> {landed}\nsleep {after_s}\necho "$out"\n')
    (bin_dir / "sbatch").chmod(0o755)
    return {**env, "PATH": f"{bin_dir}:{env['PATH']}"}, landed


def _marked(slurm_workdir, n):
    """Whether `n` runs are recorded marked with their submission (its sbatch not answered yet)."""
    try:
        return rows(slurm_workdir, "select count(*) from runs where state_detail like 'submitting as%'") == [(n,)]
    except sqlite3.OperationalError:  # the database is being made
        return False


def _launch_and_kill(args, slurm_workdir, env, until):
    """Starts a sweep and SIGKILLs the orchestrator (only it: its sbatch child lives on) once
    `until()` holds."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", *args], cwd=slurm_workdir[0], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not until() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    proc.kill()
    proc.wait()


def test_a_submitter_killed_after_sbatch_leaves_tasks_that_run_and_are_adopted(slurm_workdir):
    """Killed between sbatch's answer and submitit's renaming of the pickles: the tasks claim
    their pickles themselves, the retype adopts the array, every cell is measured once."""
    cells = ["-m", *SMALL, "model=lenet", "seed=1,2,3"]
    slow, landed = _slow_sbatch(slurm_workdir[0], slurm_workdir[1], after_s=30)
    _launch_and_kill(cells, slurm_workdir, slow, until=landed.exists)
    assert all(d.startswith("submitting as") for (d,) in rows(slurm_workdir, "select state_detail from runs"))
    retyped = orchestrator(cells, slurm_workdir)
    assert retyped.returncode == 0, retyped.stderr
    assert "0 cells submitted" in retyped.stdout, retyped.stdout
    wait_until_final(slurm_workdir, timeout=300)
    assert orchestrator(["collect"], slurm_workdir).returncode == 0
    assert rows(slurm_workdir, "select state, count(*) from runs group by state") == [("done", 3)]
    (base,) = {j.split("_")[0] for (j,) in rows(slurm_workdir, "select job_id from runs")}
    tasks = sacct(slurm_workdir, base, fields="JobID,State")
    assert sorted(t["State"] for t in tasks) == ["COMPLETED"] * 3, tasks


def test_an_sbatch_landing_after_the_retype_runs_nothing_and_is_cancelled(slurm_workdir):
    """Killed while sbatch was still on its way: the retype gives that submission up and submits
    anew; the late array finds no pickle and cancels itself; the next launch records it."""
    cells = ["-m", *SMALL, "model=lenet", "seed=1,2,3"]
    slow, landed = _slow_sbatch(slurm_workdir[0], slurm_workdir[1], before_s=20)

    _launch_and_kill(cells, slurm_workdir, slow, until=lambda: _marked(slurm_workdir, 3))
    retyped = orchestrator(cells, slurm_workdir)  # well before the slow sbatch lands
    assert retyped.returncode == 0, retyped.stderr
    assert "3 cells submitted" in retyped.stdout and not landed.exists(), retyped.stdout
    deadline = time.time() + 60
    while not landed.exists() and time.time() < deadline:
        time.sleep(1)
    (late,) = landed.read_text().split()[-1:]  # "Submitted batch job N"
    wait_until_final(slurm_workdir, timeout=300)
    # the next launch finds the late array by name in accounting or the queue; accounting lags
    # (more so under load), so wait until it lists the array under its name, as it soon will
    assert sacct_eventually(slurm_workdir, [late], want=1, timeout=120), sacct(slurm_workdir, late)
    again = orchestrator(cells, slurm_workdir)  # all done: skipped; and the late array is found and recorded
    assert "0 cells submitted" in again.stdout, again.stdout
    assert orchestrator(["collect"], slurm_workdir).returncode == 0
    states = dict(rows(slurm_workdir, "select state, count(*) from runs group by state"))
    assert states == {"done": 3, "cancelled": 3}, states
    details = [d for (d,) in rows(slurm_workdir, "select state_detail from runs where state = 'cancelled'")]
    assert all(f"its array {late} landed later and was cancelled" in d for d in details), details
    assert rows(slurm_workdir, "select count(*), count(distinct cell) from results where state = 'done'") == [(3, 3)]
    deadline = time.time() + 60
    while time.time() < deadline:  # the late tasks cancelled themselves: none ran a cell
        tasks = sacct(slurm_workdir, late, fields="JobID,State")
        if tasks and all(t["State"].startswith("CANCELLED") for t in tasks):
            break
        time.sleep(2)
    assert tasks and all(t["State"].startswith("CANCELLED") for t in tasks), tasks


def _running(slurm_workdir, job_id, timeout=120):
    """Waits until the job's trainer is measuring (its job.json is written and Slurm says RUNNING)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        states = {t["JobID"]: t["State"] for t in sacct(slurm_workdir, job_id, fields="JobID,State")}
        started = list(Path(slurm_workdir[0], "runs").glob("*/*/0*/job.json"))
        if states.get(job_id) == "RUNNING" and started:
            time.sleep(3)  # past interpreter start-up: the trainer is in its steps
            return
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not start: {states}")


def _release(slurm_workdir, job_id):
    """Slurm holds a requeued job back for a while (BeginTime), or holds it for good when its
    relaunch failed ("launch failed requeued held", while the node was down); the test lets it
    start now, as an operator would."""
    deadline = time.time() + 60
    while time.time() < deadline:
        state = {t["JobID"]: t["State"] for t in sacct(slurm_workdir, job_id, fields="JobID,State")}.get(job_id)
        if state in ("PENDING", "REQUEUED"):
            for command in (["release", job_id], ["update", f"jobid={job_id}", "starttime=now"]):
                subprocess.run(["scontrol", *command], env=slurm_workdir[1], capture_output=True)
            return
        time.sleep(0.5)


#: one cell that trains for a while (AlexNet, a tiny batch, on one CPU): time to interfere
LONG = [*SMALL, "model=alexnet", "batch_size=2", "iterations=25"]


def test_a_requeued_job_is_followed_to_its_final_attempt_and_measured_once(slurm_workdir):
    """`scontrol requeue` of a running task: its trainer gets SIGTERM and writes a `signal`
    result; Slurm runs it again. Tracking follows it, `rerun --failed` offers nothing while it
    is in flight, and one measurement lands."""
    assert orchestrator(["-m", *LONG], slurm_workdir).returncode == 0
    ((job_id,),) = rows(slurm_workdir, "select job_id from runs")
    _running(slurm_workdir, job_id)
    subprocess.run(["scontrol", "requeue", job_id], env=slurm_workdir[1], check=True)
    deadline = time.time() + 60
    while time.time() < deadline:  # the first incarnation's own word, before Slurm's second start
        result = next(Path(slurm_workdir[0], "runs").glob("*/*/0/result.json"), None)
        if result and '"signal"' in result.read_text():
            break
        time.sleep(0.5)
    status = orchestrator(["status"], slurm_workdir)
    assert rows(slurm_workdir, "select state from runs") in ([("submitted",)], [("running",)]), status.stdout
    dry = orchestrator(["rerun", "--failed", "--dry-run"], slurm_workdir)
    assert "nothing to rerun" in dry.stdout, dry.stdout
    collected = orchestrator(["collect"], slurm_workdir)  # the old failure waits for the job's end
    assert rows(slurm_workdir, "select count(*) from runs where collected_at is not null") == [(0,)], collected.stdout
    _release(slurm_workdir, job_id)
    wait_until_final(slurm_workdir, timeout=300)
    assert orchestrator(["collect"], slurm_workdir).returncode == 0
    assert rows(slurm_workdir, "select state, attempt from runs") == [("done", 1)]
    assert rows(slurm_workdir, "select count(*) from results where images_per_sec > 0") == [(1,)]


def test_a_running_task_cancelled_is_cancelled_then_rerun_once(slurm_workdir):
    assert orchestrator(["-m", *LONG], slurm_workdir).returncode == 0
    ((job_id,),) = rows(slurm_workdir, "select job_id from runs")
    _running(slurm_workdir, job_id)
    subprocess.run(["scancel", job_id], env=slurm_workdir[1], check=True)
    wait_until_final(slurm_workdir, timeout=120)
    assert rows(slurm_workdir, "select state, error_class from runs") == [("cancelled", "cancelled")]
    again = orchestrator(["rerun", "--failed", "--class", "cancelled"], slurm_workdir)
    assert again.returncode == 0 and "submitted" in again.stdout, again.stdout
    wait_until_final(slurm_workdir, timeout=300)
    assert orchestrator(["collect"], slurm_workdir).returncode == 0
    assert rows(slurm_workdir, "select attempt, state, error_class from runs order by attempt") == \
        [(1, "cancelled", "cancelled"), (2, "done", None)]
    assert rows(slurm_workdir, "select count(*) from results where state = 'done'") == [(1,)]


def _node_back(env, node):
    """The node in service again: resumed if it is down or drained (the requeued job's relaunch
    can meet its own old incarnation on the same node and drain it, "Duplicate jobid"); the held
    jobs that left behind released."""
    shown = subprocess.run(["scontrol", "show", "node", node], env=env, capture_output=True, text=True).stdout
    if re.search(r"State=\S*(DOWN|DRAIN)", shown):
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], env=env, capture_output=True)
    queue = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%r"], env=env, capture_output=True, text=True).stdout
    for line in queue.splitlines():
        job, _, reason = line.partition("|")
        if "held" in reason.lower() or "BeginTime" in reason:
            for command in (["release", job], ["update", f"jobid={job}", "starttime=now"]):
                subprocess.run(["scontrol", *command], env=env, capture_output=True)


def test_a_node_set_down_mid_run_ends_with_slurms_class_and_one_measurement(slurm_workdir):
    assert orchestrator(["-m", *LONG], slurm_workdir).returncode == 0
    ((job_id,),) = rows(slurm_workdir, "select job_id from runs")
    _running(slurm_workdir, job_id)
    env = slurm_workdir[1]
    node = dict(rows(slurm_workdir, "select 'node', node from runs"))["node"] or \
        subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%N"], env=env, capture_output=True, text=True).stdout.strip()
    assert node, "the running job names no node"
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=orchestrator-test"],
                   env=env, check=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            orchestrator(["status"], slurm_workdir)
            state = rows(slurm_workdir, "select state, error_class from runs")
            if state[0][0] != "running":
                break
            time.sleep(1)
        # Slurm requeues a batch job whose node failed (JobRequeue defaults to 1): in flight again,
        # or ended node_fail where requeue is off; either way the scheduler's word, never "crash"
        assert state[0] in (("submitted", None), ("running", None), ("failed", "node_fail")), state
        time.sleep(6)  # the old incarnation's processes end (KillWait=5) before the node returns
        if state[0][0] == "failed":
            assert orchestrator(["rerun", "--failed"], slurm_workdir).returncode == 0
        deadline = time.time() + 300
        while time.time() < deadline:
            _node_back(env, node)
            orchestrator(["status"], slurm_workdir)
            if rows(slurm_workdir, "select count(*) from runs where state in ('pending','submitted','running')") \
                    == [(0,)]:
                break
            time.sleep(2)
    finally:  # whatever happened, the cluster stays usable for the tests after this one
        _node_back(env, node)
    wait_until_final(slurm_workdir, timeout=60)
    assert orchestrator(["collect"], slurm_workdir).returncode == 0
    assert rows(slurm_workdir, "select count(*) from results where state = 'done'") == [(1,)]
    assert rows(slurm_workdir, "select count(*) from runs where state = 'done'") == [(1,)]


#: A site's hardware of one CPU (a site config dir's hardware/tiny.yaml): a sweep on it overrides
#: nothing under `hardware.`, so its cells share their composition's hardware dict (expand.py).
def test_retry_timeout_follows_up_a_cell_that_failed_in_an_earlier_sweep(slurm_workdir):
    """Issue 35, 4: typed again after a failure, the cell's attempt is 2; with retry.timeout=1
    it was given no follow-up (attempts were counted across sweeps, 2 > 1)."""
    cell = ["-m", *SMALL, "model=lenet", "seed=5"]
    first = orchestrator(cell, slurm_workdir)
    assert first.returncode == 0, first.stderr
    wait_until_final(slurm_workdir)
    con = sqlite3.connect(str(slurm_workdir[0] / "results.db"))
    with con:  # as if it had timed out (a minute is not waited for)
        con.execute("update runs set state = 'failed', error_class = 'timeout'")
    con.close()
    again = orchestrator([*cell, "hardware.time_min=1", "retry.timeout=1"], slurm_workdir)
    assert again.returncode == 0, again.stderr
    assert rows(slurm_workdir, "select attempt from runs order by attempt") == [(1,), (2,)]
    said = " ".join(again.stdout.split())
    assert re.search(r"retry.timeout=1: job \d+(_0)? resubmits", said), said


def test_a_launch_beside_one_still_submitting_leaves_its_submission_alone(slurm_workdir):
    """Two launches at once: the second starts while the first one's sbatch is on its way (its runs
    recorded and marked, their job ids not back yet, its launcher alive). The second settles only
    submissions whose launcher is gone: the first's runs stay pending, their bundle in place, and
    the first records its job ids and ends well."""
    first_cells = ["-m", *SMALL, "model=lenet", "seed=1,2,3"]
    slow, landed = _slow_sbatch(slurm_workdir[0], slurm_workdir[1], before_s=45)

    first = subprocess.Popen([sys.executable, "-m", "orchestrator", *first_cells], cwd=slurm_workdir[0], env=slow,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while not _marked(slurm_workdir, 3) and time.time() < deadline and first.poll() is None:
            time.sleep(0.2)
        assert _marked(slurm_workdir, 3) and first.poll() is None, "the first launch never reached its sbatch"
        second = orchestrator(["-m", *SMALL, "model=lenet", "seed=4"], slurm_workdir)  # other cells, plain sbatch
        assert second.returncode == 0, second.stdout + second.stderr
        assert not landed.exists(), "the first sbatch landed before the second launch ended: nothing was tested"
        states = rows(slurm_workdir, "select state, count(*) from runs where state_detail like 'submitting as%' "
                                     "or state = 'cancelled' group by state")
        assert states == [("pending", 3)], states  # the first launch's runs: untouched
        out, _ = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0 and "3 cells submitted" in out, out
    # every run of both launches handed over once, none given up (whether a job started yet is Slurm's)
    assert rows(slurm_workdir, "select count(*) from runs where job_id is not null and state != 'cancelled'") == [(4,)]
    jobs = {j.split("_")[0] for (j,) in rows(slurm_workdir, "select job_id from runs")}
    subprocess.run(["scancel", *jobs], env=slurm_workdir[1], check=False)  # what they run is not the question
