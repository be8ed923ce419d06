"""What a Slurm cluster really has, read from `scontrol`, and whether a request fits it.

sbatch accepts a request no node can hold when only some of it is too big (16 CPUs on a
2-CPU node: PENDING (PartitionConfig) forever), and refuses others outright (too much memory
alone: "Requested node configuration is not available"). The orchestrator asks the controller
once per sweep instead (`scontrol -a show partition -o`, `scontrol -a show node -o`,
`scontrol show config`) and refuses such a cell before sbatch, naming what was asked and what
the largest node has; the same facts tell `status` whether a job already pending can ever
start.

Everything here is a pure function of the commands' text (tested on canned Slurm 22.05
output and on samples captured from the test cluster); running the commands is the
backend's business (backends/slurm.py).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Optional

#: Slurm's own default MaxArraySize: an array holds task indices 0 .. MaxArraySize - 1.
DEFAULT_MAX_ARRAY_SIZE = 1001

#: Pending reasons that no amount of waiting clears: the request breaks its partition's
#: configuration (too many CPUs or too long for it), or no node has the features asked for.
NEVER = {
    "PartitionConfig": "the request breaks its partition's configuration",
    "PartitionTimeLimit": "the time limit is over its partition's MaxTime",
    "BadConstraints": "no node has the features asked for",
}
#: Pending reasons that clear in time, unless the request is beyond every node of the
#: partition or every node of it is down or drained (then they never do).
MAYBE = ("Resources", "ReqNodeNotAvail", "Nodes_required_for_job_are_DOWN", "PartitionNodeLimit",
         "NodeDown")
#: Node state words (base state or `+` flag) under which no new job starts there.
UNAVAILABLE = {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE", "INVAL",
               "NOT_RESPONDING", "UNKNOWN"}


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int                      # CPUEfctv (22.05+: CPUs jobs may use), else CPUTot
    mem_mb: Optional[int]          # RealMemory less MemSpecLimit; None: not configured
    gres: dict[str, int]           # {"gpu": 4, "gpu:k20m": 2, "gpu:p100": 2}
    partitions: tuple[str, ...]
    state: str                     # e.g. IDLE, MIXED+DRAIN, DOWN*

    @property
    def available(self) -> bool:
        """Whether a new job may start here (not down, drained, failing or not responding)."""
        words = set(self.state.upper().rstrip("*$~#!%@^-").split("+"))
        return not (words & UNAVAILABLE or self.state.endswith("*"))


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool = False
    max_time_min: Optional[int] = None         # None: UNLIMITED
    max_cpus_per_node: Optional[int] = None
    max_mem_per_node_mb: Optional[int] = None


@dataclass(frozen=True)
class Cluster:
    """The facts a request is checked against."""

    partitions: dict[str, Partition]
    nodes: tuple[Node, ...]
    max_array_size: int = DEFAULT_MAX_ARRAY_SIZE
    max_mem_per_node_mb: Optional[int] = None  # slurm.conf's MaxMemPerNode

    @property
    def default_partition(self) -> Optional[str]:
        return next((p.name for p in self.partitions.values() if p.default), None)

    def nodes_of(self, partition: str) -> list[Node]:
        return [n for n in self.nodes if partition in n.partitions]


@dataclass(frozen=True)
class Request:
    """What one job asks of each of its nodes (one task per node), and how many nodes."""

    partition: Optional[str] = None
    cpus: Optional[int] = None
    mem_mb: Optional[int] = None
    gpus: int = 0
    gpu_type: Optional[str] = None
    time_min: Optional[int] = None
    nodes: int = 1
    #: sbatch's --time-min (a learned limit's lower bound: orchestrator/sweep/time_limits.py), or None
    time_floor_min: Optional[int] = None
    #: how the GPUs were asked for, to name them as the user wrote them
    gpu_flag: str = field(default="", compare=False)


# --- parsing -------------------------------------------------------------------------------
_KEY = re.compile(r"^([A-Za-z][A-Za-z0-9_/:.\[\]]*)=(.*)$")


def parse_records(text: str) -> list[dict[str, str]]:
    """`scontrol show {partition,node} -o` -> one {key: value} per line. A value may hold
    spaces (`OS=Linux 6.1.0 #1 SMP ...`, `Reason=Not responding [slurm@...]`): a word with no
    `key=` belongs to the value before it."""
    out = []
    for line in text.splitlines():
        record: dict[str, str] = {}
        key = None
        for word in line.split():
            match = _KEY.match(word)
            if match:
                key = match.group(1)
                record[key] = match.group(2)
            elif key is not None:
                record[key] += " " + word
        if record:
            out.append(record)
    return out


def node_addresses(text: str) -> dict[str, str]:
    """`scontrol show node -o` -> {NodeName: NodeAddr}: where a job's node is reached (its name
    need not resolve; on the test cluster every node is 127.0.0.1)."""
    return {r["NodeName"]: r.get("NodeAddr") or r["NodeName"] for r in parse_records(text) if r.get("NodeName")}


def parse_config(text: str) -> dict[str, str]:
    """`scontrol show config` (`Key = value` lines) -> {key: value}."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def parse_count(text: str) -> Optional[int]:
    """`4`, `100K`, `2M` -> a count; None for anything else."""
    match = re.fullmatch(r"(\d+)([KMGT]?)", text.strip(), re.IGNORECASE)
    if not match:
        return None
    return int(match.group(1)) * 1024 ** " KMGT".index(match.group(2).upper() or " ")


def parse_gres(text: str) -> dict[str, int]:
    """A node's `Gres=` (`gpu:k20m:2,gpu:p100:2`, `gpu:a100:4(S:0-1)`, `gpu:4`, `(null)`) ->
    {"gpu": 4, "gpu:k20m": 2, "gpu:p100": 2}: the total per name and the count per type."""
    out: dict[str, int] = {}
    for item in re.split(r",(?![^()]*\))", text or ""):
        item = re.sub(r"\(.*?\)", "", item).strip()
        if not item or item in ("(null)", "N/A"):
            continue
        parts = [p for p in item.split(":") if p and p != "no_consume"]
        count = parse_count(parts[-1]) if len(parts) > 1 else None
        if count is None:
            count = 1
        else:
            parts = parts[:-1]
        name = parts[0]
        out[name] = out.get(name, 0) + count
        if len(parts) > 1:
            out[f"{name}:{parts[1]}"] = out.get(f"{name}:{parts[1]}", 0) + count
    return out


def parse_minutes(text: Optional[str]) -> Optional[int]:
    """A Slurm duration (`2-00:00:00`, `1:00:00`, `30:00`, `90`, `1-12`) -> minutes (rounded
    up); None for UNLIMITED, INFINITE, NONE or anything unreadable."""
    if not text:
        return None
    text = text.strip()
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if not match:
        return None
    days, first, second, third = (int(g) if g else None for g in match.groups())
    if days is not None:  # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = first, second or 0, third or 0
    elif third is not None:  # H:M:S
        hours, minutes, seconds = first, second, third
    elif second is not None:  # M:S
        hours, minutes, seconds = 0, first, second
    else:  # M
        hours, minutes, seconds = 0, first, 0
    return (days or 0) * 1440 + hours * 60 + minutes + math.ceil(seconds / 60)


def parse_mb(text: Optional[str]) -> Optional[int]:
    """A memory size (`64G`, `22899M`, `22899`, `1T`, `64GB`) -> MiB; None for UNLIMITED etc."""
    if not text:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)B?", text.strip(), re.IGNORECASE)
    if not match:
        return None
    factor = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 ** 2}[match.group(2).upper()]
    return int(math.ceil(float(match.group(1)) * factor))


def _int(text: Optional[str]) -> Optional[int]:
    return int(text) if text and text.isdigit() else None


def cluster_from(partitions: str, nodes: str, config: str) -> Cluster:
    """The three commands' text -> the cluster's facts."""
    conf = parse_config(config)
    parts = {}
    for r in parse_records(partitions):
        if "PartitionName" in r:
            parts[r["PartitionName"]] = Partition(
                name=r["PartitionName"], default=r.get("Default") == "YES",
                max_time_min=parse_minutes(r.get("MaxTime")),
                max_cpus_per_node=_int(r.get("MaxCPUsPerNode")),
                max_mem_per_node_mb=_int(r.get("MaxMemPerNode")))
    found = []
    for r in parse_records(nodes):
        if "NodeName" not in r:
            continue
        cpus = _int(r.get("CPUEfctv")) or _int(r.get("CPUTot")) or 0
        real = _int(r.get("RealMemory"))  # 1 (Slurm's default) where a site never set it: unknown
        mem = real - (_int(r.get("MemSpecLimit")) or 0) if real and real > 1 else None
        found.append(Node(name=r["NodeName"], cpus=cpus, mem_mb=mem, gres=parse_gres(r.get("Gres", "")),
                          partitions=tuple(p for p in r.get("Partitions", "").split(",") if p),
                          state=r.get("State", "")))
    return Cluster(partitions=parts, nodes=tuple(found),
                   max_array_size=_int(conf.get("MaxArraySize")) or DEFAULT_MAX_ARRAY_SIZE,
                   max_mem_per_node_mb=_int(conf.get("MaxMemPerNode")))


# --- requests ------------------------------------------------------------------------------
def _gpu_spec(spec: str) -> tuple[Optional[str], int]:
    """`p100:2` -> (p100, 2); `2` -> (None, 2); `p100` -> (p100, 1)."""
    parts = [p for p in spec.split(":") if p]
    if not parts:
        return None, 0
    count = parse_count(parts[-1])
    if count is None:
        return parts[-1], 1
    return (parts[-2] if len(parts) > 1 else None), count


def request_from_tres(partition: str, tres: str, time_limit: str) -> Request:
    """The request sacct records (`Partition`, `ReqTRES` as `cpu=16,gres/gpu:p100=2,mem=64G`,
    `TimelimitRaw` in minutes)."""
    values = dict(item.partition("=")[::2] for item in tres.split(",") if "=" in item)
    typed = [(k.split(":", 1)[1], v) for k, v in values.items() if k.startswith("gres/gpu:")]
    gpu_type, gpus = (typed[0][0], parse_count(typed[0][1]) or 0) if typed else (
        None, parse_count(values.get("gres/gpu", "0")) or 0)
    return Request(partition=partition or None, cpus=_int(values.get("cpu")), mem_mb=parse_mb(values.get("mem")),
                   gpus=gpus, gpu_type=gpu_type, time_min=_int(time_limit))


def request_from_squeue(partition: str, cpus: str, tres: str, time_limit: str) -> Request:
    """The request squeue shows (`%P`, `%C`, `%b` as `gres:gpu:p100:2` or N/A, `%l`), memory
    left out."""
    gpu_type, gpus = None, 0
    for item in tres.replace("gres/", "").replace("gres:", "").replace("=", ":").split(","):
        if item.startswith("gpu"):
            gpu_type, gpus = _gpu_spec(item[len("gpu"):])
    return Request(partition=partition.strip() or None, cpus=_int(cpus.strip()), gpus=gpus, gpu_type=gpu_type,
                   time_min=parse_minutes(time_limit))


def show_mb(mb: int) -> str:
    """MiB as Slurm writes them: `64G` when whole gibibytes, else `22899M`."""
    return f"{mb // 1024}G" if mb % 1024 == 0 else f"{mb}M"


def show_minutes(minutes: int) -> str:
    days, rest = divmod(minutes, 1440)
    return (f"{days}-" if days else "") + f"{rest // 60:02d}:{rest % 60:02d}:00"


def refusal(request: Request, cluster: Cluster) -> Optional[str]:
    """Why no node of the request's partition can ever hold it, or None (it fits, or the facts
    do not say). Names what was asked and what the largest node has."""
    name = request.partition or cluster.default_partition
    if name is None:
        return None
    partition = cluster.partitions.get(name)
    if partition is None:
        return (f"--partition={name}, but this cluster has no partition {name} "
                f"(it has {', '.join(sorted(cluster.partitions)) or 'none'})")
    problems = []
    if request.time_min and partition.max_time_min is not None and request.time_min > partition.max_time_min:
        problems.append(f"--time={request.time_min} min, but partition {name} allows at most "
                        f"{show_minutes(partition.max_time_min)} (MaxTime)")
    if any(n.partitions for n in cluster.nodes):  # node membership is known
        nodes = cluster.nodes_of(name)
        if not nodes:
            problems.append(f"partition {name} has no nodes")
        else:
            problems += _node_problems(request, name, partition, nodes, cluster)
    return f"partition {name} cannot run it: " + "; ".join(problems) if problems else None


def _capacity(node: Node, partition: Partition, cluster: Cluster) -> tuple[float, float]:
    """CPUs and MiB a job may have on this node in this partition (inf: not known)."""
    cpus = min(x for x in (node.cpus, partition.max_cpus_per_node, math.inf) if x)
    mem = min(x for x in (node.mem_mb, partition.max_mem_per_node_mb, cluster.max_mem_per_node_mb, math.inf) if x)
    return cpus, mem


def _gpus_on(node: Node, request: Request) -> int:
    return node.gres.get(f"gpu:{request.gpu_type}" if request.gpu_type else "gpu", 0)


def _node_problems(request: Request, name: str, partition: Partition, nodes: list[Node],
                   cluster: Cluster) -> list[str]:
    caps = {n.name: _capacity(n, partition, cluster) for n in nodes}

    def fits(n: Node) -> bool:
        cpus, mem = caps[n.name]
        return ((request.cpus or 0) <= cpus and (request.mem_mb or 0) <= mem
                and request.gpus <= _gpus_on(n, request))

    fitting = [n for n in nodes if fits(n)]
    if len(fitting) >= request.nodes:
        return []
    if fitting:
        return [f"--nodes={request.nodes}, but only {len(fitting)} of its {len(nodes)} nodes can hold "
                f"the request ({', '.join(n.name for n in fitting)})"]
    problems = []
    most_cpus = max(nodes, key=lambda n: caps[n.name][0])
    if request.cpus and request.cpus > caps[most_cpus.name][0]:
        problems.append(f"--cpus-per-task={request.cpus}, but its largest node has {caps[most_cpus.name][0]} "
                        f"CPUs ({most_cpus.name})")
    most_mem = max(nodes, key=lambda n: caps[n.name][1])
    if request.mem_mb and request.mem_mb > caps[most_mem.name][1]:
        problems.append(f"--mem={show_mb(request.mem_mb)}, but its largest node has {show_mb(caps[most_mem.name][1])} "
                        f"({most_mem.name})")
    if request.gpus:
        most_gpus = max(nodes, key=lambda n: _gpus_on(n, request))
        have, kind = _gpus_on(most_gpus, request), f"{request.gpu_type} GPUs" if request.gpu_type else "GPUs"
        flag = request.gpu_flag or f"{request.gpus} {kind}"
        if have == 0:
            types = sorted({k.split(":", 1)[1] for n in nodes for k in n.gres if k.startswith("gpu:")})
            there = f" (its GPU types: {', '.join(types)})" if types else ""
            problems.append(f"{flag}, but no node of partition {name} has {kind}{there}")
        elif request.gpus > have:
            problems.append(f"{flag}, but its largest node has {have} {kind} ({most_gpus.name})")
    if not problems:  # each alone fits some node, all together none
        problems.append(f"no single node of partition {name} has {request.cpus or 0} CPUs, "
                        f"{show_mb(request.mem_mb or 0)} and {request.gpus} GPUs at once")
    return problems


def _word(reason: Optional[str]) -> str:
    """A pending reason's code: `ReqNodeNotAvail, UnavailableNodes:n1` -> ReqNodeNotAvail."""
    return (reason or "").split(",")[0].strip().split(" ")[0]


def doubtful(reason: Optional[str]) -> bool:
    """Whether a job waiting for this reason may never start (judged by `hopeless`)."""
    word = _word(reason)
    return bool(word) and (word in NEVER or any(word.startswith(m) for m in MAYBE))


def hopeless(reason: Optional[str], request: Optional[Request], cluster: Optional[Cluster]) -> Optional[str]:
    """Why a job pending for `reason` can never start, or None while it may.

    PartitionConfig and its kind never clear by waiting. Resources and the node-availability
    reasons clear in time, unless the request is beyond every node of its partition or every
    node of it is down or drained; judging those needs the request and the cluster's facts."""
    word = _word(reason)
    if not doubtful(reason):
        return None
    if word in NEVER:
        why = refusal(request, cluster) if request is not None and cluster is not None else None
        return f"{NEVER[word]}" + (f" ({why})" if why else "")
    if cluster is None:
        return None
    if request is not None:
        why = refusal(request, cluster)
        if why:
            return f"no node can ever hold it ({why})"
    name = (request.partition if request else None) or cluster.default_partition
    nodes = cluster.nodes_of(name) if name else []
    if nodes and not any(n.available for n in nodes):
        states = ", ".join(f"{n.name} {n.state}" for n in nodes[:5]) + (" ..." if len(nodes) > 5 else "")
        return f"every node of partition {name} is down or drained ({states})"
    return None

