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
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from orchestrator.sweep import config_checks, time_limits
from orchestrator import setting_registry
from orchestrator.envs import builds
from orchestrator.sweep.config_checks import ConfigError
from trainers.common import inputs

#: The settings a cell holds, in the order they are shown (declared in setting_registry).
SETTINGS = setting_registry.NAMES
#: dataset=imagenet is the only one read per step: what input=pipeline times.
PIPELINE_DATASETS = ("imagenet",)
#: What each setting only some networks take is (setting_registry.WHERE_TAKEN): set for a model whose
#: YAML has no value of its own (model.<name>), it is refused in these words.
TAKEN_BY = {"seq_len": "the tokens per sequence of a sequence network (model=lstm)",
            "layers": "the blocks of a Transformer (model=gpt)", "width": "the width of a Transformer (model=gpt)",
            "heads": "the attention heads of a Transformer (model=gpt)"}
DATASET_SHAPES = tuple(inputs.DATASETS)


class CellError(ValueError):
    """A grid point that cannot be a cell (bad value, or no hardware can place it)."""


def cell_id(settings: dict[str, Any]) -> str:
    """A short, stable hash of the benchmark settings (canonical JSON, sorted keys): the keys
    setting_registry.hashed_keys names (a setting added later is hashed only away from its
    default, so the ids of cells made before it stay)."""
    keys = setting_registry.hashed_keys(settings)
    canonical = _CANONICAL.encode({k: settings[k] for k in keys})
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


#: cell_id's JSON: what json.dumps(sort_keys=True, separators=(",", ":")) makes, its encoder made
#: once (json.dumps makes one per call when given options: a third of hashing a cell).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Cell:
    """One grid point: its settings (what is measured) and the config it came from."""

    settings: dict[str, Any]
    config: dict[str, Any] = field(repr=False, compare=False)
    overrides: tuple[str, ...] = ()

    @functools.cached_property
    def id(self) -> str:
        return cell_id(self.settings)

    def with_config(self, config: dict[str, Any]) -> "Cell":
        """This cell with another config (time_limits.learn's limit in its hardware): its settings,
        and so its id, are the same, so the id already worked out goes with it, not hashed again
        (half the hashing of a 10,000-cell submission)."""
        new = type(self)(self.settings, config, self.overrides)  # (dataclasses.replace: 3x the cost, per cell)
        if "id" in self.__dict__:  # functools.cached_property's slot
            new.__dict__["id"] = self.__dict__["id"]
        return new

    @property
    def where(self) -> str:
        """framework/model/dataset: how a refusal names the cell (CellError's prefix)."""
        s = self.settings
        return f"{s['framework']}/{s['model']}/{s['dataset']}"

    @property
    def label(self) -> str:
        s = self.settings
        bs = setting_registry.AUTO if s.get("batch_search") == setting_registry.AUTO else s['batch_size']
        return f"{s['framework']}/{s['model']}/{s['dataset']} gpus={s['gpus']} bs={bs}"

    @property
    def recorded(self) -> dict[str, Any]:
        """The config as the database keeps it (sweep_cells.config, read by every user of a shared
        database): without `paths.db`, the URL the submitter opened it with (a PostgreSQL
        password). Nothing reads it back: a rerun takes `paths` from the caller (rerun_config.py).
        A new mapping: the cell's own config, which cells share parts of, is not changed."""
        paths = {k: v for k, v in (self.config.get("paths") or {}).items() if k != "db"}
        return {**self.config, "paths": paths}

    @classmethod
    def from_config(cls, cfg: DictConfig, overrides: tuple[str, ...] = (),
                    choices: Any = None) -> "Cell":
        """Resolves a composed config into a cell; raises CellError naming what is wrong.

        `choices` are Hydra's group choices (`hydra.runtime.choices`, read from cfg where it
        holds the hydra node): each must name a file inside its group's folder of conf/."""
        if choices is None:
            choices = group_choices(cfg)
        check_choices(choices)
        return cls.from_plain(resolved_config(cfg), overrides)

    @classmethod
    def from_plain(cls, plain: dict[str, Any], overrides: tuple[str, ...] = (),
                   checked: dict[tuple[int, ...], tuple[Any, ...]] | None = None) -> "Cell":
        """A cell from a config already resolved to plain data (orchestrator/sweep/expand.py's), its
        group choices checked where it was composed. Its config is complete as its settings are:
        a setting with a default left null (`nodes=null`) or absent (a config recorded before the
        setting existed) holds that default (setting_registry.filled), so that no reader of the
        config (the scheduler's request: backends/sbatch.py) defaults it again. A new mapping:
        `plain` is not changed. `checked`: resolve_settings's memo, one per launch."""
        return cls(settings=resolve_settings(plain, checked), config=setting_registry.filled(plain),
                   overrides=tuple(overrides))


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


def group_choices(cfg: Any) -> Any:
    """Hydra's group choices of a composed config (`hydra.runtime.choices`), None where it holds no
    hydra node: the one reading of them, for the launcher's expansion and the foreground run."""
    node = cfg
    for key in ("hydra", "runtime", "choices"):
        node = node.get(key) if isinstance(node, DictConfig) else None
    return node


def check_choices(choices: Any) -> None:
    """Each of Hydra's group choices names a file inside its group's folder of conf/."""
    for group in config_checks.GROUPS:
        if choices is not None and choices.get(group) is not None:
            _refusing("", config_checks.choice, group, choices.get(group))


def resolve_settings(cfg: dict[str, Any], checked: dict[tuple[int, ...], tuple[Any, ...]] | None = None
                     ) -> dict[str, Any]:
    """The resolved benchmark settings of a plain config dict: setting_registry.read_settings's
    values (defaults filled in), each checked against its declaration, then the rules that join
    several (a batch size the data's shape has, input=pipeline's dataset, the placement).

    `checked` (a launch's memo, or None): the group mappings whose checks passed, by identity.
    A sweep's cells share their composition's group mappings (expand.py), so the checks of those
    (_check_groups, _check_hardware) run once per mapping, not once per cell; the memo holds the
    mappings, so that no other object takes their ids while it lives."""
    groups = tuple(cfg.get(group) for group in config_checks.GROUPS)
    if not _passed(checked, groups):
        _refusing("", _check_groups, cfg)
        _remember(checked, groups)
    where = f"{cfg['framework']['name']}/{cfg['model']['name']}/{cfg['dataset']['name']}"
    raw = setting_registry.read_settings(lambda path: lookup(cfg, path))
    shape = setting_registry.shape_of(raw)
    if shape not in DATASET_SHAPES:
        _refusing(where, config_checks.one_of, "dataset.like", raw["like"], DATASET_SHAPES)
    _check_shape(where, raw["model"], shape)
    for name, what in TAKEN_BY.items():
        if raw[name] is not None and lookup(cfg, f"model.{name}") is None:
            raise CellError(f"{where}: {name}={raw[name]} is {what}, and model={raw['model']} takes none; "
                            f"leave {name} out")
    if raw["batch_size"] is None:
        raise CellError(f"{where}: model.batch_size.{shape}=None: model={raw['model']} has no default "
                        f"batch size for {shape}-shaped data; use batch_size=N")
    settings = {name: _checked(where, setting_registry.BY_NAME[name], value) for name, value in raw.items()}
    if settings["target_accuracy"] is not None and not 0 < settings["target_accuracy"] <= 1:
        raise CellError(f"{where}: target_accuracy={settings['target_accuracy']} is not a test top-1 in (0, 1]; "
                        f"use target_accuracy=0.9, or target_accuracy=null")
    _check_input(where, settings)
    if settings["heads"] is not None and settings["width"] % settings["heads"]:
        raise CellError(f"{where}: width={settings['width']} is not a multiple of heads={settings['heads']} (each "
                        f"head takes an equal share of the width); use a width heads divide")
    _check_phase(where, settings)
    if settings["build"] != builds.DEFAULT or cfg.get("runtime") == "module":  # a named build reads its builds.yaml
        _check_build(where, cfg, settings["build"])
    if not _passed(checked, (cfg["hardware"],)):
        _refusing(where, _check_hardware, cfg["hardware"])
        _remember(checked, (cfg["hardware"],))
    nodes = settings["nodes"]
    if nodes > 1 and (cfg.get("cluster") or {}).get("executor", "local") != "slurm":
        raise CellError(f"{where}: nodes={nodes} needs a cluster of nodes, but cluster="
                        f"{(cfg.get('cluster') or {}).get('name', 'local')} runs one; use cluster=slurm, or nodes=1")
    _check_placement(where, settings["gpus"], cfg["hardware"], cfg["framework"], settings["precision"],
                     settings["model"], nodes, settings["phase"], settings["compile"], settings["build"])
    return settings


def _check_build(where: str, cfg: dict[str, Any], build: Any) -> None:
    """Refuses a build its framework does not declare, or a runtime cannot run (builds.refusal)."""
    problem = builds.refusal(cfg["framework"].get("env") or cfg["framework"]["name"], build, cfg.get("runtime", "venv"))
    if problem:
        raise CellError(f"{where}: {problem}")
    if cfg.get("runtime") == "module" and not ((cfg.get("cluster") or {}).get("modules") or {}).get("path"):
        # the job would fail at `module load` after its wait in the queue: refused before it is submitted
        raise CellError(f"{where}: runtime=module needs the site's module tree: add `modules: {{path: "
                        f"[/apps/modulefiles]}}` to the cluster's YAML (conf/cluster/<site>.yaml)")


def _passed(checked: dict[tuple[int, ...], tuple[Any, ...]] | None, parts: tuple[Any, ...]) -> bool:
    """Whether these very mappings (by identity) passed their check already (resolve_settings)."""
    return checked is not None and checked.get(tuple(map(id, parts))) is not None


def _remember(checked: dict[tuple[int, ...], tuple[Any, ...]] | None, parts: tuple[Any, ...]) -> None:
    if checked is not None:
        checked[tuple(map(id, parts))] = parts


def lookup(plain: Any, path: str) -> Any:
    """The value at a dotted path of a plain config, None where any part is absent."""
    for part in _parts(path):
        if not isinstance(plain, dict):
            return None
        plain = plain.get(part)
    return plain


@functools.lru_cache(maxsize=None)
def _parts(path: str) -> tuple[str, ...]:
    """A dotted path's parts, split once per path: a sweep's resolution looks up each of a few
    dozen paths once per cell (190,000 splits for 10,000 cells)."""
    return tuple(path.split("."))


def _checked(where: str, setting: setting_registry.SettingDef, value: Any) -> Any:
    """One setting's value checked against its declaration, its default included. A value that is
    plainly right (one of the choices; an int at or above the minimum) passes at once: a sweep of
    thousands of cells checks each of their settings."""
    if value is None and (setting.nullable or setting.hashed != setting_registry.ALWAYS):
        return None
    if setting.choices:
        if value not in setting.choices or not isinstance(value, str):
            value = _refusing(where, config_checks.one_of, setting.name, value, setting.choices)
    elif setting.kind is int:
        if type(value) is not int or value < (setting.minimum or 0) or value > config_checks.INT_MAX:
            value = _refusing(where, config_checks.integer, setting.name, value, int(setting.minimum or 0),
                              way_out=setting.way_out)
    elif setting.kind is float:
        value = float(_refusing(where, config_checks.number, setting.name, value, setting.minimum or 0.0,
                                setting.way_out))
    # (a string without choices is a group's name, checked with its group, or `like`, a data shape)
    return value


def _check_shape(where: str, model: str, shape: str) -> None:
    """A data shape the model cannot take (trainers.common.inputs.shape_problem: FCN-S's feature
    vector under a convolutional network, ResNet-56 on anything but 32x32 images) is refused
    before anything runs."""
    problem = inputs.shape_problem(model, shape)
    if problem:
        # dataset.like is read under dataset=synthetic only: beside real files it is no way out
        raise CellError(f"{where}: {problem}; use another dataset or model (with dataset=synthetic, "
                        "another dataset.like)")


def _check_input(where: str, settings: dict[str, Any]) -> None:
    """input=pipeline only where a dataset read per step (imagenet) is timed, in throughput mode."""
    value, dataset = settings["input"], settings["dataset"]
    if value == setting_registry.BY_NAME["input"].default:
        return
    if dataset not in PIPELINE_DATASETS:
        what = ("random tensors made in memory" if dataset == "synthetic"
                else "read whole into memory before the timed steps")
        raise CellError(f"{where}: input={value} times reading each batch from the ImageNet loader, but "
                        f"dataset={dataset} is {what}: there is no reading to time; use dataset=imagenet "
                        f"(`orchestrator data generate imagenet` writes a small tree), or input=memory")
    if settings["mode"] == "accuracy":
        raise CellError(f"{where}: input={value} is for mode=throughput (accuracy mode prepares each batch "
                        f"before its timed step); use input=memory")


def _check_phase(where: str, settings: dict[str, Any]) -> None:
    """phase=inference times forward passes of the seed's initial weights: not accuracy mode's training,
    and not the loader's reading (trainers/common/inference.py says the same at run time); batch_size=auto
    is inference's alone, on synthetic data (trainers/common/batch_search.py)."""
    if settings["phase"] != "inference":
        if settings["batch_search"] == setting_registry.AUTO:
            raise CellError(f"{where}: batch_size=auto searches inference's batches; use phase=inference, "
                            f"or batch_size=N for training")
        return
    if settings["batch_search"] == setting_registry.AUTO and settings["dataset"] != "synthetic":
        raise CellError(f"{where}: batch_size=auto makes each point's batches from random data; use "
                        f"dataset=synthetic dataset.like={settings['dataset']}")
    if settings["mode"] == "accuracy":
        raise CellError(f"{where}: phase=inference times forward passes of untrained weights, mode=accuracy "
                        f"trains and evaluates; use mode=throughput with phase=inference, or phase=train")
    if settings["input"] != setting_registry.BY_NAME["input"].default:
        raise CellError(f"{where}: phase=inference times forward passes on batches prepared before timing; "
                        f"use input=memory (the loader's reading is timed in phase=train)")


def _check_placement(where: str, gpus: int, hardware: dict[str, Any], framework: dict[str, Any],
                     precision: str = "fp32", model: str | None = None, nodes: int = 1,
                     phase: str = "train", compile: str = "native", build: str = builds.DEFAULT) -> None:
    """Refuses a cell its hardware cannot hold, or its framework cannot run, before anything is submitted."""
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
    recipe, capability = framework.get("env") or framework["name"], hardware.get("gpu_capability")
    problem = declared.problem(precision, gpus, model, gpu_capability=capability, gpu_name=f"hardware={hardware['name']}",
                               nodes=nodes, phase=phase, compile=compile, gpu_build=builds.gpu_range(recipe, build))
    if problem:  # where the build's range leaves the GPU out, the builds that hold it are the way out
        raise CellError(f"{where}: {problem}{builds.way_out(recipe, build, capability, declared.gpu_build) if gpus else ''}")


def _check_groups(cfg: dict[str, Any]) -> None:
    """Each group a mapping with a plain `name`; a framework's `env` a recipe name and its
    `trainer` a module name: they become paths (containers/<env>/, <images>/<env>.sif) and an
    import."""
    for group in config_checks.GROUPS:
        node = cfg.get(group)
        if not isinstance(node, dict):
            raise config_checks.refuse(group, node, "is not a config group's mapping",
                                f"choose one of {', '.join(config_checks.available(group))} with {group}=NAME")
        config_checks.name(f"{group}.name", node.get("name"),
                    f"give conf/{group}/<name>.yaml a plain `name:` (letters, digits, _ . + -)")
    framework = cfg["framework"]
    if framework.get("env") is not None:
        config_checks.name("framework.env", framework["env"], "name a recipe folder of containers/ (or an image "
                    "<name>.sif), or leave framework.env out for the framework's name")
    if framework.get("trainer") is not None:
        config_checks.module("framework.trainer", framework["trainer"])


def _check_hardware(hardware: dict[str, Any]) -> None:
    """The hardware keys that become the job's request (sbatch options, the time limit)."""
    for key, sep in (("partition", ","), ("gpu_type", None)):  # a partition may be a list: p100,v100
        if hardware.get(key) is not None:
            config_checks.name(f"hardware.{key}", hardware[key], f"use the cluster's own {key.replace('_', ' ')} "
                        f"name in conf/hardware/{hardware['name']}.yaml (or hardware.{key}=NAME)", sep=sep)
    for key, minimum in (("gpus_per_node", 0), ("cpus", 1), ("mem_gb", 1), ("time_min", 1), ("time_max", 1)):
        if hardware.get(key) is not None and not (key == "time_min" and hardware[key] == time_limits.AUTO):
            config_checks.integer(f"hardware.{key}", hardware[key], minimum,
                           way_out=f"use hardware.{key}=N with N >= {minimum}"
                                   + (" or auto (learned from earlier runs)" if key == "time_min" else "")
                                   + f" (or fix conf/hardware/"
                                   f"{hardware['name']}.yaml)")
    if hardware.get("gpu_capability") is not None:
        config_checks.number("hardware.gpu_capability", hardware["gpu_capability"], 0.0,
                      "use the GPU's CUDA compute capability, e.g. hardware.gpu_capability=7.0")
    _check_peaks(hardware)


def _check_peaks(hardware: dict[str, Any]) -> None:
    """`peak_tflops`, the peak FLOP/s MFU is a fraction of: null, or per precision a number of TFLOP/s > 0."""
    peaks, precisions = hardware.get("peak_tflops"), setting_registry.BY_NAME["precision"].choices
    way_out = (f"give one GPU's peak TFLOP/s per precision, e.g. hardware.peak_tflops={{fp32:9.3,fp16:18.7}}, "
               f"or null (fix conf/hardware/{hardware['name']}.yaml)")
    if peaks is None:
        return
    if not isinstance(peaks, dict):
        raise config_checks.refuse("hardware.peak_tflops", peaks, "is not a mapping of precision to TFLOP/s", way_out)
    for precision, peak in peaks.items():
        key = f"hardware.peak_tflops.{precision}"
        if precision not in precisions:
            raise config_checks.refuse(key, peak, f"names no precision (one of {', '.join(precisions)})", way_out)
        if peak is not None and config_checks.number(key, peak, 0.0, way_out) == 0:
            raise config_checks.refuse(key, peak, "must be above 0", way_out)


def _refusing(where: str, check: Any, *args: Any, **kwargs: Any) -> Any:
    """check(*args, **kwargs), its ConfigError this cell's refusal (CellError, after `where`)."""
    try:
        return check(*args, **kwargs)
    except ConfigError as exc:
        raise CellError(f"{where}: {exc}" if where else str(exc)) from None
