"""What one node's trainer run says, read after it ended: how it ran (`TrainerRun`), its events,
its error (the trainer's own event, its exit status or signal), and on a cell across nodes the
cell's error from every node's, each node's record and the metrics combined over the nodes.

job.py runs the trainer and writes result.json; this is what it reads to fill it in. Nothing
here starts a process or waits on one (but for the peers' node.json: node_group.wait_for_peers).
"""
from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.job import node_group, provenance
from orchestrator.job.monitor import Monitor
from trainers.common import failure_classes as fc


@dataclass
class TrainerRun:
    """How one node's trainer ran: its exit status, the monitor's samples, what ran it."""

    returncode: int
    samples: list[dict[str, Any]]
    monitor: Monitor
    runtime: Any
    argv: list[str]
    env: dict[str, str]
    idle_s: float


def described(ran: TrainerRun, events: list[dict[str, Any]], settings: dict[str, Any],
              exclusive: bool) -> dict[str, Any]:
    """What ran, whatever its end: exit status, monitor, environment, argv, the trainer's own
    run_start (less its event name and time) and provenance (best effort: it never fails a run;
    `exclusive`: whether the job held its node alone)."""
    outcome: dict[str, Any] = {"returncode": ran.returncode, "monitor": ran.monitor.describe(),
                               "environment": ran.runtime.identity(), "argv": ran.argv}
    start = next((e for e in events if e.get("event") == "run_start"), None)
    if start:
        outcome["trainer"] = {k: v for k, v in start.items() if k not in ("event", "t")}
    try:
        outcome["provenance"] = provenance.gather(
            settings, outcome.get("trainer"), outcome["environment"], outcome["monitor"], exclusive=exclusive,
            environ=ran.env, built_in=str(getattr(ran.runtime, "env_dir", None) or getattr(ran.runtime, "image", "")) or None)
    except Exception as exc:
        outcome["provenance"] = {"error": f"{type(exc).__name__}: {exc}"}
    return outcome


def measured_but_wrong(ranks: list[dict[str, Any]], measured: Any) -> dict[str, str] | None:
    """The error of a run that measured, yet whose figures are not of what it claims: its ranks
    ended with different models (ranks_diverged, node_group.diverged), or no algorithm could reach
    its throughput (implausible); None where neither. Its figures stay in the result, for the
    message to be checked."""
    return node_group.diverged(ranks) or (
        {"class": fc.IMPLAUSIBLE, "message": measured.implausible} if measured.implausible else None)


def ranks(events: list[dict[str, Any]], peers: dict[int, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """Every rank's parameter checksum and a note on the malformed or missing ones
    (node_group.checksums): the launcher relays each of this node's ranks' (in `events`), the
    other nodes' are in their own event files."""
    start = next((e for e in events if e.get("event") == "run_start"), None)
    return node_group.checksums(
        {0: events, **{k: read_events(Path(p["paths"]["events"]))[0] for k, p in peers.items()}}, start)


def own_error(events: list[dict[str, Any]], returncode: int, paths: dict[str, str],
               bad_lines: int = 0) -> dict[str, str] | None:
    """How this node's trainer failed, from its events and exit status; None if it ended well."""
    error = next((e for e in events if e.get("event") == "error"), None)
    if error:
        return trainer_error(error)
    if returncode < 0:  # killed from outside (Slurm's SIGTERM on requeue, cancel, node loss)
        return {"class": fc.SIGNALLED,
                "message": f"the trainer was ended by {_signal_name(-returncode)} (the scheduler or a user "
                           f"stopped the job; the scheduler's record says why)"}
    if returncode != 0 or not any(e.get("event") == "run_end" for e in events):
        # the exit status still names the trainer's class where its error event was lost
        return {"class": fc.from_exit_code(returncode) or fc.CRASH,
                "message": f"trainer exited with status {returncode} without an error event"
                           f"{f' ({bad_lines} unreadable output lines)' if bad_lines else ''}; "
                           f"last lines of {paths['stderr']}: {_tail(Path(paths['stderr']))}"}
    return None


def across_nodes(place: node_group.Place | None, run_dir: Path, own: dict[str, str] | None,
                  deadline: float | None) -> tuple[dict[str, str] | None, dict[int, Any]]:
    """The cell's error from every node's (the first node's job), and the other nodes' records."""
    assert place is not None
    patience = node_group.FIRST_FAILURE_WAIT_S if own else node_group.PEER_WAIT_S
    peers = node_group.wait_for_peers(place, run_dir, deadline, patience)
    mine = {"node": place.name, "rank": place.rank, "at": time.time(), "error": own} if own else None
    if mine:
        recorded = node_group.read_node(run_dir, place.rank)
        mine["at"] = (recorded or {}).get("at", mine["at"])
    return node_group.first_failure(place, mine, peers, patience), peers


def node_records(place: node_group.Place, run_dir: Path, paths: dict[str, str], monitor: Any,
                  returncode: int, peers: dict[int, Any]) -> list[dict[str, Any]]:
    """result.json's `nodes`: each node's name, address, exit status, error, monitor and files."""
    own = {"returncode": returncode, "error": None, "monitor": monitor, "paths": paths}
    records = []
    for k in range(place.nodes):
        found = own if k == place.rank else (peers.get(k) or {"error": {"class": fc.LOST, "message": "no node.json"}})
        records.append({"node": place.names[k], "rank": k, "addr": place.addrs[k],
                        **{key: found.get(key) for key in ("returncode", "error", "monitor", "paths")}})
    return records


def combined(place: node_group.Place, run_dir: Path, events: list[dict[str, Any]], own: dict[str, float],
              own_energy: dict[str, Any] | None, peers: dict[int, Any],
              nodes: list[dict[str, Any]]) -> tuple[dict[str, float], list[Any]]:
    """The cell's metrics from every node's (each over node 0's measured window), combined as each
    metric declares; every node's own figures go to result.json's `nodes`."""
    from orchestrator.job import metrics  # lazy: numpy, as in job._measured

    per_node, energy = [own], [own_energy]
    for k in sorted(peers):
        samples, _ = read_events(Path(peers[k]["paths"]["samples"]), key="sampler")
        measured = metrics.compute(events, samples)
        per_node.append(dict(measured))
        energy.append(measured.energy)
    for record, values in zip(nodes, per_node):
        record["metrics"] = values
    return node_group.combine(per_node), energy


def trainer_error(event: dict[str, Any]) -> dict[str, str]:
    """The result's error from the trainer's error event: a class no entry of
    trainers/common/failure_classes.py declares (a site's own trainer) is a crash that names it."""
    klass, message = event.get("class"), str(event.get("message", ""))
    if klass in fc.BY_NAME:
        return {"class": klass, "message": message}
    return {"class": fc.CRASH, "message": f"the trainer reported class {klass!r}, which is not one of "
                                          f"{', '.join(fc.NAMES)}: {message}"}


def read_events(path: Path, key: str = "event") -> tuple[list[dict[str, Any]], int]:
    """The trainer's events (or the monitor's samples: key="sampler"); a line that is not a
    JSON object with `key` is counted, not fatal."""
    events, bad = [], 0
    if not path.exists():
        return events, bad
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(event, dict) and key in event:
            events.append(event)
        else:
            bad += 1
    return events, bad


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _tail(path: Path, lines: int = 5) -> str:
    if not path.exists():
        return "(no log)"
    text = path.read_text(errors="replace").strip().splitlines()[-lines:]
    return " | ".join(text)[-800:] or "(empty)"
