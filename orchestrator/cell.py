"""A cell: one resolved grid point of a sweep, and its stable identity.

Hydra's sweeper expands `-m framework=caffe,tf gpus=1,2` into composed configs; this module
turns one composed config into the benchmark settings that define a measurement, and hashes
exactly those settings. Paths, times, cluster options and sweep controls (repeats, wait,
force) are *not* part of the identity, so typing the same sweep twice names the same cells
and a rerun finds the runs it already has.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from orchestrator import safety
from orchestrator.safety import ConfigError

#: The keys a cell's id hashes, in the order they are shown ...
THROUGHPUT_SETTINGS = (
    "framework", "model", "dataset", "like", "hardware", "gpus", "threads",
    "batch_size", "scaling", "iterations", "warmup", "seed", "precision",
)
#: ... and, for a cell in accuracy mode only, these (None in throughput mode, which a cell made
#: before accuracy mode existed is: its id is unchanged, a retyped sweep finds it).
ACCURACY_SETTINGS = ("mode", "epochs", "target_accuracy")
#: ... and `input` where it is not the default `memory` (None there, so a cell made before the
#: setting existed keeps its id).
INPUT_SETTINGS = ("input",)
SETTINGS = THROUGHPUT_SETTINGS + ACCURACY_SETTINGS + INPUT_SETTINGS
MODES = ("throughput", "accuracy")
#: memory: batches prepared before the timed steps; pipeline: each timed step takes its batch from
#: the ImageNet loader (trainers/common/imagenet.py). Only dataset=imagenet is read per step.
INPUTS = ("memory", "pipeline")
PIPELINE_DATASETS = ("imagenet",)
DATASET_SHAPES = ("mnist", "cifar10", "imagenet", "digits")
PRECISIONS = ("fp32", "fp16", "bf16")
SCALINGS = ("strong", "weak")
#: How to put each integer setting right.
WAY_OUT = {
    "gpus": "use gpus=0 for the CPU or gpus=N for N GPUs",
    "threads": "use threads=N, or leave it out for the job's CPUs",
    "batch_size": "use batch_size=N, or leave it out for the model's default",
    "iterations": "use iterations=N (the measured steps; default 50)",
    "warmup": "use warmup=N (the steps before the measurement; default 10)",
    "seed": "use seed=N",
    "epochs": "use epochs=N (accuracy mode's passes over the training split; default 10)",
}


class CellError(ValueError):
    """A grid point that cannot be a cell (bad value, or no hardware can place it)."""


def cell_id(settings: dict[str, Any]) -> str:
    """A short, stable hash of the benchmark settings (canonical JSON, sorted keys): the
    throughput settings, accuracy mode's where the cell is in that mode, and `input` where it is
    not `memory`."""
    keys = SETTINGS if settings.get("mode") == "accuracy" else THROUGHPUT_SETTINGS
    keys = tuple(k for k in keys if k not in INPUT_SETTINGS)
    if settings.get("input") not in (None, "memory"):
        keys += INPUT_SETTINGS
    canonical = json.dumps({k: settings[k] for k in keys}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Cell:
    """One grid point: its settings (what is measured) and the config it came from."""

    settings: dict[str, Any]
    config: dict[str, Any] = field(repr=False, compare=False)
    overrides: tuple[str, ...] = ()

    @functools.cached_property
    def id(self) -> str:
        return cell_id(self.settings)

    @property
    def label(self) -> str:
        s = self.settings
        return f"{s['framework']}/{s['model']}/{s['dataset']} gpus={s['gpus']} bs={s['batch_size']}"

    @classmethod
    def from_config(cls, cfg: DictConfig, overrides: tuple[str, ...] = (),
                    choices: Any = None) -> "Cell":
        """Resolves a composed config into a cell; raises CellError naming what is wrong.

        `choices` are Hydra's group choices (`hydra.runtime.choices`, read from cfg where it
        holds the hydra node): each must name a file inside its group's folder of conf/."""
        if choices is None and "hydra" in cfg:
            choices = OmegaConf.select(cfg, "hydra.runtime.choices")
        check_choices(choices)
        return cls.from_plain(resolved_config(cfg), overrides)

    @classmethod
    def from_plain(cls, plain: dict[str, Any], overrides: tuple[str, ...] = ()) -> "Cell":
        """A cell from a config already resolved to plain data (orchestrator/expand.py's), its
        group choices checked where it was composed."""
        return cls(settings=resolve_settings(plain), config=plain, overrides=tuple(overrides))


def resolved_config(cfg: DictConfig) -> dict[str, Any]:
    """A composed config as plain data, every interpolation resolved, without Hydra's node;
    CellError naming the key where one does not resolve."""
    try:
        plain = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        raise CellError(f"the config cannot be resolved: {str(exc).splitlines()[0]}; "
                        f"fix the key it names (or its override)") from None
    plain.pop("hydra", None)
    return plain


def check_choices(choices: Any) -> None:
    """Each of Hydra's group choices names a file inside its group's folder of conf/."""
    for group in safety.GROUPS:
        if choices is not None and choices.get(group) is not None:
            _refusing("", safety.choice, group, choices.get(group))


def resolve_settings(cfg: dict[str, Any]) -> dict[str, Any]:
    """The resolved benchmark settings of a plain config dict (defaults filled in, checked)."""
    _refusing("", _check_groups, cfg)
    model, dataset, hardware = cfg["model"], cfg["dataset"], cfg["hardware"]
    where = f"{cfg['framework']['name']}/{model['name']}/{dataset['name']}"

    like = dataset.get("like") or (model.get("native") if dataset["name"] == "synthetic" else None)
    shape = like if dataset["name"] == "synthetic" else dataset["name"]
    if shape not in DATASET_SHAPES:
        _refusing(where, safety.one_of, "dataset.like", like, DATASET_SHAPES)

    gpus = _int(cfg["gpus"], "gpus", where, minimum=0)
    threads = cfg.get("threads")
    if threads is None:
        threads = hardware.get("cpus") or os.cpu_count() or 1
    threads = _int(threads, "threads", where, minimum=1)

    batch_size = cfg.get("batch_size")
    if batch_size is None:
        batch_size = (model.get("batch_size") or {}).get(shape)
        if batch_size is None:
            raise CellError(f"{where}: model.batch_size.{shape}=None: model={model['name']} has no default "
                            f"batch size for {shape}-shaped data; use batch_size=N")
    batch_size = _int(batch_size, "batch_size", where, minimum=1)

    accuracy = _accuracy_settings(cfg, where)
    pipeline = _input_setting(cfg, where, dataset["name"], accuracy["mode"])
    _refusing(where, safety.one_of, "scaling", cfg["scaling"], SCALINGS)
    _refusing(where, safety.one_of, "precision", cfg["precision"], PRECISIONS)
    _refusing(where, _check_hardware, hardware)
    _check_placement(where, gpus, hardware, cfg["framework"], cfg["precision"], model["name"])
    return {
        "framework": cfg["framework"]["name"],
        "model": model["name"],
        "dataset": dataset["name"],
        "like": like,
        "hardware": hardware["name"],
        "gpus": gpus,
        "threads": threads,
        "batch_size": batch_size,
        "scaling": cfg["scaling"],
        "iterations": _int(cfg["iterations"], "iterations", where, minimum=1),
        "warmup": _int(cfg["warmup"], "warmup", where, minimum=0),
        "seed": _int(cfg["seed"], "seed", where, minimum=0),
        "precision": cfg["precision"],
        **accuracy,
        "input": pipeline,
    }


def _input_setting(cfg: dict[str, Any], where: str, dataset: str, mode: str | None) -> str | None:
    """input: None for `memory` (the default, and what a config from before the setting means), else
    `pipeline`, which only a dataset read per step (imagenet) in throughput mode can have."""
    value = cfg.get("input") or "memory"
    _refusing(where, safety.one_of, "input", value, INPUTS)
    if value == "memory":
        return None
    if dataset not in PIPELINE_DATASETS:
        what = ("random tensors made in memory" if dataset == "synthetic"
                else "read whole into memory before the timed steps")
        raise CellError(f"{where}: input={value} times reading each batch from the ImageNet loader, but "
                        f"dataset={dataset} is {what}: there is no reading to time; use dataset=imagenet "
                        f"(`orchestrator data generate imagenet` writes a small tree), or input=memory")
    if mode == "accuracy":
        raise CellError(f"{where}: input={value} is for mode=throughput (accuracy mode prepares each batch "
                        f"before its timed step); use input=memory")
    return value


def _accuracy_settings(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """mode, epochs, target_accuracy: checked and set in accuracy mode, None in throughput mode
    (the default, and what a config from before accuracy mode means)."""
    mode = cfg.get("mode") or "throughput"
    _refusing(where, safety.one_of, "mode", mode, MODES)
    if mode == "throughput":
        return {key: None for key in ACCURACY_SETTINGS}
    target = cfg.get("target_accuracy")
    if target is not None:
        target = _refusing(where, safety.number, "target_accuracy", target, 0.0,
                           "use target_accuracy=X with 0 < X <= 1 (a test top-1), or target_accuracy=null")
        if not 0 < target <= 1:
            raise CellError(f"{where}: target_accuracy={target} is not a test top-1 in (0, 1]; "
                            f"use target_accuracy=0.9, or target_accuracy=null")
    return {"mode": mode, "epochs": _int(cfg.get("epochs", 10), "epochs", where, minimum=1),
            "target_accuracy": None if target is None else float(target)}


def _check_placement(where: str, gpus: int, hardware: dict[str, Any], framework: dict[str, Any],
                     precision: str = "fp32", model: str | None = None) -> None:
    """Refuses a cell its hardware cannot hold, before anything is submitted."""
    per_node = hardware.get("gpus_per_node")
    if gpus and per_node is not None:
        if not hardware.get("gpu_type") or per_node == 0:
            raise CellError(
                f"{where}: gpus={gpus} but hardware={hardware['name']} has no GPUs; "
                f"use gpus=0 or a GPU hardware")
        if gpus > per_node:
            raise CellError(
                f"{where}: gpus={gpus} but hardware={hardware['name']} nodes hold {per_node}; "
                f"use gpus<={per_node}")
    # the framework: what its trainer module declares (trainers/<fw>/__init__.py), the same
    # record the trainer enforces at run time, in the same words
    from orchestrator.frameworks import support

    try:
        declared = support(framework)
    except ValueError as exc:
        raise CellError(f"{where}: {exc}") from exc
    problem = declared.problem(precision, gpus, model, gpu_capability=hardware.get("gpu_capability"),
                               gpu_name=f"hardware={hardware['name']}")
    if problem:
        raise CellError(f"{where}: {problem}")


def _check_groups(cfg: dict[str, Any]) -> None:
    """Each group a mapping with a plain `name`; a framework's `env` a recipe name and its
    `trainer` a module name: they become paths (containers/<env>/, <images>/<env>.sif) and an
    import."""
    for group in safety.GROUPS:
        node = cfg.get(group)
        if not isinstance(node, dict):
            raise safety.refuse(group, node, "is not a config group's mapping",
                                f"choose one of {', '.join(safety.available(group))} with {group}=NAME")
        safety.name(f"{group}.name", node.get("name"),
                    f"give conf/{group}/<name>.yaml a plain `name:` (letters, digits, _ . + -)")
    framework = cfg["framework"]
    if framework.get("env") is not None:
        safety.name("framework.env", framework["env"], "name a recipe folder of containers/ (or an image "
                    "<name>.sif), or leave framework.env out for the framework's name")
    if framework.get("trainer") is not None:
        safety.module("framework.trainer", framework["trainer"])


def _check_hardware(hardware: dict[str, Any]) -> None:
    """The hardware keys that become the job's request (sbatch options, the time limit)."""
    for key, sep in (("partition", ","), ("gpu_type", None)):  # a partition may be a list: p100,v100
        if hardware.get(key) is not None:
            safety.name(f"hardware.{key}", hardware[key], f"use the cluster's own {key.replace('_', ' ')} "
                        f"name in conf/hardware/{hardware['name']}.yaml (or hardware.{key}=NAME)", sep=sep)
    for key, minimum in (("gpus_per_node", 0), ("cpus", 1), ("mem_gb", 1), ("time_min", 1)):
        if hardware.get(key) is not None:
            safety.integer(f"hardware.{key}", hardware[key], minimum,
                           way_out=f"use hardware.{key}=N with N >= {minimum} (or fix conf/hardware/"
                                   f"{hardware['name']}.yaml)")
    if hardware.get("gpu_capability") is not None:
        safety.number("hardware.gpu_capability", hardware["gpu_capability"], 0.0,
                      "use the GPU's CUDA compute capability, e.g. hardware.gpu_capability=7.0")


def _int(value: Any, name: str, where: str, minimum: int) -> int:
    return _refusing(where, safety.integer, name, value, minimum, way_out=WAY_OUT.get(name))


def _refusing(where: str, check: Any, *args: Any, **kwargs: Any) -> Any:
    """check(*args, **kwargs), its ConfigError this cell's refusal (CellError, after `where`)."""
    try:
        return check(*args, **kwargs)
    except ConfigError as exc:
        raise CellError(f"{where}: {exc}" if where else str(exc)) from None
