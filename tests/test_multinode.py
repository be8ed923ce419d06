"""A run across nodes, trainer side (issue 26): each node's trainer started with its place
(trainers.common.launch.node_from_env), two "nodes" on this host as two real processes, the
real PyTorch DDP rendezvous between them, and every rank's parameter checksum; a placement
that does not add up, and a framework that cannot span nodes, refused in one line."""
import json
import subprocess

import pytest

from conftest import REPO
from trainers.common import launch
from trainers.common.errors import InvalidArgument
from trainers.common.scaling import split_batch
from trainers.common.support import PROCESS_PER_DEVICE, Support


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


def _start(python, argv, env):
    return subprocess.Popen([python, "-m", "trainers.torch"] + argv, cwd=str(REPO), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)


def test_two_nodes_train_one_model_their_ranks_end_with_equal_parameters(framework_env):
    python, base = framework_env("torch")
    port = launch.free_port()
    argv = ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist", "--batch-size", "8",
            "--scaling", "weak", "--iterations", "3", "--warmup", "1", "--threads", "1", "--nodes", "2"]
    procs = [_start(python, argv, dict(base, **placement(rank, 2, port))) for rank in (0, 1)]
    outs = [p.communicate(timeout=600) for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-2000:]
    first, second = ([json.loads(line) for line in out.splitlines()] for out, _ in outs)
    # each node relays its own leading rank's events; node 0 leads the run
    start = next(e for e in first if e["event"] == "run_start")
    assert (start["processes"], start["nodes"], start["batch_size"], start["per_device_batch"]) == (2, 2, 16, 8)
    assert [e["images"] for e in first if e["event"] == "step"] == [16] * 4
    sums = {e["rank"]: (e["node"], e["sha256"]) for e in first + second if e["event"] == "params"}
    assert sorted(sums) == [0, 1] and sums[0][0] == 0 and sums[1][0] == 1
    assert sums[0][1] == sums[1][1]  # the gradients were all-reduced: one model on both nodes


def test_a_node_without_its_place_is_refused_in_one_line(framework_run):
    proc, events = framework_run("torch", ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist",
                                           "--batch-size", "8", "--iterations", "1", "--nodes", "2"])
    error = next(e for e in events if e["event"] == "error")
    assert error["class"] == "unsupported" and "--nodes 2 needs each node's place" in error["message"]
    assert "nodes=2" in error["message"] and "\n" not in error["message"]
