"""Backends and tracking as pure functions: Slurm's output parsed from canned text (every state
Slurm documents, array ranges and `%` limits, accounting lag), the verdicts drawn from it, and
`tracking.decide` on each combination of run-directory evidence and scheduler answer. The same
paths run against the real test cluster in test_slurm.py."""
import pytest
from hydra import compose, initialize_config_dir

from orchestrator import runstate
from orchestrator.backends import UnknownBackend, backend_class, backend_for
from orchestrator.backends.base import SchedulerUnavailable, Seen, signature
from orchestrator.backends.slurm import (LEFT_QUEUE, STATES, expand_range, parse_sacct, parse_squeue,
                                         verdicts)
from orchestrator.cell import Cell
from orchestrator.tracking import Evidence, decide

from conftest import REPO

# sacct -X -n -P --format=JobID,State,NodeList, as Slurm 22.05 prints it
SACCT = """\
100|COMPLETED|node1
101|FAILED|node1
102|TIMEOUT|node1
103|CANCELLED by 0|node1
104|OUT_OF_MEMORY|node1
105|NODE_FAIL|node1
106|PREEMPTED|node1
107|BOOT_FAIL|node1
108|DEADLINE|None assigned
109|REQUEUED|node1
110|RUNNING|node1
111|PENDING|None assigned
112|SUSPENDED|node1
113|REVOKED|None assigned
200_0|COMPLETED|node1
200_1|RUNNING|node1
200_[2-4,7%2]|PENDING|None assigned
201_[0-3]|PENDING|None assigned
300.batch|COMPLETED|node1
300+0|RUNNING|node1
garbage line
"""

# squeue -h -r -o %i|%T|%r|%N: what still waits or runs, with the reason
SQUEUE = """\
109|PENDING|BeginTime|
110|RUNNING|None|node1
111|PENDING|Priority|
112|SUSPENDED|None|node1
200_1|RUNNING|None|node1
200_2|PENDING|JobArrayTaskLimit|
200_3|PENDING|JobArrayTaskLimit|
200_4|PENDING|JobArrayTaskLimit|
400|PENDING|PartitionConfig|
"""


def test_every_documented_state_has_a_phase():
    documented = ("BOOT_FAIL CANCELLED COMPLETED CONFIGURING COMPLETING DEADLINE FAILED NODE_FAIL "
                  "OUT_OF_MEMORY PENDING PREEMPTED RUNNING RESV_DEL_HOLD REQUEUE_FED REQUEUE_HOLD "
                  "REQUEUED RESIZING REVOKED SIGNALING SPECIAL_EXIT STAGE_OUT STOPPED SUSPENDED TIMEOUT").split()
    assert set(documented) <= set(STATES)
    assert {phase for phase, _ in STATES.values()} == {"queued", "running", "ended"}


def test_array_ranges_expand_with_their_limit():
    assert expand_range("2-4,7") == {2, 3, 4, 7}
    records = {r.job: r for r in parse_sacct(SACCT) if r.tasks is not None}
    assert records["200"].tasks == {2, 3, 4, 7} and records["200"].throttle == 2
    assert records["201"].tasks == {0, 1, 2, 3} and records["201"].throttle is None


def test_sacct_parser_keeps_allocations_only():
    jobs = [r.job for r in parse_sacct(SACCT)]
    assert "300" not in jobs and "300.batch" not in jobs  # steps and het components are skipped
    states = {r.job: r.state for r in parse_sacct(SACCT)}
    assert states["103"] == "CANCELLED"  # "CANCELLED by 0": the first word
    assert {r.job: r.detail for r in parse_sacct(SACCT)}["108"] is None  # "None assigned"


def test_verdicts_of_every_end():
    ids = [str(i) for i in range(100, 114)]
    seen = verdicts(ids, parse_sacct(SACCT), parse_squeue(SQUEUE))
    classes = {j: (s.phase, s.error_class, s.imposed) for j, s in seen.items()}
    assert classes["100"] == ("ended", None, False)
    assert classes["101"] == ("ended", "crash", False)
    assert classes["102"] == ("ended", "timeout", True)
    assert classes["103"] == ("ended", "cancelled", True)
    assert classes["104"] == ("ended", "out_of_memory", True)
    assert classes["105"] == ("ended", "node_fail", True)
    assert classes["106"] == ("ended", "preempted", True)
    assert classes["107"] == ("ended", "node_fail", True)
    assert classes["108"] == ("ended", "timeout", True)
    assert classes["113"] == ("ended", "cancelled", True)
    # requeued: queued again, with the queue's reason
    assert seen["109"] == Seen("queued", "PENDING", "BeginTime")
    assert seen["110"].phase == "running" and seen["110"].detail == "node1"
    assert seen["111"] == Seen("queued", "PENDING", "Priority")
    assert seen["112"].phase == "running"


def test_verdicts_of_array_tasks():
    ids = ["200_0", "200_1", "200_2", "200_7", "200_9", "201_1"]
    seen = verdicts(ids, parse_sacct(SACCT), parse_squeue(SQUEUE))
    assert seen["200_0"].phase == "ended" and seen["200_1"].phase == "running"
    assert seen["200_2"] == Seen("queued", "PENDING", "JobArrayTaskLimit")
    # accounting still shows task 7 in the pending range, the queue no longer holds it
    assert seen["200_7"].state == LEFT_QUEUE and seen["200_7"].error_class == "cancelled"
    assert not seen["200_7"].imposed
    assert seen["200_9"].phase == "unknown"  # not in the range, not in the queue
    assert seen["201_1"].state == LEFT_QUEUE


def test_accounting_lag_and_silence():
    # just submitted: the queue has it, accounting not yet
    assert verdicts(["400"], [], parse_squeue(SQUEUE))["400"] == Seen("queued", "PENDING", "PartitionConfig")
    # accounting off (sacct fails): the queue is all Slurm knows
    assert verdicts(["400", "999"], None, parse_squeue(SQUEUE))["999"].phase == "unknown"
    # the controller is down (squeue fails): what accounting has, and no answer about the rest
    seen = verdicts(["110", "999"], parse_sacct(SACCT), None)
    assert seen["110"].phase == "running" and "999" not in seen
    with pytest.raises(SchedulerUnavailable):
        verdicts(["110"], None, None)


def test_slurm_backend_without_slurm_commands_does_not_answer(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sacct, no squeue here
    backend = backend_class("slurm")({})
    assert backend.poll(["1"]) is None and backend.poll(["1"]) is None
    assert backend.failures == 2 and "sacct" in backend.last_error
    with pytest.raises(SchedulerUnavailable):
        backend.find(["orch-x"])


def test_backends_are_chosen_by_name_in_one_place():
    assert backend_for({}).name == "local" and backend_for({"executor": "slurm"}).name == "slurm"
    with pytest.raises(UnknownBackend, match="not one of local, slurm"):
        backend_for({"executor": "pbs"})


def cell(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return Cell.from_config(compose("config", overrides=list(overrides)), tuple(overrides))


def test_slurm_resources_of_a_cell():
    gpu = cell("hardware=p100", "gpus=2", "cluster=slurm").config
    params = backend_for(gpu["cluster"]).resources(gpu)
    assert params["partition"] == "p100" and params["gres"] == "gpu:p100:2"
    assert params["cpus_per_task"] == 16 and params["mem"] == "64G" and params["time"] == 120
    assert params["exclusive"] is True and "account" not in params
    site = dict(gpu["cluster"], gpu_request="gpus_per_node", exclusive=False, account="proj1",
                sbatch={"reservation": "bench"})
    params = backend_for(site).resources(gpu)
    assert params["gpus_per_node"] == "p100:2" and "gres" not in params and "exclusive" not in params
    assert params["account"] == "proj1" and params["additional_parameters"] == {"reservation": "bench"}
    cpu = cell("hardware=cpu12", "cluster=slurm").config
    slurm = backend_for(cpu["cluster"])
    assert "gres" not in slurm.resources(cpu)
    assert signature(slurm.resources(cpu)) != signature(slurm.resources(gpu))
    assert backend_for({"executor": "local"}).resources(gpu) == {}


# --- tracking.decide: evidence x answer -------------------------------------------------------

DONE = {"state": "done", "started_at": 10.0, "error": None}
SIGNALLED = {"state": "failed", "started_at": 10.0, "error": {"class": "signal", "message": "SIGTERM"}}
CRASHED = {"state": "failed", "started_at": 10.0, "error": {"class": "crash", "message": "boom"}}


def call(evidence, seen, submitted_at=0.0, now=1000.0, grace_s=120.0, job_id="7"):
    return decide(evidence, seen, job_id=job_id, backend="slurm", submitted_at=submitted_at, now=now,
                  grace_s=grace_s)


def test_silence_changes_nothing():
    for evidence in (Evidence(), Evidence(started={"started_at": 5}), Evidence(result=CRASHED),
                     Evidence(broken="truncated JSON")):
        assert call(evidence, None) is None
    # a valid done result is the job's own measurement: it needs no scheduler
    assert call(Evidence(result=DONE), None)["state"] == "done"


def test_unknown_is_lost_only_after_grace_and_without_a_result():
    assert call(Evidence(), Seen("unknown"), submitted_at=950.0) is None
    lost = call(Evidence(), Seen("unknown"))
    assert lost["state"] == "lost" and "no longer knows it" in lost["error_message"]
    assert call(Evidence(result=CRASHED), Seen("unknown"))["error_class"] == "crash"
    broken = call(Evidence(broken="truncated JSON"), Seen("unknown"))
    assert broken["state"] == "failed" and broken["error_class"] == "broken_result"


def test_requeued_job_is_in_flight_whatever_its_old_result_says():
    update = call(Evidence(result=SIGNALLED), Seen("queued", "PENDING", "BeginTime"))
    assert update["state"] == "submitted" and update["state_detail"] == "PENDING (BeginTime)"
    # running again after a requeue: the old incarnation's result is stale (job.json is newer)
    update = call(Evidence(result=CRASHED, started={"started_at": 20.0}), Seen("running", "RUNNING"))
    assert update["state"] == "running"
    # a signalled trainer while Slurm still holds the job: wait for Slurm's word
    assert call(Evidence(result=SIGNALLED), Seen("running", "COMPLETING"))["state"] == "running"
    # a current failure while the job runs its next repeat: that run has ended
    assert call(Evidence(result=CRASHED), Seen("running", "RUNNING"))["error_class"] == "crash"


@pytest.mark.parametrize("state,klass,expected", [
    ("CANCELLED", "cancelled", "cancelled"), ("NODE_FAIL", "node_fail", "failed"),
    ("PREEMPTED", "preempted", "failed"), ("TIMEOUT", "timeout", "failed")])
def test_slurms_word_beats_the_jobs_file(state, klass, expected):
    update = call(Evidence(result=SIGNALLED), Seen("ended", state, None, klass, imposed=True))
    assert update["state"] == expected and update["error_class"] == klass
    assert "signal: SIGTERM" in update["error_message"]  # the job's own record is quoted


def test_an_end_of_its_own_takes_the_file():
    assert call(Evidence(result=CRASHED), Seen("ended", "FAILED", None, "crash"))["error_class"] == "crash"
    assert call(Evidence(), Seen("ended", "FAILED", None, "crash"))["state"] == "failed"
    assert call(Evidence(), Seen("ended", "COMPLETED"))["state"] == "lost"
    left = call(Evidence(), Seen("ended", LEFT_QUEUE, "left the queue before it started", "cancelled"))
    assert left["state"] == "cancelled"
    # accounting said "left the queue", but the file proves the task ran: the file wins
    assert call(Evidence(result=CRASHED), Seen("ended", LEFT_QUEUE, None, "cancelled"))["error_class"] == "crash"


def test_a_foreground_run_is_read_from_its_directory():
    assert decide(Evidence(started={"node": "n"}), None, job_id=None, backend="job", submitted_at=None,
                  now=1.0, grace_s=0)["state"] == "running"
    assert decide(Evidence(), None, job_id=None, backend="job", submitted_at=None, now=1.0, grace_s=0) is None


def test_every_decision_is_a_legal_move_from_every_open_state():
    evidences = [Evidence(), Evidence(result=DONE), Evidence(result=CRASHED), Evidence(result=SIGNALLED),
                 Evidence(broken="x"), Evidence(started={"started_at": 1})]
    answers = [None, Seen("unknown"), Seen("queued", "PENDING"), Seen("running", "RUNNING"),
               Seen("ended", "COMPLETED"), Seen("ended", "CANCELLED", None, "cancelled", True)]
    for old in (runstate.SUBMITTED, runstate.RUNNING):
        for evidence in evidences:
            for seen in answers:
                update = call(evidence, seen)
                if update:
                    assert runstate.can_move(old, update["state"]), (old, evidence, seen, update)


def test_run_state_model_refuses_illegal_moves():
    from orchestrator.db import Run

    run = Run(uid="u", sweep_id="s", cell_id="c", repeat=0, attempt=1, state="pending")
    run.state = "submitted"
    run.state = "done"
    with pytest.raises(runstate.IllegalMove, match="from done to running"):
        run.state = "running"
    with pytest.raises(runstate.IllegalMove, match="not one of"):
        Run(uid="v", sweep_id="s", cell_id="c", repeat=0, attempt=1, state="finished")
    assert set(runstate.FINAL) | set(runstate.OPEN) == set(runstate.STATES)
    assert set(runstate.RERUNNABLE) <= set(runstate.FINAL) and runstate.DONE not in runstate.RERUNNABLE
