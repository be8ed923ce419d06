"""The four-node test cluster of slurm/: several slurmd on this one host, one per node.

The layout is declared once, in slurm/common.sh; these tests read it from there and compare it
with what the running cluster says (sinfo), then run a real 2-node step in every partition: one
task per node, each told its own node by Slurm, as on a cluster of separate machines.
"""
import subprocess

import pytest

from helpers import REPO

USABLE = {"idle", "mixed", "allocated", "completing"}


def declared(array):
    """A bash array of slurm/common.sh (CPU_NODES, GPU_NODES), as a list of node names."""
    script = '. "$0" && printf "%s\\n" "${' + array + '[@]}"'
    out = subprocess.run(["bash", "-c", script, str(REPO / "slurm" / "common.sh")],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def slurm(env, *argv, timeout=60):
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=str(REPO))
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done.stdout


def nodes_of(env, partition):
    return set(slurm(env, "sinfo", "-h", "-N", "-p", partition, "-o", "%N").split())


def test_the_cluster_has_the_declared_nodes_each_up_in_its_partitions(slurm_env):
    cpu_nodes, gpu_nodes = declared("CPU_NODES"), declared("GPU_NODES")
    assert len(cpu_nodes) == 2 and len(gpu_nodes) == 2 and len(set(cpu_nodes + gpu_nodes)) == 4
    partitions, states, gres = {}, {}, {}
    for line in slurm(slurm_env, "sinfo", "-h", "-N", "-o", "%N|%P|%T|%G").splitlines():
        node, partition, state, node_gres = line.split("|")
        partitions.setdefault(node, set()).add(partition)
        states[node], gres[node] = state, node_gres
    assert set(partitions) == set(cpu_nodes + gpu_nodes), partitions
    assert all(states[n] in USABLE for n in states), states  # not down, drained or unresponsive ('*')
    for node in cpu_nodes:
        assert partitions[node] == {"cpu*"} and gres[node] == "(null)", (node, partitions, gres)  # * : the default
    for node in gpu_nodes:
        assert partitions[node] == {"k20m", "p100"}, (node, partitions)
        assert set(gres[node].split(",")) == {"gpu:k20m:2", "gpu:p100:2"}, (node, gres)
    # each node its own slurmd, all on this host's loopback
    shown = slurm(slurm_env, "scontrol", "-o", "show", "node")
    assert shown.count("NodeAddr=127.0.0.1 ") == 4, shown


@pytest.mark.parametrize("partition,gpu_type", [("cpu", None), ("k20m", "k20m"), ("p100", "p100")])
def test_a_two_node_step_runs_one_task_on_each_node(slurm_env, partition, gpu_type):
    gpus = [f"--gpus-per-node={gpu_type}:1"] if gpu_type else []
    out = slurm(slurm_env, "srun", "-N2", "--ntasks-per-node=1", "-p", partition, "--mem=100M", "-t", "2", *gpus,
                "bash", "-c", 'echo "$SLURMD_NODENAME|$SLURM_NODEID|$SLURM_PROCID|${CUDA_VISIBLE_DEVICES:-none}"',
                timeout=180)
    tasks = [line.split("|") for line in out.splitlines()]
    assert len(tasks) == 2, out
    assert {node for node, _, _, _ in tasks} == nodes_of(slurm_env, partition), out  # two distinct nodes
    assert sorted(node_id for _, node_id, _, _ in tasks) == ["0", "1"], out
    assert sorted(rank for _, _, rank, _ in tasks) == ["0", "1"], out
    if gpu_type:  # one fake GPU of the type on each node
        assert all(devices not in ("none", "") and "," not in devices for _, _, _, devices in tasks), out
    else:
        assert all(devices == "none" for _, _, _, devices in tasks), out
