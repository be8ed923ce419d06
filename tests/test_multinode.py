"""A run across nodes, trainer side (issue 26): each node's trainer started with its place
(trainers.common.launch.node_from_env), two "nodes" on this host as two real processes, the
real rendezvous between them (PyTorch DDP, TensorFlow MultiWorkerMirroredStrategy: every
framework whose declaration says multi_node), and every rank's parameter checksum; a
placement that does not add up, and a framework that cannot span nodes, refused in one line."""
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import FRAMEWORKS, REPO
from trainers.common import failure_classes as fc
from trainers.common import launch
from trainers.common.errors import InvalidArgument
from trainers.common.scaling import split_batch
from trainers.common.support import PROCESS_PER_DEVICE, Support, declared

# every framework whose declaration says it spans nodes: one added later is tested here by itself
MULTI_NODE = [f["name"] for f in FRAMEWORKS if declared(f["trainer"]).multi_node]


def placement(rank, nodes, port, addrs=None):
    return {launch.NODES_ENV: str(nodes), launch.NODE_RANK_ENV: str(rank),
            launch.NODE_ADDRS_ENV: ",".join(addrs or ["127.0.0.1"] * nodes), launch.PORT_ENV: str(port)}


def test_the_batch_splits_over_nodes_as_over_gpus():
    assert split_batch(8, "weak", 0, nodes=2) == (16, 8, 1)      # one CPU process per node
    assert split_batch(8, "weak", 2, nodes=2) == (32, 8, 2)
    assert split_batch(8, "strong", 2, nodes=2) == (8, 2, 2)
    assert split_batch(8, "strong", 0, nodes=1) == (8, 8, 1)     # one node: as before
    with pytest.raises(Exception) as err:
        split_batch(6, "strong", 2, nodes=2)
    assert "does not divide among 4 GPUs (2 nodes)" in str(err.value)


def test_a_placement_that_does_not_add_up_names_the_variables():
    assert launch.node_from_env({}) is None
    node = launch.node_from_env(placement(1, 2, 29500, ["10.0.0.1", "10.0.0.2"]))
    assert (node.rank, node.nodes, node.addrs, node.port) == (1, 2, ["10.0.0.1", "10.0.0.2"], 29500)
    for bad in (placement(2, 2, 29500), placement(0, 2, 29500, ["10.0.0.1"]), placement(0, 2, 0)):
        with pytest.raises(InvalidArgument) as err:
            launch.node_from_env(bad)
        assert launch.NODE_ADDRS_ENV in str(err.value) and "does not add up" in str(err.value)


def test_a_framework_that_cannot_span_nodes_is_refused_with_its_reason():
    one = Support("solo", cpu=["fp32"], multi_gpu=PROCESS_PER_DEVICE, notes={"multi_node": "no rendezvous"})
    assert one.problem("fp32", 0, nodes=2) == ("solo does not support --nodes 2; it supports one node "
                                               "(no rendezvous)")
    assert one.problem("fp32", 0, nodes=1) is None
    assert Support("many", cpu=["fp32"], multi_node=True).problem("fp32", 0, nodes=4) is None


@pytest.fixture(scope="module", params=MULTI_NODE)
def multi_node_framework(request, framework_named):
    return framework_named(request.param)


def _start(framework, argv, env):
    return subprocess.Popen([framework.python, "-m", framework.module] + argv, cwd=str(REPO),
                            env=dict(framework.env, **env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)


def _both(framework, argv, port):
    """[(stdout, stderr)] of both nodes' trainers, each ended well; a node that fails ends the
    other at once (as the orchestrator's node watch does), rather than leaving it at the rendezvous."""
    procs = [_start(framework, argv, placement(rank, 2, port)) for rank in (0, 1)]
    try:
        deadline = time.time() + 600
        while any(p.poll() is None for p in procs) and time.time() < deadline:
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.2)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    outs = [p.communicate() for p in procs]
    for rank, (proc, (out, err)) in enumerate(zip(procs, outs)):
        assert proc.returncode == 0, "node %d: %s" % (rank, err[-2000:])
    return outs


def test_the_frameworks_that_span_nodes_are_read_from_their_declarations():
    assert {"torch", "tensorflow"} <= set(MULTI_NODE)


@pytest.mark.parametrize("scaling, batch, per_device", [("weak", 16, 8), ("strong", 8, 4)])
def test_two_nodes_train_one_model_their_ranks_end_with_equal_parameters(
        multi_node_framework, scaling, batch, per_device):
    port = launch.free_port(span=4)  # the rendezvous port, and TensorFlow's workers' above it
    argv = ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist", "--batch-size", "8",
            "--scaling", scaling, "--iterations", "3", "--warmup", "1", "--threads", "1",
            "--nodes", "2"]
    outs = _both(multi_node_framework, argv, port)
    first, second = ([json.loads(line) for line in out.splitlines()] for out, _ in outs)
    # each node relays its own leading rank's events; node 0 leads the run
    start = next(e for e in first if e["event"] == "run_start")
    assert (start["processes"], start["nodes"], start["batch_size"], start["per_device_batch"]) == (
        2, 2, batch, per_device)
    assert [e["images"] for e in first if e["event"] == "step"] == [batch] * 4
    sums = {e["rank"]: (e["node"], e["sha256"]) for e in first + second if e["event"] == "params"}
    assert sorted(sums) == [0, 1] and sums[0][0] == 0 and sums[1][0] == 1
    assert sums[0][1] == sums[1][1]  # the gradients were all-reduced: one model on both nodes


def test_a_node_told_to_stop_reports_a_signal_not_a_crash(framework_named):
    """Slurm stops a job's tasks with SIGTERM when it requeues or cancels it, or loses a node: that
    is class `signal` (the scheduler's record says why), which tracking leaves to the scheduler."""
    torch = framework_named("torch")
    argv = ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist", "--batch-size", "8",
            "--iterations", "1000000", "--warmup", "1", "--threads", "1", "--nodes", "2"]
    port = launch.free_port()
    procs = [_start(torch, argv, placement(rank, 2, port)) for rank in (0, 1)]
    try:
        for line in procs[0].stdout:  # both nodes are past the rendezvous once node 0 steps
            if json.loads(line)["event"] == "step":
                break
        procs[1].send_signal(signal.SIGTERM)
        out, _ = procs[1].communicate(timeout=120)
    finally:
        for proc in procs:
            proc.kill()
            proc.communicate()
    error = next(e for e in map(json.loads, out.splitlines()) if e["event"] == "error")
    assert (error["class"], error["message"]) == ("signal", "terminated by signal 15")
    assert procs[1].returncode == fc.EXIT_CODES["signal"]


@pytest.mark.parametrize("case, env, words", [
    ("CPU replicas", {"TRAINER_CPU_REPLICAS": "1"}, "does not support CPU replicas across nodes"),
    ("no ports left", {launch.PORT_ENV: "65535"}, "leaves no room for 2 TensorFlow workers"),
])
def test_tensorflow_refuses_a_node_placement_its_strategy_cannot_take(framework_run, case, env,
                                                                      words):
    gpus = "2" if "TRAINER_CPU_REPLICAS" in env else "0"
    proc, events = framework_run("tensorflow", [
        "--model", "lenet", "--dataset", "synthetic", "--like", "mnist", "--batch-size", "8",
        "--iterations", "1", "--nodes", "2", "--gpus", gpus],
        **dict(placement(0, 2, launch.free_port()), **env))
    assert [e["event"] for e in events] == ["error"], (case, events, proc.stderr[-2000:])
    assert events[0]["class"] == "unsupported" and words in events[0]["message"], events


def test_a_node_without_its_place_is_refused_in_one_line(framework_run):
    proc, events = framework_run("torch", ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist",
                                           "--batch-size", "8", "--iterations", "1", "--nodes", "2"])
    error = next(e for e in events if e["event"] == "error")
    assert error["class"] == "unsupported" and "--nodes 2 needs each node's place" in error["message"]
    assert "nodes=2" in error["message"] and "\n" not in error["message"]


# --- through the orchestrator, on the four-node test cluster ------------------------------------

@pytest.mark.slow
def test_a_sweep_over_nodes_lands_a_row_per_cell_with_one_model_on_every_rank(slurm_workdir):
    from helpers import SMALL, orchestrator, rows, wait_until_final

    launched = orchestrator(["-m", *SMALL, "framework=torch,tensorflow", "model=lenet", "dataset=synthetic",
                             "nodes=1,2", "batch_size=8"], slurm_workdir)
    assert launched.returncode == 0, launched.stderr
    wait_until_final(slurm_workdir)
    assert orchestrator(["collect"], slurm_workdir).returncode == 0
    got = rows(slurm_workdir, "select framework, nodes, images_per_sec > 0 from results order by framework, nodes")
    assert got == [("tensorflow", 1, 1), ("tensorflow", 2, 1), ("torch", 1, 1), ("torch", 2, 1)], \
        rows(slurm_workdir, "select framework, state, error_class, error_message from runs join cells on cells.id = runs.cell_id")
    shown = orchestrator(["results"], slurm_workdir).stdout.splitlines()  # the runs differ in nodes: it shows
    header = next(line.split() for line in shown if line.split()[:1] == ["framework/model/dataset"])
    assert header[header.index("prec") + 1] == "nodes", shown
    for path in Path(slurm_workdir[0], "runs").glob("**/result.json"):
        result = json.loads(path.read_text())
        assert "params event" not in (result.get("notes") or "") and "no parameter checksum" not in (
            result.get("notes") or ""), result["notes"]  # every rank's checksum came, well-formed
        if result["cell"].get("nodes") == 2:
            assert [r["rank"] for r in result["ranks"]] == [0, 1]
            assert [r["node"] for r in result["ranks"]] == [0, 1]
            assert len({r["sha256"] for r in result["ranks"]}) == 1, result["ranks"]
            assert [n["rank"] for n in result["nodes"]] == [0, 1]
            assert len({n["node"] for n in result["nodes"]}) == 2  # two Slurm nodes, named
            assert result["trainer"]["processes"] == 2 and result["trainer"]["batch_size"] == 8


# --- the job's side: where a node stands, and the nodes' figures combined -----------------------

SHOW_NODE = ("NodeName=node1 Arch=x86_64 CoresPerSocket=2 CPUAlloc=0 CPUTot=2 NodeAddr=10.1.0.11 "
             "NodeHostName=node1 Version=22.05.8 OS=Linux 6.1.0 #1 SMP RealMemory=23000 State=IDLE\n"
             "NodeName=node2 Arch=x86_64 CoresPerSocket=2 CPUAlloc=0 CPUTot=2 NodeAddr=10.1.0.12 "
             "NodeHostName=node2 Version=22.05.8 OS=Linux 6.1.0 #1 SMP RealMemory=23000 State=IDLE\n")


def test_a_node_finds_its_place_and_every_nodes_address_from_slurm():
    from orchestrator.job import node_group

    asked = []

    def scontrol(argv):
        asked.append(argv[:3])
        return "node1\nnode2\n" if argv[2] == "hostnames" else SHOW_NODE

    env = {"SLURM_JOB_NODELIST": "node[1-2]", "SLURM_NODEID": "1", "SLURM_JOB_ID": "4242"}
    place = node_group.from_slurm(2, env, scontrol)
    assert (place.rank, place.name, place.names, place.addrs) == (1, "node2", ("node1", "node2"),
                                                                  ("10.1.0.11", "10.1.0.12"))
    assert place.trainer_env(0)[launch.NODE_ADDRS_ENV] == "10.1.0.11,10.1.0.12"
    # each repeat of a job its own port, alternating; TensorFlow's workers take the ports above it
    assert place.port(0) != place.port(1) == place.port(3) and abs(place.port(0) - place.port(1)) >= 64
    # below the ephemeral range, where an outgoing connection may hold any port (a TF worker's too)
    blocks = {node_group.Place(0, ("a", "b"), ("x", "y"), str(job)).port(1) for job in range(2000)}
    assert min(blocks) >= 1024 and max(blocks) + 99 < 32768 and len(blocks) > 50
    assert node_group.from_slurm(1, env, scontrol) is None and len(asked) == 2
    with pytest.raises(node_group.PlacementError) as err:
        node_group.from_slurm(3, env, scontrol)
    assert "asks for 3 nodes but its job holds 2 (node[1-2])" in str(err.value)
    with pytest.raises(node_group.PlacementError):
        node_group.from_slurm(2, {}, scontrol)


def test_the_nodes_figures_combine_as_each_metric_declares():
    from orchestrator import metric_registry
    from orchestrator.job import node_group

    first = {"images_per_sec": 1000.0, "energy_j": 50.0, "gpu_power_avg_w": 200.0, "gpu_mem_peak_bytes": 3e9,
             "cpu_percent_avg": 90.0, "cpu_percent_peak": 150.0, "images_per_sec_per_w": 5.0, "top1_final": 0.9}
    second = {"images_per_sec": 990.0, "energy_j": 70.0, "gpu_power_avg_w": 300.0, "gpu_mem_peak_bytes": 2e9,
              "cpu_percent_avg": 70.0, "cpu_percent_peak": 190.0, "images_per_sec_per_w": 3.3, "top1_final": 0.1}
    combined = node_group.combine([first, second])
    assert combined["images_per_sec"] == 1000.0 and combined["top1_final"] == 0.9  # the run's own: node 0's
    assert combined["energy_j"] == 120.0 and combined["gpu_power_avg_w"] == 500.0  # the job's total
    assert combined["gpu_mem_peak_bytes"] == 5e9
    assert combined["cpu_percent_avg"] == 80.0 and combined["cpu_percent_peak"] == 190.0
    assert combined["images_per_sec_per_w"] == 2.0  # computed again: 1000 img/s over 500 W
    # every declared metric says how it combines, with one of the rules combine knows
    rules = {metric_registry.LEAD, metric_registry.SUM, metric_registry.MEAN, metric_registry.MAX,
             metric_registry.RATIO}
    assert {m.across_nodes for m in metric_registry.METRICS} <= rules
    assert all(m.ratio_of for m in metric_registry.METRICS if m.across_nodes == metric_registry.RATIO)


@pytest.mark.slow
def test_more_nodes_than_a_partition_holds_and_nodes_off_slurm_are_refused_before_submission(slurm_workdir):
    from helpers import SMALL, orchestrator, rows

    done = orchestrator(["-m", *SMALL, "framework=torch", "model=lenet", "dataset=synthetic", "nodes=3"],
                        slurm_workdir)
    assert done.returncode == 0, done.stderr
    assert "--nodes=3, but only 2 of its 2 nodes can hold the request" in done.stdout, done.stdout
    # as a request for too many CPUs is: recorded unplaceable, never given to sbatch
    assert rows(slurm_workdir, "select state, error_class, job_id from runs") == [("failed", "unplaceable", None)]
    local = orchestrator(["framework=torch", "model=lenet", "dataset=synthetic", "nodes=2", "iterations=1"],
                         slurm_workdir)
    assert local.returncode != 0
    said = local.stdout + local.stderr  # the foreground run refuses as a sweep does: one line, problem and way out
    assert any("nodes=2 needs a cluster of nodes" in line and "use cluster=slurm" in line for line in said.splitlines()), said
    refused = orchestrator(["-m", *SMALL, "framework=mxnet", "model=lenet", "dataset=synthetic", "nodes=2"],
                           slurm_workdir)
    assert "mxnet does not support --nodes 2; it supports one node" in refused.stdout, refused.stdout
