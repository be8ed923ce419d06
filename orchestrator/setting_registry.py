"""Every cell setting declared once: what a cell measures, and everything derived from that.

A cell's settings are the values that define a measurement (orchestrator/sweep/cell.py hashes them into
the cell's id). Each is declared here with its type, its range or choices, how its value is read
from a composed config with its default filled in, whether and when it is hashed into the cell
id, whether the trainer is told it (`--batch-size`), and where it is shown. From this table come:
the cell id's keys (cell.cell_id), the resolution of a cell's defaults (read_settings: one
function, which expansion checks strictly and a refused cell's record reads leniently), the
result file's `cell` fields and types (resultfile), the `cells` and `refusals` columns (db), the
`results` view's setting columns (each default filled in) and the order `results` lists runs in,
the summary's grouping, the trainer's command line (job.trainer_args), the report's columns and its
CSV types.

Adding a setting is one entry here (and a schema revision giving it a column: orchestrator/
migrations). A setting added after cells exist must not change their ids: give it a `default`
and `hashed=UNLESS_DEFAULT`, so a cell at the default hashes exactly as before.

This module imports nothing heavy: the CLI reads it on every start.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from trainers.common import inputs
from trainers.common import settings as shared

#: When a setting is hashed into the cell id: always; only where the cell is in accuracy mode;
#: only where the cell is in the inference phase; only where its value is not its default (a
#: setting added after cells existed); only where it has a value (a setting only some networks
#: take, added after cells of the others existed).
ALWAYS, IN_ACCURACY_MODE, IN_INFERENCE, UNLESS_DEFAULT, WHERE_TAKEN = (
    "always", "in accuracy mode", "in inference", "unless default", "where taken")
#: The settings hashed, read and passed to the trainer only in one mode or phase: (setting, its value there).
ONLY_WHERE = {IN_ACCURACY_MODE: ("mode", "accuracy"), IN_INFERENCE: ("phase", "inference")}

#: A config lookup: the value at a dotted path of the composed config, None where absent.
Lookup = Callable[[str], Any]


@dataclass(frozen=True)
class SettingDef:
    """One cell setting.

    `read(get, so_far)` is its default rule: its value from the config (`get`), given the settings
    read before it (`so_far`, in table order). A value equal to `default` is stored as None where
    `default` is set (a record made before the setting existed holds None; a resolved cell holds
    the default itself, and its id leaves it out: hashed_keys). `minimum` and `choices`
    are its range; `way_out` the line a refusal of a bad value ends with."""

    name: str
    kind: type
    read: Callable[[Lookup, Mapping[str, Any]], Any]
    hashed: str = ALWAYS
    default: Any = None
    nullable: bool = False
    choices: tuple[str, ...] = ()
    minimum: Optional[float] = None
    way_out: Optional[str] = None
    #: Passed to the trainer as --<name> (docs/protocol.md), where not None.
    trainer_flag: bool = True
    #: Shown everywhere a run or cell is named in a line: a `cells` row's headline, the `refusals`
    #: columns; first in the order `results` and its summary list rows in (SORTED_BY). (Every
    #: setting is a column of the `results` view and the summary, its default filled in.)
    headline: bool = False
    #: A table CSV given to `compare` must have it (it says what a number is).
    names_a_number: bool = False

    @property
    def json_types(self) -> tuple[type, ...]:
        """The types a result file's `cell` field may hold (an int is a float's JSON too)."""
        types: tuple[type, ...] = (int, float) if self.kind is float else (self.kind,)
        return types + ((type(None),) if self.nullable or self.hashed != ALWAYS else ())


def _name(group: str) -> Callable[[Lookup, Mapping[str, Any]], Any]:
    return lambda get, so_far: get(f"{group}.name")


def _key(key: str, default: Any = None) -> Callable[[Lookup, Mapping[str, Any]], Any]:
    return lambda get, so_far: _first(get(key), default)


def _first(*values: Any) -> Any:
    """The first value that is not None (0 is a value). A loop, not next() over a generator: it
    runs a few times for each setting of each cell (a tenth of a 10,000-cell expansion's reading)."""
    for value in values:
        if value is not None:
            return value
    return None


def _like(get: Lookup, so_far: Mapping[str, Any]) -> Any:
    """A synthetic dataset takes its shape from dataset.like, else the model's native data."""
    return _first(get("dataset.like"), get("model.native") if so_far["dataset"] == "synthetic" else None)


def shape_of(settings: Mapping[str, Any]) -> Any:
    """The data shape a cell's batch size default is read for: `like` for synthetic data."""
    return settings["like"] if settings["dataset"] == "synthetic" else settings["dataset"]


def input_note(settings: Mapping[str, Any]) -> str:
    """'ran at 224x224' where a cell's network was fed its data at another size (trainers.common.
    inputs.ran_at: an ImageNet network on CIFAR-10), else "": the dry run, `results` and the report
    show it beside the cell, whose id and settings stay those of the network on that dataset."""
    model, dataset = settings.get("model"), settings.get("dataset")
    if model is None or dataset is None:
        return ""
    return _ran_at(str(model), str(settings.get("like") if dataset == "synthetic" else dataset))


@functools.lru_cache(maxsize=None)
def _ran_at(model: str, like: str) -> str:
    return inputs.ran_at(model, like) or ""


def _build(get: Lookup, so_far: Mapping[str, Any]) -> Any:
    """`build=`; where none is given (conf/config.yaml's `build: null`), the build the preset names for
    the cell's hardware and framework (`preset.builds.<hardware>.<framework>`: +preset=study's Kepler
    builds for its K20m cells) where the cell runs on GPUs (a GPU build: a CPU cell keeps the default),
    else the default. A `build=default` typed is the user's choice, as any other build typed.
    A lookup, not a `${...}` in conf/preset/on/: an interpolation reading two group choices would defeat
    the sweep's factorized composition (orchestrator/sweep/expand.py)."""
    chosen = get("build")
    if chosen is not None:
        return chosen
    if not so_far.get("gpus"):
        return DEFAULT_BUILD
    return _first(get(f"preset.builds.{so_far['hardware']}.{so_far['framework']}"), DEFAULT_BUILD)


#: batch_size=auto: an inference search from batch 1 (trainers/common/batch_search.py), stored as
#: batch_size 1 (where it starts) and batch_search=auto (its own cell id)
AUTO = "auto"


def _batch_size(get: Lookup, so_far: Mapping[str, Any]) -> Any:
    shape = shape_of(so_far)
    if get("batch_size") == AUTO:
        return 1
    return _first(get("batch_size"), get(f"model.batch_size.{shape}") if isinstance(shape, str) else None)


def _threads(get: Lookup, so_far: Mapping[str, Any]) -> Any:
    """threads=, else the hardware's CPUs, else this machine's: os.cpu_count() asked only then, not
    for each cell of a sweep on hardware that names its CPUs."""
    found = _first(get("threads"), get("hardware.cpus"))
    return found if found is not None else _first(os.cpu_count(), 1)


def _only(where: str, key: str, default: Any = None) -> Callable[[Lookup, Mapping[str, Any]], Any]:
    """A setting read only where the cell is in `where`'s mode or phase (ONLY_WHERE), else None."""
    setting, value = ONLY_WHERE[where]
    return lambda get, so_far: _first(get(key), default) if so_far.get(setting) == value else None


def _applies(s: SettingDef, settings: Mapping[str, Any]) -> bool:
    """Whether a setting counts for these settings: its mode or phase is theirs (ONLY_WHERE)."""
    setting, value = ONLY_WHERE.get(s.hashed, (None, None))
    return setting is None or settings.get(setting) == value


#: A plain name: a config choice, a `name:` field, a recipe, a partition or GPU type, a word of a site
#: module's name (envs/builds.MODULE_NAME). Letters, digits and `_ . + -`, not starting with `.`, `+` or
#: `-`: no slash and no `..`, so it joins a path only as one component, and is never an option. Checked
#: with fullmatch (sweep/config_checks.name, choice).
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")

#: The build a cell runs unless it names another: its framework's recipe itself (orchestrator/envs/builds.py)
DEFAULT_BUILD = "default"

#: the defaults the trainer's command line has too (trainers/common/settings.py): one declaration
_D = shared.DEFAULTS

#: In the order they are shown.
SETTINGS: tuple[SettingDef, ...] = (
    SettingDef("framework", str, _name("framework"), trainer_flag=False, headline=True, names_a_number=True),
    SettingDef("model", str, _name("model"), headline=True, names_a_number=True),
    SettingDef("dataset", str, _name("dataset"), headline=True, names_a_number=True),
    SettingDef("like", str, _like, nullable=True),
    SettingDef("hardware", str, _name("hardware"), trainer_flag=False, headline=True, names_a_number=True),
    SettingDef("gpus", int, _key("gpus"), minimum=0, way_out="use gpus=0 for the CPU or gpus=N for N GPUs",
       headline=True, names_a_number=True),
    # nodes the cell spans, GPUs per node above (migration 0012): None at 1, so a cell made before
    # nodes existed keeps its id
    SettingDef("nodes", int, _key("nodes", _D["nodes"]), hashed=UNLESS_DEFAULT, default=_D["nodes"], minimum=1,
       way_out="use nodes=N (N nodes, gpus per node on each)", headline=True, names_a_number=True),
    SettingDef("threads", int, _threads, minimum=1, way_out="use threads=N, or leave it out for the job's CPUs",
       headline=True),
    SettingDef("batch_size", int, _batch_size, minimum=1,
       way_out="use batch_size=N, or leave it out for the model's default", headline=True),
    # fixed: batch_size images per step; auto (typed batch_size=auto): batch 1, 2, 4, ... in one inference
    # job until out of memory or under 5 % more samples/s (migration 0029; None at fixed: ids unchanged)
    SettingDef("batch_search", str, lambda get, so_far: AUTO if get("batch_size") == AUTO else "fixed",
       hashed=UNLESS_DEFAULT, default="fixed", choices=("fixed", AUTO), trainer_flag=False),
    SettingDef("scaling", str, _key("scaling"), choices=shared.SCALINGS),
    SettingDef("iterations", int, _key("iterations"), minimum=1,
       way_out=f"use iterations=N (the measured steps; default {_D['iterations']})"),
    SettingDef("warmup", int, _key("warmup"), minimum=0,
       way_out=f"use warmup=N (the steps before the measurement; default {_D['warmup']})"),
    SettingDef("seed", int, _key("seed"), minimum=0, way_out="use seed=N"),
    SettingDef("precision", str, _key("precision"), choices=shared.PRECISIONS, headline=True),
    # accuracy mode (migration 0006): None in throughput mode, the default, which a cell made before
    # accuracy mode existed is: its id is unchanged, a retyped sweep finds it
    SettingDef("mode", str, _key("mode", _D["mode"]), hashed=UNLESS_DEFAULT, default=_D["mode"],
       choices=shared.MODES),
    SettingDef("epochs", int, _only(IN_ACCURACY_MODE, "epochs", _D["epochs"]), hashed=IN_ACCURACY_MODE, minimum=1,
       way_out=f"use epochs=N (accuracy mode's passes over the training split; default {_D['epochs']})"),
    SettingDef("target_accuracy", float, _only(IN_ACCURACY_MODE, "target_accuracy"), hashed=IN_ACCURACY_MODE, minimum=0.0,
       way_out="use target_accuracy=X with 0 < X <= 1 (a test top-1), or target_accuracy=null"),
    # memory: batches prepared before the timed steps; pipeline: each timed step takes its batch from
    # the ImageNet loader (trainers/common/imagenet.py). A cell at memory stores None (migration 0010),
    # which the views show as memory.
    SettingDef("input", str, _key("input", _D["input"]), hashed=UNLESS_DEFAULT, default=_D["input"],
       choices=shared.INPUTS),
    # a sequence network's tokens per sequence (migration 0026): seq_len=, else the model's own
    # (model.seq_len, which only a sequence network's YAML has); None for every other network, whose
    # id is therefore unchanged. Set for an image network, it is refused (cell.resolve_settings).
    SettingDef("seq_len", int, lambda get, so_far: _first(get("seq_len"), get("model.seq_len")),
       hashed=WHERE_TAKEN, minimum=1, way_out="use seq_len=N (a sequence network's tokens per sequence), or "
       "leave it out for the model's"),
    # a Transformer's shape (migration 0027): layers=, width=, heads=, else the model's own (model.layers ...,
    # which only a Transformer's YAML has); None for every other network, whose id is unchanged
    *(SettingDef(name, int, lambda get, so_far, name=name: _first(get(name), get(f"model.{name}")),
                 hashed=WHERE_TAKEN, minimum=1, way_out=f"use {name}=N (a Transformer's {what}), or leave it out "
                 "for the model's") for name, what in zip(shared.TRANSFORMER_SHAPE, ("blocks", "width", "attention heads"))),
    # train: timed training steps; inference: timed forward passes (issue 38; migration 0028). A cell
    # at train stores None, so every cell made before the phase existed keeps its id.
    SettingDef("phase", str, _key("phase", _D["phase"]), hashed=UNLESS_DEFAULT, default=_D["phase"],
       choices=shared.PHASES),
    # how the network runs (issue 38): a cell at native (each framework's usual form) stores None, so
    # every cell made before keeps its id (migration 0029); refusals per framework: Support.compiles
    SettingDef("compile", str, _key("compile", _D["compile"]), hashed=UNLESS_DEFAULT, default=_D["compile"],
       choices=shared.COMPILES),
    # which build of the framework ran (issue 39; migration 0030): a variant of its recipe, declared in
    # containers/<framework>/builds.yaml (orchestrator/envs/builds.py), checked per framework at expansion
    # (cell.resolve_settings). A cell at `default` (the recipe itself) stores None: every id is unchanged.
    # The job picks the environment; the trainer is not told it (its provenance reads what it loaded).
    SettingDef("build", str, _build, hashed=UNLESS_DEFAULT, default=DEFAULT_BUILD, trainer_flag=False,
       headline=True, names_a_number=True),
    # inference's validity rule: timed batches until both are reached (None in train, which counts iterations)
    SettingDef("min_batches", int, _only(IN_INFERENCE, "min_batches", _D["min_batches"]), hashed=IN_INFERENCE,
       minimum=1, way_out=f"use min_batches=N (inference's fewest timed batches; default {_D['min_batches']})"),
    SettingDef("min_seconds", float, _only(IN_INFERENCE, "min_seconds", _D["min_seconds"]), hashed=IN_INFERENCE,
       minimum=0.0, way_out=f"use min_seconds=X (inference's fewest measured seconds; default {_D['min_seconds']})"),
)
BY_NAME: dict[str, SettingDef] = {s.name: s for s in SETTINGS}
#: Every setting's name, in the order they are shown.
NAMES: tuple[str, ...] = tuple(BY_NAME)
#: The headline settings (see SettingDef.headline), in order.
HEADLINE: tuple[str, ...] = tuple(s.name for s in SETTINGS if s.headline)
#: The order rows are sorted in (`results`, its summary): the headline settings, then every other,
#: so that rows differing only in a setting that is no headline's come out in its order.
SORTED_BY: tuple[str, ...] = (*HEADLINE, *(name for name in NAMES if name not in HEADLINE))
#: The order `results` (and its CSV) lists runs in: every setting (`mode` is the view's, from what the
#: run measured, so the cell's is not a column), then the run's uid last: one order, whichever select
#: reads it (store/kept_lines.py keeps an index in it).
RESULTS_ORDER: tuple[str, ...] = (*(name for name in SORTED_BY if name != "mode"), "sweep", "repeat", "attempt", "run")
#: The settings with a default, and it: what `stored` and `filled` read (once per cell's record).
SETTING_DEFAULTS: dict[str, Any] = {s.name: s.default for s in SETTINGS if s.default is not None}


def read_settings(get: Lookup) -> dict[str, Any]:
    """Every setting's value from a config (`get`: a dotted path's value, None where absent), its
    default rule applied, unchecked: expansion checks them (cell.resolve_settings), a refused
    cell's record keeps them as far as they read."""
    so_far: dict[str, Any] = {}
    for s in SETTINGS:
        so_far[s.name] = s.read(get, so_far)
    return so_far


def stored(name: str, value: Any) -> Any:
    """A value as a record keeps it (a `cells` or `refusals` row): None for a setting's default, as
    records made before the setting existed hold it (see SettingDef). A resolved cell holds the value."""
    return recorded({name: value})[name]  # the rule, said once


def recorded(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's settings as its records keep them (stored's rule, inline: a launch records 10,000
    cells' settings): what the writers of `cells` rows write."""
    defaults = SETTING_DEFAULTS
    return {name: None if value is not None and value == defaults.get(name, _NO_DEFAULT) else value
            for name, value in settings.items()}


_NO_DEFAULT = object()  # equal to no value: a key no setting declares is kept as it is


def filled(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record's settings complete: each None of a setting with a default read as that default.
    The one place a read of recorded settings in Python fills them (SQL reads: schema.setting_value),
    so that no reader re-defaults a setting (`nodes or 1`)."""
    return {**record, **{name: default for name, default in SETTING_DEFAULTS.items() if record.get(name) is None}}


def hashed_keys(settings: Mapping[str, Any]) -> tuple[str, ...]:
    """The settings a cell's id hashes: every ALWAYS setting, the IN_ACCURACY_MODE (IN_INFERENCE) ones
    where the cell is in accuracy mode (the inference phase), the UNLESS_DEFAULT ones where not at
    their default (None), the WHERE_TAKEN ones where they have a value."""
    return tuple(s.name for s in SETTINGS if s.hashed == ALWAYS
                 or (s.hashed in ONLY_WHERE and _applies(s, settings))
                 or (s.hashed == UNLESS_DEFAULT and settings.get(s.name) not in (None, s.default))
                 or (s.hashed == WHERE_TAKEN and settings.get(s.name) is not None))


def trainer_flags(settings: Mapping[str, Any]) -> list[str]:
    """The trainer's command line for these settings: `--<name> <value>` for each it is told,
    where set and not at its default, accuracy mode's (inference's) only in that mode (phase)
    (docs/protocol.md); a null where the trainer's default is not (target_accuracy) as `--<name> none`."""
    args: list[str] = []
    for s in SETTINGS:
        value = settings.get(s.name)
        if not s.trainer_flag or not _applies(s, settings):
            continue
        if value is None and getattr(shared.BY_NAME.get(s.name), "nullable", False):
            args += ["--" + s.name.replace("_", "-"), shared.NONE]
        elif value is not None and value != s.default:  # batch_size=auto: the trainer's --batch-size auto
            shown = AUTO if s.name == "batch_size" and settings.get("batch_search") == AUTO else value
            args += ["--" + s.name.replace("_", "-"), str(shown)]
    return args
