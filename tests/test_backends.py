"""Backends and tracking as pure functions: Slurm's output parsed from canned text (every state
Slurm documents, array ranges and `%` limits, accounting lag), the verdicts drawn from it, and
`tracking.decide` on each combination of run-directory evidence and scheduler answer. The same
paths run against the real test cluster in test_slurm.py."""
import pytest
from hydra import compose, initialize_config_dir

from orchestrator import runstate
from orchestrator.backends import UnknownBackend, backend_class, backend_for
from orchestrator.backends.base import SchedulerUnavailable, SchedulerView, resources, signature
from orchestrator.backends.sbatch import signal_delay_s
from orchestrator.backends.slurm import SlurmBackend
from orchestrator.backends.slurm_states import (LEFT_QUEUE, STATES, UNPLACEABLE, expand_range, parse_sacct,
                                                parse_squeue, verdicts)
from orchestrator.backends.slurm_cluster import (Request, cluster_from, hopeless, parse_config, parse_gres, parse_mb,
                                                 parse_minutes, parse_records, refusal, request_from_tres)
from orchestrator.sweep.cell import Cell
from orchestrator.launch.tracking import Evidence, decide

from helpers import REPO

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
    assert seen["109"] == SchedulerView("queued", "PENDING", "BeginTime")
    assert seen["110"].phase == "running" and seen["110"].detail == "node1"
    assert seen["111"] == SchedulerView("queued", "PENDING", "Priority")
    assert seen["112"].phase == "running"


def test_verdicts_of_array_tasks():
    ids = ["200_0", "200_1", "200_2", "200_7", "200_9", "201_1"]
    seen = verdicts(ids, parse_sacct(SACCT), parse_squeue(SQUEUE))
    assert seen["200_0"].phase == "ended" and seen["200_1"].phase == "running"
    assert seen["200_2"] == SchedulerView("queued", "PENDING", "JobArrayTaskLimit")
    # accounting still shows task 7 in the pending range, the queue no longer holds it
    assert seen["200_7"].state == LEFT_QUEUE and seen["200_7"].error_class == "cancelled"
    assert not seen["200_7"].imposed
    # not in the range, not in the queue, no record of its own: cancelled while it waited (Slurm
    # drops such a task from the range: `58_[0-1%16]` became `58_[1%16]` on the test cluster)
    assert seen["200_9"].state == LEFT_QUEUE
    assert verdicts(["202_1"], parse_sacct(SACCT), parse_squeue(SQUEUE))["202_1"].phase == "unknown"  # no array
    assert seen["201_1"].state == LEFT_QUEUE


def test_accounting_lag_and_silence():
    # just submitted: the queue has it, accounting not yet
    seen = verdicts(["400"], [], parse_squeue(SQUEUE))["400"]
    assert (seen.phase, seen.state, seen.detail) == ("queued", "PENDING", "PartitionConfig")
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
    assert resources(backend_for({"executor": "local"}), gpu) == {}  # the local backend places nothing


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
    assert call(Evidence(), SchedulerView("unknown"), submitted_at=950.0) is None
    lost = call(Evidence(), SchedulerView("unknown"))
    assert lost["state"] == "lost" and "no longer knows it" in lost["error_message"]
    assert call(Evidence(result=CRASHED), SchedulerView("unknown"))["error_class"] == "crash"
    broken = call(Evidence(broken="truncated JSON"), SchedulerView("unknown"))
    assert broken["state"] == "failed" and broken["error_class"] == "broken_result"


def test_requeued_job_is_in_flight_whatever_its_old_result_says():
    update = call(Evidence(result=SIGNALLED), SchedulerView("queued", "PENDING", "BeginTime"))
    assert update["state"] == "submitted" and update["state_detail"] == "PENDING (BeginTime)"
    # running again after a requeue: the old incarnation's result is stale (job.json is newer)
    update = call(Evidence(result=CRASHED, started={"started_at": 20.0}), SchedulerView("running", "RUNNING"))
    assert update["state"] == "running"
    # a signalled trainer while Slurm still holds the job: wait for Slurm's word
    assert call(Evidence(result=SIGNALLED), SchedulerView("running", "COMPLETING"))["state"] == "running"
    # a current failure while the job runs its next repeat: that run has ended
    assert call(Evidence(result=CRASHED), SchedulerView("running", "RUNNING"))["error_class"] == "crash"


@pytest.mark.parametrize("state,klass,expected", [
    ("CANCELLED", "cancelled", "cancelled"), ("NODE_FAIL", "node_fail", "failed"),
    ("PREEMPTED", "preempted", "failed"), ("TIMEOUT", "timeout", "failed")])
def test_slurms_word_beats_the_jobs_file(state, klass, expected):
    update = call(Evidence(result=SIGNALLED), SchedulerView("ended", state, None, klass, imposed=True))
    assert update["state"] == expected and update["error_class"] == klass
    assert "signal: SIGTERM" in update["error_message"]  # the job's own record is quoted


def test_an_end_of_its_own_takes_the_file():
    assert call(Evidence(result=CRASHED), SchedulerView("ended", "FAILED", None, "crash"))["error_class"] == "crash"
    assert call(Evidence(), SchedulerView("ended", "FAILED", None, "crash"))["state"] == "failed"
    assert call(Evidence(), SchedulerView("ended", "COMPLETED"))["state"] == "lost"
    left = call(Evidence(), SchedulerView("ended", LEFT_QUEUE, "left the queue before it started", "cancelled"))
    assert left["state"] == "cancelled"
    # accounting said "left the queue", but the file proves the task ran: the file wins
    assert call(Evidence(result=CRASHED), SchedulerView("ended", LEFT_QUEUE, None, "cancelled"))["error_class"] == "crash"


def test_a_foreground_run_is_read_from_its_directory():
    assert decide(Evidence(started={"node": "n"}), None, job_id=None, backend="job", submitted_at=None,
                  now=1.0, grace_s=0)["state"] == "running"
    assert decide(Evidence(), None, job_id=None, backend="job", submitted_at=None, now=1.0, grace_s=0) is None


def test_every_decision_is_a_legal_move_from_every_open_state():
    evidences = [Evidence(), Evidence(result=DONE), Evidence(result=CRASHED), Evidence(result=SIGNALLED),
                 Evidence(broken="x"), Evidence(started={"started_at": 1})]
    answers = [None, SchedulerView("unknown"), SchedulerView("queued", "PENDING"), SchedulerView("running", "RUNNING"),
               SchedulerView("ended", "COMPLETED"), SchedulerView("ended", "CANCELLED", None, "cancelled", True)]
    for old in (runstate.SUBMITTED, runstate.RUNNING):
        for evidence in evidences:
            for seen in answers:
                update = call(evidence, seen)
                if update:
                    assert runstate.can_move(old, update["state"]), (old, evidence, seen, update)


def test_run_state_model_refuses_illegal_moves():
    from orchestrator.store.schema import Run

    run = Run(uid="u", sweep_id="s", cell_id="c", repeat=0, attempt=1, state="pending")
    run.state = "submitted"
    run.state = "done"
    with pytest.raises(runstate.IllegalMove, match="from done to running"):
        run.state = "running"
    with pytest.raises(runstate.IllegalMove, match="not one of"):
        Run(uid="v", sweep_id="s", cell_id="c", repeat=0, attempt=1, state="finished")
    assert set(runstate.FINAL) | set(runstate.OPEN) == set(runstate.STATES)
    assert set(runstate.RERUNNABLE) <= set(runstate.FINAL) and runstate.DONE not in runstate.RERUNNABLE


# --- what the cluster has (backends/slurm_cluster.py): scontrol parsed from canned text ---------

# captured from the project's test cluster (slurm/, Slurm 22.05.8): one 2-CPU node in three
# partitions; `scontrol -a show partition -o`, `scontrol -a show node -o`, `scontrol show config`
REAL_PARTITIONS = """\
PartitionName=cpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=2-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=localhost PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=YES:4 OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=2 TotalNodes=1 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=2,mem=22899M,node=1,billing=2,gres/gpu=4,gres/gpu:k20m=2,gres/gpu:p100=2
PartitionName=k20m AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=2-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=localhost PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=YES:4 OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=2 TotalNodes=1 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=2,mem=22899M,node=1,billing=2,gres/gpu=4,gres/gpu:k20m=2,gres/gpu:p100=2
PartitionName=p100 AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=2-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=localhost PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=YES:4 OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=2 TotalNodes=1 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=2,mem=22899M,node=1,billing=2,gres/gpu=4,gres/gpu:k20m=2,gres/gpu:p100=2
"""
REAL_NODES = """\
NodeName=localhost Arch=x86_64 CoresPerSocket=2  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=2.74 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:k20m:2,gpu:p100:2 NodeAddr=127.0.0.1 NodeHostName=localhost Version=22.05.8 OS=Linux 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=22899 AllocMem=0 FreeMem=19832 Sockets=1 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=cpu,k20m,p100  BootTime=2026-11-23T15:17:54 SlurmdStartTime=2026-11-23T15:26:43 LastBusyTime=2026-11-23T15:34:10 CfgTRES=cpu=2,mem=22899M,billing=2,gres/gpu=4,gres/gpu:k20m=2,gres/gpu:p100=2 AllocTRES=gres/gpu:k20m=2,gres/gpu:p100=2 CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
"""
REAL_CONFIG = """\
Configuration data as of 2026-11-23T15:40:16
AccountingStorageTRES   = cpu,mem,energy,node,billing,fs/disk,vmem,pages,gres/gpu,gres/gpu:k20m,gres/gpu:p100
DefMemPerCPU            = 1024
MaxArraySize            = 1001
MaxJobCount             = 10000
MaxMemPerNode           = UNLIMITED
SlurmctldHost[0]        = vm(127.0.0.1)
SLURM_VERSION           = 22.05.8

Slurmctld(primary) at vm is UP
"""
# a site as Slurm 22.05 prints it: several nodes, socket-bound GRES, a spec memory limit, a
# partition CPU cap, drained and not-responding nodes, a value with spaces (Reason, OS)
SITE_PARTITIONS = """\
PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=1-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=gpu[01-02] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=EXCLUSIVE OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=96 TotalNodes=2 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=96,mem=771000M,node=2,billing=96,gres/gpu=7
PartitionName=cpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=40 Nodes=cpu01 PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=48 TotalNodes=1 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=190000 TRES=cpu=48,mem=192000M,node=1,billing=48
PartitionName=old AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=YES MaxNodes=UNLIMITED MaxTime=12:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=k[01-02] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=32 TotalNodes=2 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=32,mem=128000M,node=2,billing=32,gres/gpu=4
"""
SITE_NODES = """\
NodeName=gpu01 Arch=x86_64 CoresPerSocket=16  CPUAlloc=0 CPUEfctv=32 CPUTot=32 CPULoad=0.01 AvailableFeatures=a100,ib ActiveFeatures=a100,ib Gres=gpu:a100:4(S:0-1) NodeAddr=gpu01 NodeHostName=gpu01 Version=22.05.8 OS=Linux 5.14.0-284.el9.x86_64 #1 SMP PREEMPT_DYNAMIC Fri May 12 08:27:19 EDT 2023  RealMemory=515000 AllocMem=0 FreeMem=500012 Sockets=2 Boards=1 MemSpecLimit=15000 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2023-06-01T09:00:00 SlurmdStartTime=2023-06-01T09:01:00 LastBusyTime=2023-06-02T10:00:00 CfgTRES=cpu=32,mem=515000M,billing=32,gres/gpu=4 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
NodeName=gpu02 Arch=x86_64 CoresPerSocket=32  CPUAlloc=8 CPUEfctv=64 CPUTot=64 CPULoad=7.90 AvailableFeatures=v100 ActiveFeatures=v100 Gres=gpu:v100:2(S:0),gpu:a100:1(S:1) NodeAddr=gpu02 NodeHostName=gpu02 Version=22.05.8 OS=Linux 5.14.0-284.el9.x86_64 #1 SMP PREEMPT_DYNAMIC Fri May 12 08:27:19 EDT 2023  RealMemory=256000 AllocMem=32000 FreeMem=200000 Sockets=2 Boards=1 State=MIXED+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2023-06-01T09:00:00 SlurmdStartTime=2023-06-01T09:01:00 LastBusyTime=2023-06-02T10:00:00 CfgTRES=cpu=64,mem=256000M,billing=64,gres/gpu=3 AllocTRES=cpu=8,mem=32000M CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=bad fan [root@2023-06-02T09:00:00]
NodeName=cpu01 Arch=x86_64 CoresPerSocket=24  CPUAlloc=48 CPUEfctv=48 CPUTot=48 CPULoad=47.00 AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=cpu01 NodeHostName=cpu01 Version=22.05.8 OS=Linux 5.14.0 #1 SMP  RealMemory=192000 AllocMem=192000 FreeMem=1000 Sockets=2 Boards=1 State=ALLOCATED ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=cpu  BootTime=2023-06-01T09:00:00 SlurmdStartTime=2023-06-01T09:01:00 LastBusyTime=2023-06-02T10:00:00 CfgTRES=cpu=48,mem=192000M,billing=48 AllocTRES=cpu=48,mem=192000M CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
NodeName=k01 Arch=x86_64 CoresPerSocket=8  CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=N/A AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:k20m:2 NodeAddr=k01 NodeHostName=k01 Version=22.05.8 OS=Linux 3.10.0 #1 SMP  RealMemory=64000 AllocMem=0 FreeMem=N/A Sockets=2 Boards=1 State=DOWN* ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=old  BootTime=None SlurmdStartTime=None LastBusyTime=2023-05-01T10:00:00 CfgTRES=cpu=16,mem=64000M,billing=16,gres/gpu=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=Not responding [slurm@2023-05-01T10:05:00]
NodeName=k02 Arch=x86_64 CoresPerSocket=8  CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=0.00 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:k20m:2 NodeAddr=k02 NodeHostName=k02 Version=22.05.8 OS=Linux 3.10.0 #1 SMP  RealMemory=64000 AllocMem=0 FreeMem=60000 Sockets=2 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=old  BootTime=2023-06-01T09:00:00 SlurmdStartTime=2023-06-01T09:01:00 LastBusyTime=2023-06-02T10:00:00 CfgTRES=cpu=16,mem=64000M,billing=16,gres/gpu=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=retired [root@2023-06-01T08:00:00]
"""
SITE_CONFIG = "MaxArraySize            = 40001\nMaxMemPerNode           = UNLIMITED\n"

REAL = cluster_from(REAL_PARTITIONS, REAL_NODES, REAL_CONFIG)
SITE = cluster_from(SITE_PARTITIONS, SITE_NODES, SITE_CONFIG)


def test_scontrol_is_parsed_values_with_spaces_included():
    (node,) = REAL.nodes
    assert (node.name, node.cpus, node.mem_mb, node.partitions) == ("localhost", 2, 22899, ("cpu", "k20m", "p100"))
    assert node.gres == {"gpu": 4, "gpu:k20m": 2, "gpu:p100": 2} and node.available
    assert REAL.default_partition == "cpu" and REAL.max_array_size == 1001
    assert REAL.partitions["p100"].max_time_min == 2 * 24 * 60
    records = parse_records(SITE_NODES)
    assert records[0]["OS"].startswith("Linux 5.14.0-284.el9.x86_64 #1 SMP") and records[0]["RealMemory"] == "515000"
    assert records[1]["Reason"] == "bad fan [root@2023-06-02T09:00:00]"
    gpu01, gpu02, cpu01, k01, k02 = SITE.nodes
    assert gpu01.mem_mb == 500000 and gpu01.gres == {"gpu": 4, "gpu:a100": 4}  # less MemSpecLimit; (S:0-1) dropped
    assert gpu02.gres == {"gpu": 3, "gpu:v100": 2, "gpu:a100": 1}
    assert cpu01.gres == {} and SITE.partitions["cpu"].max_cpus_per_node == 40
    assert SITE.partitions["cpu"].max_time_min is None and SITE.max_array_size == 40001
    assert [n.available for n in SITE.nodes] == [True, False, True, False, False]  # drained, DOWN*
    assert parse_config(REAL_CONFIG)["SlurmctldHost[0]"] == "vm(127.0.0.1)"


def test_slurm_durations_sizes_and_gres():
    assert [parse_minutes(t) for t in ("2-00:00:00", "1:00:00", "30:00", "90", "1-12", "0:00:30", "UNLIMITED")] == \
        [2880, 60, 30, 90, 2160, 1, None]
    assert [parse_mb(t) for t in ("64G", "22899M", "22899", "1T", "64GB", "512K", "UNLIMITED")] == \
        [65536, 22899, 22899, 1048576, 65536, 1, None]
    assert parse_gres("gpu:tesla:2,mps:100") == {"gpu": 2, "gpu:tesla": 2, "mps": 100}
    assert parse_gres("gpu:4") == {"gpu": 4} and parse_gres("(null)") == {}


def p100(*overrides):
    config = cell("cluster=slurm", "hardware=p100", *overrides).config
    return backend_for(config["cluster"]).resources(config)


def p100_request(*overrides):
    config = cell("cluster=slurm", "hardware=p100", *overrides).config
    return backend_for(config["cluster"]).request(config)


def test_a_request_from_the_cells_hardware_and_the_parameters_from_the_request():
    assert p100_request("gpus=2") == Request("p100", 16, 65536, 2, "p100", 120)
    assert p100_request("gpus=2").gpu_flag == "--gres=gpu:p100:2"
    assert p100_request("gpus=0") == Request("p100", 16, 65536, 0, None, 120)
    site = backend_for({"executor": "slurm", "gpu_request": "gpus_per_node"})
    config = cell("cluster=slurm", "hardware=p100", "gpus=1").config
    assert site.request(config).gpu_flag == "--gpus-per-node=p100:1"
    assert site.resources(config)["gpus_per_node"] == "p100:1"  # the flag and the parameter say the same
    assert request_from_tres("p100", "billing=16,cpu=16,gres/gpu:p100=1,gres/gpu=1,mem=16G,node=1", "60") == \
        Request("p100", 16, 16384, 1, "p100", 60)


def test_nodes_is_complete_in_a_cells_config_and_never_defaulted_by_the_request():
    """Settings are complete once, at resolution: a cell's config holds `nodes` even where it was
    left null or is absent (a config recorded before nodes existed), and the request reads it
    as it is: a config without it fails loudly rather than asking Slurm for 1 node."""
    assert p100_request("nodes=null").nodes == 1 and p100_request("nodes=2").nodes == 2
    old = {k: v for k, v in cell("cluster=slurm", "hardware=p100").config.items() if k != "nodes"}
    before = dict(old)
    assert Cell.from_plain(old).config["nodes"] == 1 and old == before  # the caller's mapping unchanged
    site = backend_for({"executor": "slurm"})
    with pytest.raises(KeyError, match="nodes"):
        site.request(old)


def test_the_readme_example_is_refused_on_the_test_cluster_naming_the_largest_node():
    why = refusal(p100_request("gpus=1"), REAL)
    assert why == ("partition p100 cannot run it: --cpus-per-task=16, but its largest node has 2 CPUs (localhost); "
                   "--mem=64G, but its largest node has 22899M (localhost)")
    assert refusal(p100_request("gpus=2", "hardware.cpus=1", "hardware.mem_gb=1"), REAL) is None


@pytest.mark.parametrize("request_,expected", [
    (Request("p100", 1, 1024, 3, "p100"), "3 p100 GPUs, but its largest node has 2 p100 GPUs (localhost)"),
    (Request("p100", 1, 1024, 1, "v100"), "1 v100 GPUs, but no node of partition p100 has v100 GPUs (its GPU types: "
                                          "k20m, p100)"),
    (Request("p100", 1, 1024, time_min=3 * 1440), "--time=4320 min, but partition p100 allows at most 2-00:00:00"),
    (Request("a100"), "--partition=a100, but this cluster has no partition a100 (it has cpu, k20m, p100)"),
    (Request(None, 4), "partition cpu cannot run it: --cpus-per-task=4, but its largest node has 2 CPUs"),  # the default partition
])
def test_what_no_node_of_the_test_cluster_holds(request_, expected):
    assert expected in refusal(request_, REAL)


def test_what_no_node_of_a_site_holds():
    assert refusal(Request("gpu", 32, 400000, 4, "a100"), SITE) is None  # gpu01 (drained gpu02 counts: it returns)
    assert "--cpus-per-task=48, but its largest node has 40 CPUs (cpu01)" in refusal(Request("cpu", 48), SITE)
    assert "--mem=195G, but its largest node has 190000M" in refusal(Request("cpu", 1, 195 * 1024), SITE)
    assert "5 GPUs, but its largest node has 4 GPUs (gpu01)" in refusal(Request("gpu", 1, gpus=5), SITE)
    # each alone fits a node (64 CPUs: gpu02; 2 A100: gpu01), both together none
    assert "no single node of partition gpu has 64 CPUs" in refusal(Request("gpu", 64, gpus=2, gpu_type="a100"), SITE)
    assert "--time=1500 min, but partition gpu allows at most 1-00:00:00" in refusal(Request("gpu", time_min=1500), SITE)


def test_pending_reasons_that_never_clear():
    big = Request("p100", 16, 65536, 1, "p100", 120)
    assert hopeless("Priority", big, REAL) is None and hopeless("JobArrayTaskLimit", big, REAL) is None
    assert hopeless("PartitionConfig", None, None) == "the request breaks its partition's configuration"
    assert "--cpus-per-task=16, but its largest node has 2 CPUs" in hopeless("PartitionConfig", big, REAL)
    assert "no node can ever hold it" in hopeless("Resources", big, REAL)
    assert hopeless("Resources", Request("p100", 1, 1024), REAL) is None  # busy: it will start
    assert hopeless("Resources", big, None) is None  # no facts: may start
    down = hopeless("ReqNodeNotAvail, UnavailableNodes:k[01-02]", Request("old", 1), SITE)
    assert down == "every node of partition old is down or drained (k01 DOWN*, k02 IDLE+DRAIN)"
    assert hopeless("ReqNodeNotAvail, UnavailableNodes:gpu02", Request("gpu", 1), SITE) is None  # gpu01 is up


# squeue -h -r -o %i|%T|%r|%N|%V|%P|%C|%b|%l and sacct -X -n -P --format=JobID,State,NodeList,
# Reason,Partition,ReqTRES,TimelimitRaw, as the test cluster printed them for the README's p100
# request (16 CPUs, 64G), a task of it cancelled, and a job that ran out of time
WAITING_SQUEUE = """\
500|PENDING|PartitionConfig||2026-11-23T15:40:50|p100|16|gres:gpu:p100:2|2:00:00
37_0|PENDING|PartitionConfig||2026-11-23T15:43:19|p100|16|gres:gpu:p100:1|1:00:00
37_2|PENDING|PartitionConfig||2026-11-23T15:43:19|p100|16|gres:gpu:p100:1|1:00:00
37_3|PENDING|PartitionConfig||2026-11-23T15:43:19|p100|16|gres:gpu:p100:1|1:00:00
58_1|PENDING|PartitionConfig||2026-11-23T15:53:23|p100|16|N/A|1:00:00
"""
WAITING_SACCT = """\
500|PENDING|None assigned|PartitionConfig|p100|billing=16,cpu=16,gres/gpu:p100=2,gres/gpu=2,mem=64G,node=1|120
501|CANCELLED by 0|None assigned|PartitionConfig|p100|billing=16,cpu=16,mem=16G,node=1|60
502|CANCELLED by 0|None assigned|Priority|cpu|billing=1,cpu=1,mem=1G,node=1|60
503|TIMEOUT|localhost|None|cpu|billing=1,cpu=1,mem=1G,node=1|1
37_[0-3%2]|PENDING|None assigned|PartitionConfig|p100|billing=16,cpu=16,gres/gpu:p100=1,gres/gpu=1,mem=16G,node=1|60
38_[0-3%2]|CANCELLED by 0|None assigned|PartitionConfig|p100|billing=16,cpu=16,gres/gpu:p100=1,gres/gpu=1,mem=16G,node=1|60
58_[1%16]|PENDING|None assigned|PartitionConfig|p100|billing=16,cpu=16,mem=1G,node=1|60
"""


def test_a_job_that_can_never_start_says_so_then_ends_unplaceable():
    import time

    submitted = time.mktime(time.strptime("2026-11-23T15:40:50", "%Y-%m-%dT%H:%M:%S"))
    sacct, squeue = parse_sacct(WAITING_SACCT), parse_squeue(WAITING_SQUEUE)
    early = verdicts(["500"], sacct, squeue, REAL, now=submitted + 60, unplaceable_after_s=600)["500"]
    assert early.phase == "queued" and "--cpus-per-task=16, but its largest node has 2 CPUs" in early.never
    assert "ended as unplaceable 10 min after its submission" in early.never
    update = call(Evidence(), early)
    assert update["state"] == "submitted"
    assert update["state_detail"].startswith("PENDING (PartitionConfig): can never start: the request breaks")
    late = verdicts(["500"], sacct, squeue, REAL, now=submitted + 600, unplaceable_after_s=600)["500"]
    assert (late.phase, late.state, late.error_class, late.imposed) == ("ended", UNPLACEABLE, "unplaceable", True)
    ended = call(Evidence(), late)
    assert ended["state"] == "failed" and ended["error_class"] == "unplaceable"
    assert "could never start" in ended["error_message"] and "--cpus-per-task=16" in ended["error_message"]
    # without the cluster's facts, PartitionConfig alone still says it
    assert verdicts(["500"], sacct, squeue)["500"].never.startswith("the request breaks its partition's")
    # before accounting has the job, the queue's view of the request (no memory) serves
    (queued,) = [r for r in squeue if r.job == "500"]
    assert queued.request == Request("p100", 16, None, 2, "p100", 120)
    lagging = verdicts(["500"], [], squeue, REAL, now=submitted, unplaceable_after_s=600)["500"]
    assert "--cpus-per-task=16, but its largest node has 2 CPUs" in lagging.never


def test_a_job_cancelled_while_it_could_never_start_is_unplaceable():
    seen = verdicts(["501", "502", "503", "37_1", "38_2", "58_0"], parse_sacct(WAITING_SACCT),
                    parse_squeue(WAITING_SQUEUE), REAL)
    assert seen["501"].error_class == "unplaceable" and "cancelled while it waited (PartitionConfig)" in seen["501"].detail
    assert seen["502"].error_class == "cancelled"  # waited for its turn: plainly cancelled
    assert seen["37_1"].error_class == "unplaceable"  # a task cancelled out of a pending range
    assert seen["38_2"].error_class == "unplaceable"  # the whole array cancelled
    assert seen["58_0"].error_class == "unplaceable"  # a task accounting dropped from its range
    assert seen["503"].detail == "time limit 1 min, on localhost"  # a timeout names its limit
    assert "as TIMEOUT (time limit 1 min" in call(Evidence(), seen["503"])["error_message"]


def test_unplaceable_is_a_legal_end_and_rerunnable():
    for seen in (SchedulerView("ended", UNPLACEABLE, "why", "unplaceable", True), SchedulerView("queued", "PENDING", "x", never="y")):
        update = call(Evidence(), seen)
        for old in (runstate.SUBMITTED, runstate.RUNNING):
            assert runstate.can_move(old, update["state"])
    assert runstate.FAILED in runstate.RERUNNABLE


def test_the_signal_before_the_time_limit_is_a_fraction_of_it(tmp_path):
    from submitit.slurm.slurm import _make_sbatch_string

    assert [signal_delay_s(m) for m in (1, 2, 10, 15, 120)] == [6, 12, 60, 90, 90]
    params = p100("hardware.time_min=1")
    assert params["signal_delay_s"] == 6
    script = _make_sbatch_string(command="true", folder=tmp_path, **params)
    assert "#SBATCH --signal=USR2@6" in script and "#SBATCH --time=1" in script
    # with a floor, sized from it: a backfilled job really gets only the floor (issue 35 review, 8)
    floored = p100("hardware.time_min=120", "+hardware.time_floor=3")
    assert floored["signal_delay_s"] == 18 and floored["additional_parameters"]["time-min"] == 3


# --- submit._batches: refused before sbatch, split at the array limit ------------------------

class CannedSlurm(SlurmBackend):
    """The Slurm backend with canned cluster facts and an sbatch that only counts submissions."""

    def __init__(self, cluster, facts):
        super().__init__(cluster)
        self.canned, self.calls = facts, []

    def facts(self, max_age_s=None):
        if isinstance(self.canned, Exception):
            raise self.canned
        return self.canned

    def executor(self, folder):
        return None

    def submit_named(self, executor, fn, specs, params, name):
        self.calls.append((name, len(specs)))
        return [f"{len(self.calls)}_{i}" for i in range(len(specs))]


def launch(tmp_path, facts, fitting=3, too_big=2, db_url=None, kind=None, **cluster):
    """A sweep of `fitting` cells a node holds and `too_big` it does not, submitted to a canned
    Slurm; recorded in the database of `db_url` (a SQLite file under tmp_path by default)."""
    from sqlalchemy import select

    from orchestrator.store import db, schema
    from orchestrator.launch.submit import Options, submit_sweep

    where = [f"paths.db='{db_url or f'sqlite:///{tmp_path}/results.db'}'", f"paths.runs={tmp_path}/runs"]
    cells = [cell("cluster=slurm", "hardware=p100", "hardware.cpus=1", "hardware.mem_gb=1", f"seed={i}", *where)
             for i in range(fitting)]
    cells += [cell("cluster=slurm", "hardware=p100", f"seed={i}", *where) for i in range(too_big)]
    opts = Options.from_config(cells[0].config)
    opts.backend = (kind or CannedSlurm)({**opts.cluster, **cluster}, facts)
    report = submit_sweep(cells, opts, argv=["test"])
    with db.open_db(opts.db_url)() as session:
        runs = [(r.state, r.error_class, r.job_id) for r in session.scalars(select(schema.Run))]
    return opts.backend, report, runs


def test_a_request_no_node_holds_is_refused_before_sbatch_and_a_big_group_split(tmp_path, db_url):
    backend, report, runs = launch(tmp_path, REAL, max_array_size=2, db_url=db_url)
    assert [n for _, n in backend.calls] == [2, 1] and len({name for name, _ in backend.calls}) == 2
    assert sorted(j for s, _, j in runs if s == "submitted") == ["1_0", "1_1", "2_0"]
    assert [(s, c) for s, c, _ in runs if s != "submitted"] == [("failed", "unplaceable")] * 2
    assert len(report.refused) == 2 and not report.notes
    overrides, why = report.refused[0]
    assert "hardware=p100" in overrides
    assert "--cpus-per-task=16, but its largest node has 2 CPUs (localhost)" in why and "hardware.cpus" in why


def test_the_cluster_facts_give_the_array_limit(tmp_path, db_url):
    backend, _, _ = launch(tmp_path, cluster_from(REAL_PARTITIONS, REAL_NODES, "MaxArraySize = 2\n"), too_big=0,
                           db_url=db_url)
    assert [n for _, n in backend.calls] == [2, 1]


def test_a_cluster_that_cannot_be_asked_refuses_nothing_and_says_so_once(tmp_path, db_url):
    backend, report, runs = launch(tmp_path, SchedulerUnavailable("scontrol: Unable to contact slurm controller"),
                                   db_url=db_url)
    assert sorted(n for _, n in backend.calls) == [2, 3]  # two signatures, Slurm's default array limit
    assert [s for s, _, _ in runs] == ["submitted"] * 5 and not report.refused
    assert len(report.notes) == 1 and "not checked" in report.notes[0] and "scontrol" in report.notes[0]


class CountingSlurm(CannedSlurm):
    """CannedSlurm that counts the submitit parameters it derives (`resources`)."""

    def __init__(self, cluster, facts):
        super().__init__(cluster, facts)
        self.derived = 0

    def resources(self, config):
        self.derived += 1
        return super().resources(config)

    def submit_named(self, executor, fn, specs, params, name):
        self.sent = [(params, spec.config) for spec in specs]
        return super().submit_named(executor, fn, specs, params, name)


def test_a_launch_derives_each_requests_parameters_once_not_per_cell(tmp_path):
    """Cells are grouped into submissions by their hashable request (backends.base.request): the
    parameters and their signature once per request (two here), not once per cell (five)."""
    backend, report, runs = launch(tmp_path, REAL, fitting=3, too_big=2, kind=CountingSlurm)
    assert backend.derived == 2
    assert [n for _, n in backend.calls] == [3] and len(report.refused) == 2
    # each cell goes out with the parameters its own request gives (what sbatch's script says)
    assert all(params == SlurmBackend(backend.cluster).resources(config) for params, config in backend.sent)
    assert sorted(s for s, _, _ in runs) == ["failed"] * 2 + ["submitted"] * 3


def test_the_checks_derive_each_requests_parameters_once_not_per_cell(monkeypatch):
    """front_door.sort_cells checks each cell's request as sbatch gets it (check_request): once per
    distinct request (backends.base.request), not per cell."""
    from orchestrator import front_door

    derived = []
    plain = SlurmBackend.resources
    monkeypatch.setattr(SlurmBackend, "resources", lambda self, config: (derived.append(1), plain(self, config))[1])
    cells = [cell("cluster=slurm", "hardware=p100", f"seed={i}") for i in range(4)]
    cells += [cell("cluster=slurm", "hardware=cpu12", f"seed={i}") for i in range(2)]
    found = front_door.sort_cells(front_door.Asked(" ".join(c.overrides), lambda c=c: c, lambda: {}) for c in cells)
    assert len(found.cells) == 6 and not found.refused and len(derived) == 2  # p100 and cpu12


def test_a_request_is_derived_once_per_distinct_values_it_reads(monkeypatch):
    """A launch asks each cell's request three times (its check, its partition's MaxTime, the
    grouping): derived once per distinct set of the values it reads (a sweep's cells ask a few),
    not per cell and ask; by value, so an equal mapping gives the same request without deriving
    it again, and a mapping changed in place (rerun's longer limit) is derived again."""
    from orchestrator.backends import sbatch

    derived = []
    plain = sbatch.configured  # called once per derivation
    monkeypatch.setattr(sbatch, "configured", lambda hardware, cluster: (derived.append(1), plain(hardware, cluster))[1])
    hardware = {"name": "p100", "partition": "memo-test", "gpu_type": "p100", "gpus_per_node": 2, "cpus": 8,
                "mem_gb": 64, "time_min": 60}
    backend = SlurmBackend({"name": "slurm"})
    configs = [{"hardware": hardware, "gpus": 1, "nodes": 1, "seed": i} for i in range(5)]
    asked = [backend.request(config) for config in configs for _ in range(3)]
    assert len(derived) == 1 and len(set(asked)) == 1 and asked[0].gpus == 1 and asked[0].time_min == 60
    assert backend.request({**configs[0], "hardware": dict(hardware)}) == asked[0] and len(derived) == 1
    hardware["time_min"] = 30  # as rerun gives a timed-out cell more time, in its own mapping
    assert backend.request(configs[0]).time_min == 30 and len(derived) == 2
    assert backend.request({**configs[0], "gpus": 2}).gpu_flag == "--gres=gpu:p100:2" and len(derived) == 3


def test_the_learned_limits_ask_each_requests_maxtime_once_not_per_cell(monkeypatch):
    """time_limits.learn caps each cell's limit by its partition's MaxTime: asked once per
    distinct request (two here), not once per cell (six)."""
    from orchestrator.launch.submit_options import Options
    from orchestrator.launch.submit_plan import learn_time_limits

    asked = []
    monkeypatch.setattr(SlurmBackend, "max_time_min", lambda self, config: (asked.append(1), 90)[1])
    cells = [cell("cluster=slurm", "hardware=p100", f"seed={i}") for i in range(4)]
    cells += [cell("cluster=slurm", "hardware=cpu12", f"seed={i}") for i in range(2)]
    learned = learn_time_limits(cells, Options.from_config(cells[0].config), None)
    assert len(asked) == 2 and [c.id for c in learned] == [c.id for c in cells]
    assert all(c.config["hardware"]["time_min"] <= 90 for c in learned)


class WatchingSlurm(CannedSlurm):
    """CannedSlurm that reads, at each sbatch, what the database holds of the sweep's runs."""

    def submit_named(self, executor, fn, specs, params, name):
        import sqlite3

        con = sqlite3.connect(self.cluster["watched"])
        self.seen = getattr(self, "seen", []) + [con.execute("select state, state_detail from runs").fetchall()]
        con.close()
        return super().submit_named(executor, fn, specs, params, name)


def test_every_run_is_recorded_marked_with_its_submission_before_the_first_sbatch(tmp_path):
    """One commit before anything is handed over holds every run of the sweep, each marked with the
    submission it goes out in: a launch killed at any sbatch leaves no run that submit_adopt cannot
    resolve by name, and a second launch meanwhile sees no unmarked pending run to plan again."""
    backend, _, runs = launch(tmp_path, REAL, fitting=4, too_big=0, kind=WatchingSlurm, max_array_size=2,
                              watched=str(tmp_path / "results.db"))
    first = backend.seen[0]
    assert len(backend.calls) == 2 and len(first) == 4  # two submissions (max_array_size=2), four runs
    names = {detail.split(" ")[2].split("[")[0] for state, detail in first}
    assert all(state == "pending" and detail.startswith("submitting as ") for state, detail in first)
    assert names == {name for name, _ in backend.calls}
    assert sorted(state for state, _, _ in runs) == ["submitted"] * 4


def test_a_launch_settles_only_the_runs_of_launchers_that_are_gone(tmp_path, db_url):
    """Runs recorded and not handed over yet (a foreground launch's next cells, a rerun's attempts
    before their submission marks them) name their launcher: a launch beside a live one leaves its
    runs to it, and refuses to plan their repeats again; one whose launcher exited is given up."""
    import subprocess
    import sys

    from types import SimpleNamespace

    from sqlalchemy import select

    from orchestrator.launch.submit_adopt import adopt_interrupted, recorded_by
    from orchestrator.launch.submit_plan import new_run, plan_runs
    from orchestrator.results.collector import collect
    from orchestrator.store import db, launch_records, schema
    from result_factory import make_result, write_result

    write_result(tmp_path / "runs", make_result(sweep="s1", repeat=0))
    Session = db.open_db(db_url)
    collect(Session, tmp_path / "runs")
    gone = subprocess.run([sys.executable, "-c", "from orchestrator.launch.submit_adopt import recorded_by; "
                           "print(recorded_by())"], capture_output=True, text=True, check=True).stdout.strip()
    opts = SimpleNamespace(backend=backend_for({"executor": "local"}), runs=str(tmp_path / "runs"), force=True, repeats=3)
    with Session() as session:
        cell_id = session.scalar(select(schema.Run.cell_id))
        mine, theirs = (new_run("s1", cell_id, repeat, 1, opts, ("u", "h")) for repeat in (1, 2))
        assert mine.state_detail == recorded_by()
        theirs.state_detail = gone
        launch_records.insert_runs(session, [mine.row(), theirs.row()], [])
        session.commit()
        adopt_interrupted(session, opts.backend)
        states = dict(session.execute(select(schema.Run.repeat, schema.Run.state)).all())
        assert states == {0: "done", 1: "pending", 2: "cancelled"}, states
        _, known = launch_records.known(session, [cell_id])
        runs, reason = plan_runs("s2", SimpleNamespace(id=cell_id), opts, known[cell_id], ("u", "h"))
    Session.kw["bind"].dispose()
    assert sorted(r.repeat for r in runs) == [0, 2] and "repeat 1: a submission (recorded by" in reason, reason


class ScontrolSlurm(SlurmBackend):
    """The Slurm backend reading its facts through run_command (monkeypatched), submitting nowhere."""

    def __init__(self, cluster, facts):
        super().__init__(cluster)
        self.calls = []

    def executor(self, folder):
        return None

    def submit_named(self, executor, fn, specs, params, name):
        self.calls.append((name, len(specs)))
        return [f"{len(self.calls)}_{i}" for i in range(len(specs))]


def _locked(path):
    """Whether another connection holds the SQLite database's write lock now."""
    import sqlite3

    if not path.exists():
        return False
    con = sqlite3.connect(path, timeout=0)
    try:
        con.execute("BEGIN IMMEDIATE")
        con.rollback()
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        con.close()


def test_the_cluster_is_asked_before_the_database_is_locked(tmp_path, monkeypatch):
    """scontrol (up to 30 s a call on a busy controller) is never waited for with the launch's write
    lock held, whose holder every other command waits for: with cluster.max_array_size set too."""
    from orchestrator.backends import slurm

    asked = []

    def scontrol(argv, timeout=slurm.COMMAND_TIMEOUT_S):
        asked.append(_locked(tmp_path / "results.db"))
        return {"partition": REAL_PARTITIONS, "node": REAL_NODES}.get(argv[3] if len(argv) > 3 else "", REAL_CONFIG)

    monkeypatch.setattr(slurm, "run_command", scontrol)
    backend, report, _ = launch(tmp_path, None, kind=ScontrolSlurm, max_array_size=2)
    assert asked == [False, False, False]  # partitions, nodes, config: once, before the lock
    assert [n for _, n in backend.calls] == [2, 1] and len(report.refused) == 2


def test_a_requests_parameters_are_derived_once_and_each_caller_gets_its_own(monkeypatch):
    from orchestrator.backends import sbatch

    config = cell("cluster=slurm", "hardware=p100", "gpus=1").config
    slurm = backend_for(dict(config["cluster"], sbatch={"reservation": "bench"}, setup=["module load x"]))
    derived = []
    monkeypatch.setattr(sbatch, "submitit_params", lambda job, cluster: derived.append(job) or {
        "time": job.time_min, "additional_parameters": {"reservation": "bench"}, "setup": ["module load x"]})
    first = slurm.resources(config)
    first["additional_parameters"]["mine"] = 1
    first["setup"].append("echo mine")
    again = slurm.resources(config)
    assert len(derived) == 1  # a sweep's 10,000 cells of one request: derived once
    assert again == {"time": 120, "additional_parameters": {"reservation": "bench"}, "setup": ["module load x"]}


def test_a_retype_names_the_first_skipped_cells_counts_the_rest_and_keeps_no_config_for_them(tmp_path, capsys):
    import sqlite3
    from types import SimpleNamespace

    from orchestrator import launcher_output

    first, _, _ = launch(tmp_path, REAL, fitting=12, too_big=0)
    again, report, runs = launch(tmp_path, REAL, fitting=12, too_big=0)
    assert [n for _, n in first.calls] == [12] and again.calls == [] and len(runs) == 12
    assert len(report.skipped) == 12 and all("in flight" in why for _, why in report.skipped)
    launcher_output.print_submit_report(report, SimpleNamespace(cluster={"executor": "slurm"}, wait=False))
    out = capsys.readouterr().out
    assert sum(line.startswith("skipped ") for line in out.splitlines()) == launcher_output.SHOWN
    assert "... and 2 more skipped (12 in all: force=true runs them again; 12 in flight)" in out
    assert "0 cells submitted (0 runs) to slurm, 12 skipped" in out
    con = sqlite3.connect(tmp_path / "results.db")
    by_sweep = con.execute("select sweep_id, count(*), count(config) from sweep_cells group by sweep_id "
                           "order by min(rowid)").fetchall()
    assert [(n, kept) for _, n, kept in by_sweep] == [(12, 12), (12, 0)]  # the retype's skipped: none kept
    con.close()


def test_a_silent_scheduler_keeps_states_and_says_as_of_when(tmp_path, db_url, monkeypatch):
    """reconcile with a Slurm that cannot be asked (no sacct/squeue on PATH): nothing changes,
    and the report dates the states it keeps from the scheduler's last answer."""
    import time as clock

    from orchestrator.store import db, schema
    from orchestrator.launch import tracking
    from orchestrator.store.sql_adapters import Rows, connect

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ORCHESTRATOR_LOST_GRACE_S", "0")
    factory = db.open_db(db_url)
    seen_at = clock.mktime((2026, 11, 23, 14, 5, 0, 0, 0, -1))
    with factory.begin() as session:
        session.add(schema.Sweep(id="s", created_at=1.0))
        session.add(schema.Cell(id="c", framework="torch", model="lenet", dataset="mnist", hardware="cpu12", gpus=0,
                            threads=1, batch_size=1, scaling="strong", iterations=1, warmup=0, seed=0,
                            precision="fp32", settings={}, created_at=1.0))
        session.flush()
        run = schema.Run(uid="s:c:0:1", sweep_id="s", cell_id="c", repeat=0, attempt=1, state="pending")
        run.state, run.job_id, run.executor, run.submitted_at = "running", "77_0", "slurm", 1.0
        run.observed_at, run.run_dir = seen_at, str(tmp_path / "runs/s/c/0")
        session.add(run)
    with factory() as session:  # through SQLAlchemy (collect, rerun, the progress bar) ...
        report = tracking.reconcile(Rows.of(session))
        assert report.changed == 0 and session.scalar(db.select(schema.Run.state)) == "running"
    (message,) = report.messages()
    assert message.startswith("slurm did not answer") and "states as of 14:05 for 1 open run" in message
    # ... and through the driver alone (status on a SQLite file: sqlite3; on PostgreSQL: psycopg)
    with connect(db_url) as direct:
        assert tracking.reconcile(direct).messages() == [message]
        assert direct.all("SELECT state, observed_at FROM runs") == [("running", seen_at)]


def test_a_job_cancelled_after_it_was_found_unable_ever_to_start_is_unplaceable():
    """Whatever accounting kept of why (a task dropped from its array's pending range has no
    record of its own), the run's own earlier verdict says it could never start."""
    waited = "PENDING (PartitionConfig): can never start: --cpus-per-task=16, but its largest node has 2"
    for seen in (SchedulerView("ended", "CANCELLED", None, "cancelled", imposed=True),
                 SchedulerView("ended", LEFT_QUEUE, "left the queue before it started", "cancelled")):
        update = decide(Evidence(), seen, job_id="7_1", backend="slurm", submitted_at=0.0, now=10.0,
                        grace_s=0.0, previous=waited)
        assert (update["state"], update["error_class"]) == ("failed", "unplaceable"), update
        assert "--cpus-per-task=16" in update["error_message"]
    plain = decide(Evidence(), SchedulerView("ended", "CANCELLED", None, "cancelled", imposed=True), job_id="7_1",
                   backend="slurm", submitted_at=0.0, now=10.0, grace_s=0.0, previous="PENDING (Priority)")
    assert plain["state"] == "cancelled"


def test_a_tasks_pickle_is_made_without_a_memo_and_loads_as_the_spec_it_was(tmp_path):
    """A task's pickle is the standard pickler's without its memo (a third of a 10,000-cell
    launch's pickling): no memo opcode in it, and it loads as what was pickled; a spec that
    refers to itself, which that mode cannot pickle, goes through cloudpickle and loads too."""
    import pickle
    import pickletools

    from submitit.core.utils import DelayedSubmission

    from orchestrator.backends.slurm_executor import _pickled
    from orchestrator.job.run import run_cell

    spec = {"config": cell("cluster=slurm", "hardware=p100").config, "runs": [{"uid": "s:c:0:1"}] * 2}
    data = _pickled(DelayedSubmission(run_cell, spec))
    assert not {op.name for op, _, _ in pickletools.genops(data)} & {"MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"}
    loaded = pickle.loads(data)
    assert loaded.function is run_cell and loaded.args == (spec,)
    looped = {"name": "a"}
    looped["self"] = looped
    again = pickle.loads(_pickled(DelayedSubmission(run_cell, looped))).args[0]
    assert again["self"] is again and again["name"] == "a"


def test_an_arrays_task_pickles_are_one_bundle_each_task_takes_its_own(tmp_path):
    """One file per array, written before sbatch (backends/slurm_task.py): each task finds its
    own pickle by index; a task beyond it, or a bundle given up (removed), finds none."""
    from orchestrator.backends.slurm_task import bundle_path, read_task, take_task_pickle, write_bundle

    pickles = [b"", b"first", bytes(range(256)) * 40, b"last"]
    bundle = bundle_path(tmp_path, "orch-x-abc123")
    write_bundle(bundle, pickles)
    assert [read_task(bundle, i) for i in range(4)] == pickles
    assert read_task(bundle, 4) is None and read_task(bundle, -1) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["orch-x-abc123.tasks"]  # no temporary left
    target = tmp_path / "77_2_submitted.pkl"
    assert take_task_pickle(bundle, 2, target) and target.read_bytes() == pickles[2]
    bundle.unlink()  # given up after this task took its pickle: a requeued task still finds it
    assert take_task_pickle(bundle, 2, target) and not take_task_pickle(bundle, 1, tmp_path / "77_1_submitted.pkl")


def test_two_launches_of_the_same_new_cells_at_once_both_record_as_one_after_the_other(tmp_path, db_url, other_db_url,
                                                                                   monkeypatch):
    """A second launch of the same cells while the first records them (the first holds itself
    until the second has looked, 2 s at most) waits for it, then finds its cells and runs, as it
    would one after the other: on SQLite the flush's write lock, on PostgreSQL the launch lock
    (launch_records.one_launch_at_a_time). Without it, on PostgreSQL, both found the cells unknown
    and the second's insert of them failed (cells_pkey)."""
    import threading

    from sqlalchemy import func, select

    from orchestrator.launch.submit import Options, submit_sweep
    from orchestrator.store import db, launch_records, schema

    def cells_of(url):
        where = [f"paths.db='{url}'", f"paths.runs={tmp_path}/runs"]
        return [cell("cluster=slurm", "hardware=p100", "hardware.cpus=1", "hardware.mem_gb=1", f"seed={i}", *where)
                for i in range(3)]

    def submitted(cells):
        opts = Options.from_config(cells[0].config)
        opts.backend = CannedSlurm(dict(opts.cluster), REAL)
        return submit_sweep(cells, opts, argv=["test"])

    def recorded(url):
        with db.open_db(url)() as session:
            return [session.scalar(select(func.count()).select_from(t)) for t in (schema.Cell, schema.Run)]

    after = cells_of(other_db_url)
    submitted(after), submitted(after)  # one after the other
    first_inside, second_looked, errors = threading.Event(), threading.Event(), []
    insert_cells, known = launch_records.insert_cells, launch_records.known

    def held_insert_cells(session, new, members):
        if threading.current_thread().name == "first":
            first_inside.set()
            second_looked.wait(timeout=2)
        insert_cells(session, new, members)

    def looking(session, cell_ids):
        if threading.current_thread().name == "second":
            second_looked.set()
        return known(session, cell_ids)

    monkeypatch.setattr(launch_records, "insert_cells", held_insert_cells)
    monkeypatch.setattr(launch_records, "known", looking)
    at_once = cells_of(db_url)

    def one(wait_for):
        wait_for.wait(timeout=30)
        try:
            submitted(at_once)
        except Exception as exc:  # what the other thread is to see
            errors.append(f"{type(exc).__name__}: {exc}"[:300])

    ready = threading.Event()
    threads = [threading.Thread(target=one, args=(ready,), name="first"),
               threading.Thread(target=one, args=(first_inside,), name="second")]
    for t in threads:
        t.start()
    ready.set()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and recorded(db_url) == recorded(other_db_url) == [3, 3]
