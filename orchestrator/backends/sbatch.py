"""What a Slurm job asks for: a cell's hardware as one structured `Request`, the submitit
parameters derived from it, and the policy on sbatch options that come from configuration.

One direction only: `request` reads the cell's hardware and `gpus` (and the cluster's defaults)
once; the submitit parameters (`submitit_params`: `--mem=64G`, `--gres=gpu:p100:2` ...) and the
placement check (slurm_cluster.refusal, against what the cluster has) are both derived from that
Request, and nothing reads submitit's strings back.

submitit writes every sbatch option as a line `#SBATCH --<name>=<value>` of the batch script:
the name unquoted, the value through `shlex.quote`, which keeps a newline. A newline (or any
other control character) in either ends the `#SBATCH` line, and what follows runs as a shell
command on the compute node. So every option that comes from a site's YAML or an override is
checked here before it reaches submitit: a name is a long option spelt as Slurm spells them
(`mail-type`), not one the orchestrator sets itself nor one that changes what runs or where
(`export`, `chdir`, `wrap` ...); a value is one printable line. `cluster.setup` and
`cluster.python` are the site's own shell by design (config_checks.py's docstring says why), each held
to one printable line. The generic checks (one line, integer, name ...) are config_checks.py's.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Mapping, Optional

from orchestrator.backends.slurm_cluster import Request, show_mb
from orchestrator.sweep.config_checks import boolean, integer, name, one_line, one_of, refuse
from orchestrator.sweep.time_limits import configured

#: An sbatch long option as Slurm spells them, after submitit turns `_` into `-`.
OPTION = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")

#: sbatch options the orchestrator (or submitit under it) sets, and the config key that sets each.
SET_HERE = {
    "partition": "hardware.partition", "time": "hardware.time_min", "time-min": "hardware.time_min=auto",
    "cpus-per-task": "hardware.cpus",
    "mem": "hardware.mem_gb", "gres": "hardware.gpu_type and gpus", "gpus-per-node": "hardware.gpu_type and gpus",
    "exclusive": "cluster.exclusive", "account": "cluster.account", "qos": "cluster.qos",
    "constraint": "cluster.constraint", "array": "cluster.array_parallelism", "nodes": None,
    "ntasks-per-node": None, "job-name": None, "output": None, "error": None, "open-mode": None, "signal": None,
}
#: sbatch options that change what runs, as whom, or where: never from configuration.
CHANGES_WHAT_RUNS = ("wrap", "export", "export-file", "get-user-env", "chdir", "uid", "gid", "container",
                     "container-id", "bb", "bbf", "input", "parsable", "wait", "test-only")
#: How a cluster asks for typed GPUs (`cluster.gpu_request`): the submitit parameter of each.
GPU_REQUESTS = {"gres": "gres", "gpus_per_node": "gpus_per_node"}
#: submitit asks Slurm for USR2 this long before the time limit (`--signal=USR2@N`); its own
#: default (90 s) is longer than a 1-minute limit, so it is a fraction of the limit instead.
SIGNAL_DELAY_MAX_S, SIGNAL_DELAY_MIN_S, SIGNAL_DELAY_FRACTION = 90, 5, 0.1

SITE = "the cluster's YAML (conf/cluster/<site>.yaml) or the override that set it"


# --- a cell's request, and the submitit parameters derived from it ----------------------------

#: What a request reads of a cell's hardware: its memo's key (request), with gpus, nodes and the
#: cluster's two values that `_derived` reads.
HARDWARE_ASKED = ("partition", "cpus", "mem_gb", "gpu_type", "time_min", "time_max", "time_floor")


def request(config: Mapping[str, Any], cluster: Mapping[str, Any]) -> Request:
    """What a cell (its resolved config) asks of each of its `nodes`: its hardware's partition,
    CPUs, memory and time limit, and its `gpus` of the hardware's GPU type, named as the cluster
    asks for them (`cluster.gpu_request`). The time limit is the hardware's `time_min` (with
    `--time-min` where time_limits learned it: `time_floor`); `auto` not learned yet (a cell
    checked before submission learns it) is its ceiling `time_max`; else the cluster's
    `time_min`, else time_limits.DEFAULT_TIME_MIN. `nodes` is read as the resolved config holds
    it, complete (cell.Cell.from_plain): a config without it is a KeyError, never a guess of 1.
    Derived once per distinct set of the values it reads (a launch asks each cell's three times:
    its check, its partition's MaxTime, its grouping; a sweep's cells ask a few), by value, so
    that a mapping changed in place (rerun's longer limit) is derived again."""
    hardware = config["hardware"]
    asked = (tuple(hardware.get(key) for key in HARDWARE_ASKED), config["gpus"], config["nodes"],
             cluster.get("gpu_request", "gres"), cluster.get("time_min"))
    try:
        return _derived(*asked)
    except TypeError:  # a value that cannot be a key (a list): derived without the memo
        return _derived.__wrapped__(*asked)


@functools.lru_cache(maxsize=1024)
def _derived(values: tuple[Any, ...], gpus: Any, nodes: Any, gpu_request: str, cluster_time_min: Any) -> Request:
    """request's Request from the values it read."""
    hardware, gpus = dict(zip(HARDWARE_ASKED, values)), int(gpus)
    gpu_type = (hardware.get("gpu_type") or None) if gpus else None
    flag = ""
    if gpus:
        key, value = _gpu_option(gpus, gpu_type, gpu_request)
        flag = f"--{key.replace('_', '-')}={value}"
    return Request(partition=hardware.get("partition") or None,
                   cpus=int(hardware["cpus"]) if hardware.get("cpus") else None,
                   mem_mb=1024 * int(hardware["mem_gb"]) if hardware.get("mem_gb") else None,
                   gpus=gpus, gpu_type=gpu_type,
                   time_min=configured(hardware, {"time_min": cluster_time_min}),
                   time_floor_min=int(hardware["time_floor"]) if hardware.get("time_floor") else None,
                   nodes=int(nodes), gpu_flag=flag)


def _gpu_option(gpus: int, gpu_type: Optional[str], how: str) -> tuple[str, str]:
    """The submitit parameter and value that ask for `gpus` GPUs of `gpu_type` the cluster's way."""
    if how not in GPU_REQUESTS:
        raise ValueError(f"cluster.gpu_request={how!r} is not one of {', '.join(GPU_REQUESTS)}")
    typed = f"{gpu_type}:{gpus}" if gpu_type else str(gpus)
    return GPU_REQUESTS[how], f"gpu:{typed}" if how == "gres" else typed


def submitit_params(job: Request, cluster: Mapping[str, Any]) -> dict[str, Any]:
    """submitit SlurmExecutor parameters of a request and the cluster's own options (exclusive,
    account, QoS, constraint, extra sbatch options, setup lines, array parallelism), each
    checked by `sbatch_request` on its way out."""
    # one task per node: the job on each node starts that node's ranks (trainers.common.launch)
    params: dict[str, Any] = {"nodes": job.nodes, "ntasks_per_node": 1, "time": job.time_min}
    if job.partition:
        params["partition"] = job.partition
    if job.cpus:
        params["cpus_per_task"] = job.cpus
    if job.mem_mb:
        params["mem"] = show_mb(job.mem_mb)
    if job.gpus:
        key, value = _gpu_option(job.gpus, job.gpu_type, cluster.get("gpu_request", "gres"))
        params[key] = value
    if cluster.get("exclusive", True):
        params["exclusive"] = True
    for key in ("account", "qos", "constraint"):
        if cluster.get(key):
            params[key] = cluster[key]
    extra = dict(cluster.get("sbatch") or {})
    if extra:
        params["additional_parameters"] = extra
    if cluster.get("setup"):
        params["setup"] = list(cluster["setup"])
    params["array_parallelism"] = int(cluster.get("array_parallelism") or 16)
    # from the floor where one is asked: a backfilled job really gets only the floor (site facts),
    # and the delay, time the run loses, needs only to cover recording the timeout, not a longer limit
    params["signal_delay_s"] = signal_delay_s(job.time_floor_min or params["time"])
    sbatch_request(params)  # nothing from configuration breaks out of its #SBATCH line
    if job.time_floor_min:  # computed here, not configuration: added after the check that refuses it there
        params["additional_parameters"] = {**extra, "time-min": int(job.time_floor_min)}
    return params


def signal_delay_s(time_min: int) -> int:
    """Seconds before the time limit that Slurm sends submitit's USR2: a tenth of the limit,
    at least SIGNAL_DELAY_MIN_S and at most submitit's own 90 s. (slurmctld checks limits about
    every 30 s, so the signal may still come up to ~30 s earlier than asked.)"""
    return int(max(SIGNAL_DELAY_MIN_S, min(SIGNAL_DELAY_MAX_S, SIGNAL_DELAY_FRACTION * 60 * time_min)))


# --- sbatch options from configuration ----------------------------------------------------------

def sbatch_value(key: str, value: Any) -> Any:
    """What submitit writes after `--<option>=`: one printable line (True: the bare flag)."""
    if value is True or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    if value is None or value is False:
        raise refuse(key, value, "is no sbatch value", f"remove {key} from {SITE} to leave the option out")
    return one_line(key, value, f"write {key} as one line in {SITE}", kind="one value (a string or a number)")


def sbatch_options(key: str, options: Any) -> dict[str, Any]:
    """A site's extra sbatch options (`cluster.sbatch`): {option-name: value}."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise refuse(key, options, "must be a mapping of sbatch option names to values",
                     f"write it as {key}: {{reservation: bench, mail-type: END}} in {SITE}")
    for option, value in options.items():
        spelt = option.replace("_", "-") if isinstance(option, str) else option
        if not isinstance(spelt, str) or not OPTION.fullmatch(spelt) or len(spelt) < 2:
            raise refuse(f"{key} option name", option, "is not an sbatch long option (lower-case letters, "
                         "digits and dashes, as in mail-type)", f"fix or remove it in {SITE}")
        if spelt in SET_HERE:
            where = SET_HERE[spelt]
            raise refuse(f"{key}.{option}", value, "is an option the orchestrator sets itself",
                         f"set {where} instead" if where else f"remove it from {SITE}")
        if spelt in CHANGES_WHAT_RUNS:
            raise refuse(f"{key}.{option}", value, "would change what the job runs, as whom or where",
                         f"remove it from {SITE}; put environment set-up in cluster.setup")
        sbatch_value(f"{key}.{option}", value)
    return dict(options)


def shell_lines(key: str, lines: Any) -> list[str]:
    """`cluster.setup`: the site's own shell lines, run in the job by design; one line each."""
    if lines is None:
        return []
    if isinstance(lines, str) or not isinstance(lines, (list, tuple)):
        raise refuse(key, lines, "must be a list of shell lines", f"write it as {key}: [module load apptainer]")
    for i, line in enumerate(lines):
        one_line(f"{key}[{i}]", line, f"split it into one list item per line in {SITE}", kind="a line of shell")
    return list(lines)


def check_cluster(config: Mapping[str, Any]) -> None:
    """The sweep-wide cluster keys that reach the scheduler (raises config_checks.ConfigError);
    `executor` is checked where backends are chosen (backends.backend_name)."""
    if config.get("name") is not None:
        name("cluster.name", config["name"])
    for key in ("exclusive", "check_requests"):
        if config.get(key) is not None:
            boolean(f"cluster.{key}", config[key])
    if config.get("gpu_request") is not None:
        one_of("cluster.gpu_request", config["gpu_request"], GPU_REQUESTS)
    for key in ("account", "qos", "constraint", "follow_up_partition"):
        if config.get(key) is not None:
            sbatch_value(f"cluster.{key}", config[key])
    for key, minimum in (("array_parallelism", 1), ("time_min", 1), ("max_array_size", 1),
                         ("unplaceable_after_min", 0)):
        if config.get(key) is not None:
            integer(f"cluster.{key}", config[key], minimum)
    sbatch_options("cluster.sbatch", config.get("sbatch"))
    shell_lines("cluster.setup", config.get("setup"))
    if config.get("python") is not None:
        one_line("cluster.python", config["python"], f"write the command that starts Python on the node as one "
                                                     f"line in {SITE}", kind="a command")


def sbatch_request(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """The last gate before submitit: every option a resource request will write.

    Called by `submitit_params` on what it built from hardware and cluster keys; the keys
    above are checked earlier with their config names, this catches whatever reaches submitit
    by another road (a rerun's recorded config, a new backend option)."""
    for key, value in params.items():
        if key == "additional_parameters":
            sbatch_options("cluster.sbatch", value)
        elif key == "setup":
            shell_lines("cluster.setup", value)
        else:
            if not isinstance(key, str) or not OPTION.fullmatch(key.replace("_", "-")):
                raise refuse("sbatch option name", key, "is not an sbatch long option", f"fix {SITE}")
            source = SET_HERE.get(key.replace("_", "-")) or ""
            sbatch_value(source if " " not in source and source else f"sbatch option {key}", value)
    return params
