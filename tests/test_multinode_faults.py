"""Faults across nodes (issue 26): which node's failure a cell across nodes ends with, read
from node.json files written here (node_group's pure parts); and on the four-node test
cluster, a rank killed on the second node and the second node set DOWN mid-job, each ending
the cell with its class, naming the node, and measured once more by `rerun --failed` (or by
Slurm's requeue)."""
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from helpers import SMALL, orchestrator, rows, wait_until_final
from orchestrator.job import node_group
from trainers.common import failure_classes as fc

#: one incarnation of job 7 (the environment both nodes' jobs see); REQUEUED is its next one
JOB = {"SLURM_JOB_ID": "7"}
REQUEUED = {"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "1"}
PLACE = node_group.Place(rank=0, names=("node1", "node2", "node3"), addrs=("127.0.0.1",) * 3, job_id="7")


def write(run_dir, rank, error=None, environ=JOB, at=None):
    node_group.node_dir(run_dir, rank).mkdir(parents=True, exist_ok=True)
    node_group.write_node(run_dir, rank, PLACE.names[rank], {"error": error}, environ)
    if at is not None:  # the time a node's failure was stamped, set outright: no clock in the test
        path = node_group.node_dir(run_dir, rank) / node_group.NODE_FILE
        path.write_text(json.dumps(dict(json.loads(path.read_text()), at=at)))
    return node_group.read_node(run_dir, rank, JOB)


KILLED = {"class": fc.CRASH, "message": "rank 1 on node 1 ended (killed by signal 9) without reporting an error"}
RESET = {"class": fc.CRASH, "message": "RuntimeError: [pair.cc:537] Read error [127.0.0.1]:4242: "
                                       "Connection reset by peer. This is typically caused by a remote worker"}
WATCHED = {"class": fc.RANK_FAILED, "message": "stopped because node node2 reported crash"}


def test_a_killed_rank_is_the_cause_even_where_a_peer_noticed_it_first(tmp_path):
    noticed = write(tmp_path, 0, RESET, at=100.0)   # node 0's collective saw the reset first
    write(tmp_path, 2, WATCHED, at=99.0)             # node 2 was stopped by the watch, earlier still
    killed = write(tmp_path, 1, KILLED, at=101.0)
    assert node_group.failed_peer(PLACE, tmp_path, JOB)["node"] == "node2"
    peers = {1: killed, 2: node_group.read_node(tmp_path, 2, JOB)}
    error = node_group.first_failure(PLACE, noticed, peers, 10)
    assert error["class"] == fc.RANK_FAILED
    assert error["message"].startswith("a rank on node node2 (node 1 of 3) failed first (crash): rank 1 on node 1 "
                                       "ended (killed by signal 9)"), error


def test_a_node_stopped_by_the_scheduler_keeps_the_signal_class_for_tracking_to_read(tmp_path):
    # a node lost or a job requeued: Slurm's SIGTERM reaches the trainers; the scheduler's record,
    # not a rank_failed of the job's own, must say what happened (tracking.decide waits for it)
    signalled = write(tmp_path, 1, {"class": fc.SIGNALLED, "message": "terminated by signal 15"}, at=1.0)
    error = node_group.first_failure(PLACE, write(tmp_path, 0, RESET, at=2.0), {1: signalled, 2: write(tmp_path, 2)}, 10)
    assert error == {"class": fc.SIGNALLED, "message": "on node node2 (node 1 of 3): terminated by signal 15"}


def test_a_specific_class_keeps_its_name_and_gains_the_node(tmp_path):
    oom = write(tmp_path, 2, {"class": fc.OUT_OF_MEMORY, "message": "CUDA out of memory"}, at=5.0)
    error = node_group.first_failure(PLACE, None, {1: write(tmp_path, 1), 2: oom}, 10)
    assert error == {"class": fc.OUT_OF_MEMORY, "message": "on node node3 (node 2 of 3): CUDA out of memory"}


def test_a_node_never_heard_from_is_the_cause_before_one_that_only_noticed_it(tmp_path):
    noticed = write(tmp_path, 0, RESET)
    error = node_group.first_failure(PLACE, noticed, {1: None, 2: write(tmp_path, 2, WATCHED)}, 10)
    assert error["class"] == fc.RANK_FAILED and error["message"].startswith("node node2 reported nothing 10 s after"), error
    # but a node's own failure beats silence: the silent node was only stopped by it
    own = write(tmp_path, 2, KILLED)
    assert "node node3 (node 2 of 3) failed first" in node_group.first_failure(PLACE, noticed, {1: None, 2: own}, 10)["message"]


def test_every_node_ending_well_is_no_failure(tmp_path):
    assert node_group.first_failure(PLACE, None, {1: write(tmp_path, 1), 2: write(tmp_path, 2)}, 10) is None
    assert node_group.failed_peer(PLACE, tmp_path, JOB) is None


def test_a_requeued_job_does_not_read_what_its_earlier_incarnation_left(tmp_path):
    write(tmp_path, 1, KILLED)                       # the incarnation that Slurm requeued
    assert node_group.read_node(tmp_path, 1, JOB)["error"] == KILLED
    assert node_group.read_node(tmp_path, 1, REQUEUED) is None
    assert node_group.failed_peer(PLACE, tmp_path, REQUEUED) is None
    (tmp_path / "node-2").mkdir()
    (tmp_path / "node-2" / node_group.NODE_FILE).write_text("[1, 2")  # half a file, or not a record
    assert node_group.read_node(tmp_path, 2, JOB) is None


def test_ranks_whose_checksums_differ_are_named_and_equal_ones_pass():
    same = [{"rank": 0, "node": 0, "sha256": "a" * 64}, {"rank": 1, "node": 1, "sha256": "a" * 64}]
    assert node_group.diverged(same) is None and node_group.diverged(same[:1]) is None
    assert node_group.diverged([{"rank": 0, "node": 0, "sha256": None}] * 2) is None  # no checksum given
    error = node_group.diverged([same[0], dict(same[1], sha256="b" * 64)])
    assert error["class"] == fc.RANKS_DIVERGED and "\n" not in error["message"]
    assert "rank 0 (node 0) aaaaaaaaaaaa, rank 1 (node 1) bbbbbbbbbbbb" in error["message"]
    assert error["message"].endswith(fc.way_out(fc.RANKS_DIVERGED))
    assert fc.RANKS_DIVERGED not in fc.RETRIED  # the same exchange diverges the same way again


def params(rank, sha="a" * 64, **more):
    return {"event": "params", "rank": rank, "sha256": sha, **more}


def test_malformed_params_events_are_skipped_with_one_note_never_a_crash():
    """A params event with no rank, a list or a bool as rank, or a sha256 that is not a string
    (a non-JSON-number rank crashed every single-node run, which now reads checksums) is skipped;
    one note counts them; the well-formed ones still decide."""
    start = {"event": "run_start", "processes": 2, "nodes": 1}
    events = [start, {"event": "params"}, params([1]), params(True), params(0, sha=12345), params(1, sha=["x"]),
              params(0), params(1)]
    ranks, note = node_group.checksums({0: events}, start)
    assert [(r["rank"], r["node"]) for r in ranks] == [(0, 0), (1, 0)] and node_group.diverged(ranks) is None
    assert note == ("5 params event(s) skipped: a params event needs a whole-number rank and a string sha256 "
                    "(the trainer's protocol.py writes them)")
    assert node_group.checksums({0: [start, params(0), params(1)]}, start) == (
        [{"rank": 0, "node": 0, "sha256": "a" * 64}, {"rank": 1, "node": 0, "sha256": "a" * 64}], None)


def test_a_rank_that_sends_no_checksum_is_named_where_others_sent_one():
    """Two nodes of two processes each: rank 3 (on node 1) sent none, so its agreement is unchecked
    and the note names it; it is no failure. A framework that sends none at all gets no note; one
    process per node expects rank 0 of each node."""
    start = {"event": "run_start", "processes": 4, "nodes": 2}
    ranks, note = node_group.checksums({0: [start, params(0), params(1)], 1: [params(2)]}, start)
    assert [r["rank"] for r in ranks] == [0, 1, 2] and node_group.diverged(ranks) is None
    assert note == ("no parameter checksum from rank 3 (node 1) while 3 other rank(s) sent one: "
                    "their agreement with the others is unchecked")
    assert node_group.checksums({0: [start], 1: []}, start) == ([], None)  # numpy, caffe, cntk
    assert node_group.checksums({0: [start, params(0, sha=None)]}, start)[1] is None
    per_node = {"event": "run_start", "processes": 1, "nodes": 2}
    _, note = node_group.checksums({0: [per_node, params(0)], 1: []}, per_node)
    assert note.startswith("no parameter checksum from rank 0 (node 1) while 1 other rank(s)")
    assert node_group.expected_ranks({"processes": 4, "nodes": 2}) == [(0, 0), (0, 1), (1, 2), (1, 3)]
    assert node_group.expected_ranks({}) == [(0, 0)]


@pytest.mark.slow
def test_a_run_whose_ranks_really_diverge_fails_ranks_diverged_with_the_way_out(tmp_path):
    """Two CPU replicas of a trainer that exchanges no gradients (tests/unsynced_trainer.py), run
    by the orchestrator: each rank's checksum is relayed, they differ, and the run fails with
    its own class, each rank's checksum and the way out in its message; one replica is done."""
    from helpers import FAST, user_dir

    site = unsynced_site(tmp_path / "site-conf")
    workdir = user_dir(tmp_path, dict(os.environ, TRAINER_CPU_REPLICAS="1"))
    done = orchestrator(["-m", site, "framework=unsynced", "model=lenet",
                         "dataset=synthetic", "gpus=0,2", "batch_size=8", "threads=1", "wait=true", *FAST], workdir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = rows(workdir, "select r.state, r.error_class, r.error_message from runs r join cells c "
                        "on c.id = r.cell_id order by c.gpus")
    assert [(state, klass) for state, klass, _ in got] == [("done", None), ("failed", fc.RANKS_DIVERGED)], got
    message = got[1][2]
    assert message.startswith("the ranks ended with different parameters: rank 0 (node 0) ")
    assert ", rank 1 (node 0) " in message and fc.way_out(fc.RANKS_DIVERGED) in message
    result = json.loads(next(p for p in tmp_path.glob("runs/**/result.json")
                             if json.loads(p.read_text())["state"] == "failed").read_text())
    assert [r["rank"] for r in result["ranks"]] == [0, 1] and len({r["sha256"] for r in result["ranks"]}) == 2


@pytest.mark.slow
def test_a_rank_sending_a_malformed_checksum_costs_a_note_not_the_run(tmp_path):
    """Two CPU replicas, rank 1 sending a number for its checksum: the run is done with its
    metrics, and its notes skip that event and name rank 1 as unchecked (it crashed before)."""
    from helpers import FAST, user_dir

    site = unsynced_site(tmp_path / "site-conf")
    workdir = user_dir(tmp_path, dict(os.environ, TRAINER_CPU_REPLICAS="1", UNSYNCED_BAD_RANK="1"))
    done = orchestrator(["-m", site, "framework=unsynced", "model=lenet", "dataset=synthetic", "gpus=2",
                         "batch_size=8", "threads=1", "wait=true", *FAST], workdir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(next(tmp_path.glob("runs/**/result.json")).read_text())
    assert result["state"] == "done" and result["metrics"]["images_per_sec"] > 0, result.get("error")
    assert "1 params event(s) skipped: a params event needs a whole-number rank and a string sha256" in result["notes"]
    assert "no parameter checksum from rank 1 (node 0) while 1 other rank(s) sent one" in result["notes"]


def unsynced_site(path):
    """The override that adds framework `unsynced` (tests/unsynced_trainer.py) as a site would."""
    (path / "framework").mkdir(parents=True)
    (path / "framework" / "unsynced.yaml").write_text("name: unsynced\ntrainer: tests.unsynced_trainer\nenv: numpy\n")
    return f"hydra.searchpath=[file://{path}]"


@pytest.mark.slow
def test_two_nodes_whose_ranks_diverge_fail_ranks_diverged_on_the_cluster(slurm_workdir, tmp_path_factory):
    """The same across two nodes of the test cluster: each node's rank trains alone, node 0 reads
    node 1's checksum from its events file, and the cell fails naming both nodes' ranks."""
    site = unsynced_site(tmp_path_factory.mktemp("site-conf"))
    done = orchestrator(["-m", site, *SMALL, "framework=unsynced", "model=lenet", "dataset=synthetic",
                         "nodes=2", "batch_size=8"], slurm_workdir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    wait_until_final(slurm_workdir)
    ((state, klass, message),) = rows(slurm_workdir, "select state, error_class, error_message from runs")
    assert (state, klass) == ("failed", fc.RANKS_DIVERGED), message
    assert message.startswith("the ranks ended with different parameters: rank 0 (node 0) ")
    assert ", rank 1 (node 1) " in message and "rerun --failed --class ranks_diverged" in message
    assert fc.RANKS_DIVERGED in orchestrator(["status", "--failed"], slurm_workdir).stdout


def test_waiting_for_peers_ends_at_the_patience_or_the_deadline_with_the_silent_as_none(tmp_path):
    write(tmp_path, 1)
    # patience spent / deadline passed: the answer at once, the node not heard from as None
    assert node_group.wait_for_peers(PLACE, tmp_path, None, patience_s=0, environ=JOB)[2] is None
    found = node_group.wait_for_peers(PLACE, tmp_path, time.monotonic() - 1, patience_s=3600, environ=JOB)
    assert found[1]["node"] == "node2" and found[2] is None
    # a node's own failure ends the wait without the others
    write(tmp_path, 1, KILLED)
    assert node_group.wait_for_peers(PLACE, tmp_path, None, patience_s=3600, environ=JOB)[1]["error"] == KILLED


# --- on the four-node test cluster ------------------------------------------------------------------

#: a 2-node cell that trains for about half a minute on the test cluster (iterations measured)
TWO_NODES = [*SMALL, "framework=torch", "model=lenet", "dataset=synthetic", "nodes=2", "batch_size=8",
             "iterations=5000"]


def _job_processes(job_id):
    """{pid: environment} of the processes of one Slurm job (array task `123_0` or job `123`)."""
    base, _, task = job_id.partition("_")
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            raw = Path("/proc", pid, "environ").read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        env = dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)
        if task and (env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")) == (base, task):
            found[int(pid)] = env
        elif not task and env.get("SLURM_JOB_ID") == base:
            found[int(pid)] = env
    return found


def _poll(what, check, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen in {timeout} s")


def _second_node_training(slurm_workdir, job_id):
    """The run directory once the second node's trainer is past its first step."""
    def stepping():
        for events in Path(slurm_workdir[0], "runs").glob("*/*/0/node-1/events.jsonl"):
            if '"step"' in events.read_text():
                return events.parent.parent
        return None
    return _poll(f"job {job_id}'s second node training", stepping, 300)


def _until_no_run_is_open(slurm_workdir, env, node, job_id, timeout=400):
    """`status` until no run is open, the node kept in service and a requeued job released."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        _node_back(env, node)
        _release(env, job_id)
        orchestrator(["status"], slurm_workdir)
        if rows(slurm_workdir, "select count(*) from runs where state in ('pending','submitted','running')") == [(0,)]:
            return
        time.sleep(2)
    raise AssertionError(orchestrator(["status"], slurm_workdir).stdout)


def _node_back(env, node):
    """The node in service again, and the job Slurm requeued (held back ~2 min) released."""
    shown = subprocess.run(["scontrol", "show", "node", node], env=env, capture_output=True, text=True).stdout
    if re.search(r"State=\S*(DOWN|DRAIN)", shown):
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], env=env, capture_output=True)


def _release(env, job_id):
    """A requeued job held back (BeginTime, ~2 min) or held after a failed relaunch, let go now."""
    for command in (["release", job_id], ["update", f"jobid={job_id}", "starttime=now"]):
        subprocess.run(["scontrol", *command], env=env, capture_output=True)


def _measured_once(slurm_workdir):
    assert orchestrator(["collect"], slurm_workdir).returncode == 0
    assert rows(slurm_workdir, "select count(*) from results where state = 'done' and nodes = 2") == [(1,)]
    assert rows(slurm_workdir, "select count(*) from runs where state = 'done'") == [(1,)]


@pytest.mark.slow
def test_a_rank_killed_on_the_second_node_ends_the_cell_rank_failed_naming_it(slurm_workdir):
    assert orchestrator(["-m", *TWO_NODES], slurm_workdir).returncode == 0
    ((job_id,),) = rows(slurm_workdir, "select job_id from runs")
    run_dir = _second_node_training(slurm_workdir, job_id)
    ranks = {pid: env for pid, env in _job_processes(job_id).items()
             if env.get("TRAINER_NODE_RANK") == "1" and env.get("RANK") == "1"}
    assert len(ranks) == 1, ranks
    ((pid, env),) = ranks.items()
    node = env["SLURMD_NODENAME"]
    os.kill(pid, 9)
    result = _poll("the cell's result", lambda: (run_dir / "result.json").exists() and
                   json.loads((run_dir / "result.json").read_text()), 120)
    assert result["state"] == "failed" and result["error"]["class"] == "rank_failed", result["error"]
    assert f"a rank on node {node} (node 1 of 2) failed first" in result["error"]["message"], result["error"]
    # no trainer is left on either node: the job ends with them (never gloo's half-hour timeout)
    _poll(f"job {job_id}'s processes ending", lambda: not _job_processes(job_id), 60)
    wait_until_final(slurm_workdir, timeout=120)
    assert rows(slurm_workdir, "select state, error_class from runs") == [("failed", "rank_failed")]
    assert node in rows(slurm_workdir, "select error_message from runs")[0][0]
    assert orchestrator(["rerun", "--failed"], slurm_workdir).returncode == 0
    wait_until_final(slurm_workdir)
    _measured_once(slurm_workdir)


@pytest.mark.slow
@pytest.mark.parametrize("requeue", [True, False], ids=["requeued", "no_requeue"])
def test_the_second_node_set_down_ends_the_cell_with_slurms_class_and_one_measurement(slurm_workdir, requeue):
    env = slurm_workdir[1]
    extra = [] if requeue else ["+cluster.sbatch.no_requeue=true"]
    assert orchestrator(["-m", *TWO_NODES, *extra], slurm_workdir).returncode == 0
    ((job_id,),) = rows(slurm_workdir, "select job_id from runs")
    _second_node_training(slurm_workdir, job_id)
    listed = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%N"], env=env, capture_output=True,
                            text=True).stdout.strip()
    names = subprocess.run(["scontrol", "show", "hostnames", listed], env=env, capture_output=True,
                           text=True).stdout.split()
    assert len(names) == 2, listed
    node = names[1]
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=orchestrator-test"],
                   env=env, check=True)
    try:
        def ended():
            orchestrator(["status"], slurm_workdir)
            state = rows(slurm_workdir, "select state, error_class, error_message from runs")[0]
            return state if state[0] != "running" else None
        state = _poll("the run leaving `running`", ended, 120)
        # Slurm requeues a job whose node failed (JobRequeue=1 by default): in flight again; where
        # requeue is off, the scheduler's class naming the job's nodes; never node 0's own rank_failed
        assert state[:2] in ((("submitted", None), ("running", None), ("failed", "node_fail")) if requeue
                             else (("failed", "node_fail"),)), state
        if state[0] == "failed":
            assert f"NODE_FAIL ({listed})" in state[2], state
        _poll(f"job {job_id}'s processes ending", lambda: not _job_processes(job_id) or
              rows(slurm_workdir, "select state from runs")[0][0] == "running", 60)
        _node_back(env, node)
        if state[0] == "failed":
            assert orchestrator(["rerun", "--failed"], slurm_workdir).returncode == 0
        _until_no_run_is_open(slurm_workdir, env, node, job_id.split("_")[0])
    finally:  # whatever happened, the cluster stays usable for the tests after this one
        _node_back(env, node)
    _measured_once(slurm_workdir)
