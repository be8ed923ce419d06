"""A cell across nodes: each node's place, what each node's job leaves behind, and how the
first node's job ends the run and combines the nodes' figures.

Under Slurm a cell of `nodes=N` is one job of N nodes with one task per node
(`backends/sbatch.submitit_params`), and submitit runs `job.run_cell` in every task. Each
node's job runs that node's trainer (its share of the ranks: trainers.common.launch) beside
that node's own monitor, in the run's directory on the shared file system: node 0 in the run
directory itself, node k in `node-<k>/`. Each node writes `node.json` there once its trainer
has ended: how it ended and where its files are.

Nodes watch each other through those files, because a rank whose peer has gone waits in its
collective until the framework's own timeout (half an hour for gloo and NCCL): a node that
finds a peer's `node.json` reporting a failure stops its own trainer at once. Node 0 then
writes the run's one `result.json`: the first cause decides the class, a rank that crashed
or was killed becomes `rank_failed` naming its (Slurm) node, a specific class (out of
memory, unsupported ...) keeps its name and gains the node's. The cause is chosen by kind
before time, so that it does not depend on which node's job noticed first: a node's own
failure beats a node that never reported, which beats a node that only noticed its peer had
gone (stopped by node 0's watch, or its collective's connection reset: `SECONDARY`).

A node.json belongs to one incarnation of the job (its id and Slurm's restart count): a job
that Slurm requeued (after a node failure) runs again in the same run directory, and its
nodes must not read the failures the earlier incarnation left there. Where every node ended well,
node 0 computes each node's metrics over its own trainer's measured window and combines
them as each metric declares (`metric_registry.MetricDef.across_nodes`).

Where a node stands comes from Slurm's environment: SLURM_NODEID, the job's node list
(`scontrol show hostnames`) and each node's NodeAddr (`scontrol show node`; a node's name
need not resolve, as on the test cluster, where every node is 127.0.0.1).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from orchestrator import metric_registry
from orchestrator.backends.slurm_cluster import node_addresses
from trainers.common import failure_classes as fc
from trainers.common import launch as trainer_launch

NODE_FILE = "node.json"
#: rendezvous ports: a block per job (from its id), so jobs sharing a host do not collide, all
#: below Linux's ephemeral range (32768 up), where any outgoing connection may hold a port: a
#: TensorFlow worker whose port is taken fails ("Could not start gRPC server") and its peers wait
PORT_FIRST, PORT_BLOCKS, PORT_BLOCK = 20000, 60, 200
#: how long node 0 waits for the other nodes' node.json once its own trainer has ended well
PEER_WAIT_S = 120.0
#: how long a failed node waits to learn whether a peer failed before it (the real cause)
FIRST_FAILURE_WAIT_S = 10.0
#: the class that says only that a process ended badly: across nodes, the cell's class is rank_failed
#: (`signal` keeps its own: the scheduler stopped the job, and its record says why: tracking.decide)
UNSPECIFIC = (fc.CRASH,)
#: what a rank's error says when it only noticed that its peer had gone (gloo's and NCCL's words):
#: such a node's failure is never the cause while another node has one of its own
SECONDARY = ("Connection reset by peer", "Connection closed by peer", "Broken pipe",
             "NCCL communicator was aborted")


class PlacementError(RuntimeError):
    """The job's nodes do not match the cell (Slurm gave another count, or no node list)."""


@dataclass(frozen=True)
class Place:
    """One node's place in a cell across nodes."""

    rank: int
    names: tuple[str, ...]
    addrs: tuple[str, ...]
    job_id: str

    @property
    def nodes(self) -> int:
        return len(self.names)

    @property
    def name(self) -> str:
        return self.names[self.rank]

    def port(self, repeat: int) -> int:
        """The rendezvous port of one repeat: the job's block, its halves alternating between
        repeats, so a repeat never binds the port its predecessor has just closed."""
        block = PORT_FIRST + zlib.crc32(self.job_id.encode()) % PORT_BLOCKS * PORT_BLOCK
        return block + repeat % 2 * (PORT_BLOCK // 2)

    def trainer_env(self, repeat: int) -> dict[str, str]:
        """The variables through which the trainer learns its node's place (launch.node_from_env)."""
        return {trainer_launch.NODES_ENV: str(self.nodes), trainer_launch.NODE_RANK_ENV: str(self.rank),
                trainer_launch.NODE_ADDRS_ENV: ",".join(self.addrs),
                trainer_launch.PORT_ENV: str(self.port(repeat))}

    def peers(self) -> list[int]:
        return [k for k in range(self.nodes) if k != self.rank]


def from_slurm(nodes: int, environ: Mapping[str, str] = os.environ,
               run: Callable[[Sequence[str]], str] | None = None) -> Optional[Place]:
    """This node's Place in a job of `nodes` nodes (None for one node)."""
    if nodes <= 1:
        return None
    run = run or _scontrol
    listed = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not listed or "SLURM_NODEID" not in environ:
        raise PlacementError(f"nodes={nodes} runs only as a Slurm job of {nodes} nodes (no SLURM_JOB_NODELIST "
                             f"or SLURM_NODEID here)")
    names = tuple(run(["scontrol", "show", "hostnames", listed]).split())
    if len(names) != nodes:
        raise PlacementError(f"the cell asks for {nodes} nodes but its job holds {len(names)} ({listed})")
    known = node_addresses(run(["scontrol", "show", "node", "-o", ",".join(names)]))
    return Place(rank=int(environ["SLURM_NODEID"]), names=names,
                 addrs=tuple(known.get(n) or n for n in names), job_id=environ.get("SLURM_JOB_ID", "0"))


def _scontrol(argv: Sequence[str]) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, timeout=60).stdout


# --- what each node leaves behind ---------------------------------------------------------------

def node_dir(run_dir: Path, rank: int) -> Path:
    """Where node `rank`'s job writes: node 0 in the run directory, node k in node-<k>/."""
    return run_dir if rank == 0 else run_dir / f"node-{rank}"


def node_name(environ: Mapping[str, str] = os.environ) -> str:
    """This node's name as the scheduler calls it (several Slurm nodes may share one host)."""
    return environ.get("SLURMD_NODENAME") or socket.gethostname()


def incarnation(environ: Mapping[str, str] = os.environ) -> str:
    """Which run of the job this is: its id and how often Slurm requeued it (the same on every node)."""
    return f"{environ.get('SLURM_JOB_ID', '')}.{environ.get('SLURM_RESTART_COUNT') or 0}"


def write_node(run_dir: Path, rank: int, name: str, record: dict[str, Any],
               environ: Mapping[str, str] = os.environ) -> None:
    """Node `rank`'s node.json (atomic: a peer reads all of it or nothing), stamped with when
    and with the job's incarnation."""
    path = node_dir(run_dir, rank) / NODE_FILE
    tmp = path.with_name(f".{NODE_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"node": name, "rank": rank, "at": time.time(), "incarnation": incarnation(environ),
                               **record}, default=str))
    os.replace(tmp, path)


def read_node(run_dir: Path, rank: int, environ: Mapping[str, str] = os.environ) -> Optional[dict[str, Any]]:
    """Node `rank`'s node.json, or None where there is none of this incarnation of the job."""
    try:
        record = json.loads((node_dir(run_dir, rank) / NODE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("incarnation") == incarnation(environ) else None


def secondary(record: Mapping[str, Any]) -> bool:
    """Whether a node's failure only says that it noticed a peer had gone (see SECONDARY)."""
    error = record.get("error") or {}
    return error.get("class") == fc.RANK_FAILED or any(s in str(error.get("message", "")) for s in SECONDARY)


def failed_peer(place: Place, run_dir: Path, environ: Mapping[str, str] = os.environ) -> Optional[dict[str, Any]]:
    """The failure another node has reported (its own before a noticed one, then the earliest), or None."""
    failed = [r for r in (read_node(run_dir, k, environ) for k in place.peers()) if r and r.get("error")]
    return min(failed, key=lambda r: (secondary(r), r.get("at", 0.0))) if failed else None


def wait_for_peers(place: Place, run_dir: Path, deadline: Optional[float], patience_s: float = PEER_WAIT_S,
                   environ: Mapping[str, str] = os.environ) -> dict[int, Optional[dict[str, Any]]]:
    """Every other node's node.json, waiting until all are there, one reports a failure of its
    own, the patience runs out or the cell's deadline (monotonic) passes; None for a node not
    heard from. (A failure that only noticed a lost peer does not end the wait: the node that
    failed first may still report.)"""
    until = time.monotonic() + patience_s
    if deadline is not None:
        until = min(until, deadline)
    while True:
        found = {k: read_node(run_dir, k, environ) for k in place.peers()}
        if (all(found.values()) or any(r and r.get("error") and not secondary(r) for r in found.values())
                or time.monotonic() >= until):
            return found
        time.sleep(0.2)


# --- the run's outcome from the nodes' --------------------------------------------------------------

def first_failure(place: Place, own: Optional[dict[str, Any]], peers: Mapping[int, Optional[dict[str, Any]]],
                  silent_after_s: float) -> Optional[dict[str, str]]:
    """The run's error from the nodes' records (None where every node ended well): the first
    cause, by kind before time (module docstring): a node's own failure, else a node never
    heard from, else the earliest failure that only noticed a lost peer; rank_failed naming its
    node where it is a crash or a signal."""
    failed = [r for r in [own, *peers.values()] if r and r.get("error")]
    silent = [k for k, r in peers.items() if r is None]
    if silent and not any(not secondary(r) for r in failed):
        names = ", ".join(place.names[k] for k in silent)
        return {"class": fc.RANK_FAILED, "message": f"node {names} reported nothing {silent_after_s:.0f} s after "
                                                     f"node {place.name}'s trainer ended (its job's log says why)"}
    if failed:
        first = min(failed, key=lambda r: (secondary(r), r.get("at", 0.0)))
        klass, message = first["error"]["class"], first["error"].get("message", "")
        where = f"node {first['node']} (node {first['rank']} of {place.nodes})"
        if klass == fc.RANK_FAILED:
            return {"class": klass, "message": f"on {where}: {message}"}
        if klass in UNSPECIFIC:
            return {"class": fc.RANK_FAILED, "message": f"a rank on {where} failed first ({klass}): {message}"}
        return {"class": klass, "message": f"on {where}: {message}"}
    return None


def checksums(events_by_node: Mapping[int, Sequence[Mapping[str, Any]]],
              start: Optional[Mapping[str, Any]] = None) -> tuple[list[dict[str, Any]], Optional[str]]:
    """Every rank's parameter checksum (the trainers' `params` events), in rank order, and a note
    for the run's reason (None where there is nothing to say). A malformed params event (no
    whole-number rank, a sha256 that is not a string) is skipped and counted in the note: it
    must not cost a run its metrics. Where any rank sent a checksum, every rank of `start` (the
    run_start event: `processes` and `nodes`) is expected to; the note names those that did not,
    whose agreement is then unchecked. Frameworks that send none at all (numpy, caffe, cntk)
    get no note."""
    found: dict[tuple[int, int], dict[str, Any]] = {}
    malformed = 0
    for node, events in events_by_node.items():
        for e in events:
            if e.get("event") != "params":
                continue
            rank, sha = e.get("rank"), e.get("sha256")
            if not _whole(rank) or not (sha is None or isinstance(sha, str)):
                malformed += 1
                continue
            found[(node, rank)] = {"rank": rank, "node": node, "sha256": sha}
    ranks = [found[k] for k in sorted(found, key=lambda k: (k[1], k[0]))]
    notes = []
    if malformed:
        notes.append(f"{malformed} params event(s) skipped: a params event needs a whole-number rank and a "
                     f"string sha256 (the trainer's protocol.py writes them)")
    sent = {k for k, r in found.items() if r["sha256"]}
    missing = [k for k in expected_ranks(start or {}) if k not in sent] if sent else []
    if missing:
        named = ", ".join(f"rank {rank} (node {node})" for node, rank in missing)
        notes.append(f"no parameter checksum from {named} while {len(sent)} other rank(s) sent one: "
                     f"their agreement with the others is unchecked")
    return ranks, "; ".join(notes) or None


def expected_ranks(start: Mapping[str, Any]) -> list[tuple[int, int]]:
    """(node, rank) of every trainer process of a run, from its run_start's `processes` (the world
    size) and `nodes`: launched ranks are numbered across nodes, `processes` / `nodes` per node
    (trainers.common.launch); a framework that runs one process per node has rank 0 on each."""
    world = start.get("processes") if _whole(start.get("processes")) else 1
    nodes = start.get("nodes") if _whole(start.get("nodes")) and start.get("nodes") > 0 else 1
    if world > 1 and world % nodes == 0:
        return [(rank // (world // nodes), rank) for rank in range(world)]
    return [(node, 0) for node in range(nodes)]


def _whole(value: Any) -> bool:
    """A non-negative JSON integer (a bool is an int to Python, not to the protocol)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def diverged(ranks: Sequence[Mapping[str, Any]]) -> Optional[dict[str, str]]:
    """The run's error where its ranks' parameter checksums (`checksums`) differ, naming each
    rank's; None where they agree, or where fewer than two ranks gave one. Equal checksums are
    what proves that a data-parallel run trained one model (its gradients were all-reduced), so
    a difference makes its throughput that of separate trainings: class ranks_diverged."""
    sums = [r for r in ranks if r.get("sha256")]
    if len({r["sha256"] for r in sums}) < 2:
        return None
    listed = ", ".join(f"rank {r['rank']} (node {r['node']}) {r['sha256'][:12]}" for r in sums)
    return {"class": fc.RANKS_DIVERGED,
            "message": f"the ranks ended with different parameters: {listed}; "
                       f"{fc.way_out(fc.RANKS_DIVERGED)}"}


def combine(per_node: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The cell's metrics from each node's (node 0 first), each combined as its declaration
    says: the run's own (node 0's: throughput, accuracy), summed (energy, power, memory of
    the job's GPUs), the mean (utilisation, CPU) or the maximum (peaks per node); the ratios
    computed again from the combined figures."""
    out: dict[str, float] = {}
    names = {k for values in per_node for k in values}
    for name in names:
        rule = metric_registry.across_nodes(name)
        values = [v[name] for v in per_node if name in v]
        if rule == metric_registry.LEAD:
            if name in per_node[0]:
                out[name] = per_node[0][name]
        elif rule == metric_registry.SUM:
            out[name] = sum(values)
        elif rule == metric_registry.MEAN:
            out[name] = sum(values) / len(values)
        elif rule == metric_registry.MAX:
            out[name] = max(values)
    for name, (numerator, denominator) in metric_registry.RATIOS.items():
        if name in names and out.get(numerator) is not None and out.get(denominator):
            out[name] = out[numerator] / out[denominator]
    return out
