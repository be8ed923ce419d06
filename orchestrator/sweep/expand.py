"""Where a sweep is expanded: the sweeper's override lists into cells, composing once per
distinct configuration.

Hydra composes a config from nothing for every override list (the defaults tree, every YAML
file: ~0.1 s each here), so a sweep of 1,000 seeds over two hardware choices cost 1,000
compositions, and Hydra's sweeper composed each a second time to check it. Yet only the
*config-group* choices (`framework=tf`, `+preset/net=lenet_mnist`, anything under `hydra`)
decide what is composed; every other override (`seed=3`, `batch_size=16`, `hardware.cpus=4`)
is a plain value Hydra applies to the composed config afterwards, in order. So:

- the group overrides of a list are its *composition key*: each key is composed once, through
  Hydra's own `load_sweep_config` (a wrong name fails there, with Hydra's list of choices), and
  resolved once; every composition shares one cache of loaded YAML files (`share_loaded_configs`);
- a cell whose value overrides touch keys that no interpolation of the config mentions gets
  that resolved config with its values set (Hydra's parsed, typed values: `seed=3` is 3,
  `threads=null` is None) — the fast path, a dict copy;
- any other cell (a value that is itself an interpolation, a key some `${...}` refers to, a
  `+`/`++`/`~` override, a key the config lacks, a mapping replaced) takes Hydra's path: its
  own copy of the composed config, the overrides applied by Hydra's `_apply_overrides_to_config`,
  resolved with `hydra:` interpolations set for that cell. Same values, same errors as before.

Both paths give the same plain config, hence the same cell id (`tests/test_sweep.py` expands a
mixed grid both ways and compares).

A grid of group choices (the study preset: 9 networks × 5 frameworks × 6 hardware configurations,
270 keys) would still compose every key. Yet each group choice changes its own keys of the config:
so a key differing from the first composed key (the *reference*) in several group choices is
*factorized*: each change is composed alone (once: 1 + 8 + 4 + 5 compositions for the study), and
their differences from the reference are applied together to the reference's config, unresolved
and resolved alike. That is the config Hydra composes where no two changes touch one key, in the
unresolved config or in the resolved one (where an interpolation reads a key that one change
sets, its resolved value is part of that change: a value reading keys of two changes is an
overlap). Where two changes overlap, a change is not a group choice, or a defaults list of conf/
interpolates (a choice that depends on another), the key is composed whole, as before; and a
cell the fast path cannot take composes its key whole too. `tests/test_expand.py` compares a factorized grid with whole compositions.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from orchestrator.sweep.cell import CellError, check_choices, group_choices, resolved_config
from orchestrator.sweep.config_checks import CONF

_PLAIN = (str, int, float, bool, type(None))
#: `key=123`: a line whose value is a plain integer literal of Hydra's grammar (a seed, a batch
#: size), parsed here into the Override Hydra's parser makes of it (tests/test_sweep.py compares);
#: ANTLR's parse costs ~0.6 ms a line, and a sweep of 5,000 seeds has 5,000 distinct ones.
_INT_LINE = re.compile(r"([A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*)=(-?(?:0|[1-9][0-9]*))")


@dataclass
class Composed:
    """One composition key's config: composed once, resolved once (None where it does not resolve).
    `config` is None for a factorized key (composed whole only where a cell needs it)."""

    config: Optional[DictConfig]
    resolved: Optional[dict[str, Any]]
    interpolations: str  # every `${...}` text of the config, joined: what a value override may touch
    refused: Optional[str] = None  # why its group choices refuse every cell of it (cell.check_choices)
    raw: Optional[dict[str, Any]] = None  # the config without `hydra`, unresolved
    choices: Optional[dict[str, Any]] = None  # hydra.runtime.choices
    #: key -> whether a plain value set at it is what Hydra makes (Expander._settable): asked once
    #: per key, not per cell (a sweep of 10,000 seeds sets `seed` 10,000 times)
    settable: dict[str, bool] = dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Expanded:
    """One override list, expanded: its plain config (None with `error` where it does not
    resolve) and, where it took Hydra's path, its composed DictConfig."""

    overrides: tuple[str, ...]
    plain: Optional[dict[str, Any]]
    config: Optional[DictConfig] = None
    error: Optional[str] = None

    def as_config(self) -> DictConfig:
        """The cell's config as OmegaConf holds it (for what reads a config that did not resolve)."""
        return self.config if self.config is not None else OmegaConf.create(self.plain)


class Expander:
    """Expands override lists against the master config, composing each distinct key once."""

    def __init__(self, config_loader: Any, master_config: DictConfig) -> None:
        # lazy: Hydra's parser and config loader only where a sweep is expanded
        from hydra.core.override_parser.overrides_parser import OverridesParser

        self.loader, self.master = config_loader, master_config
        self.parser = OverridesParser.create(config_loader=config_loader)
        self.composed: dict[tuple[str, ...], Composed] = {}
        self.lines: dict[str, Any] = {}  # override line -> Hydra's Override
        self.groups: dict[str, bool] = {}  # key -> whether conf/ has a group of that name
        self.fast = self.slow = 0  # how many cells took each path (the benchmark prints them)
        self.reference: Optional[tuple[str, ...]] = None  # the first key composed whole
        self.factorized = 0  # how many keys were factorized
        self._factorable: Optional[bool] = None

    def expand(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int = 0) -> Iterator[Expanded]:
        for idx, overrides in enumerate(job_overrides):
            yield self.one(tuple(overrides), initial_job_idx + idx)

    def one(self, overrides: tuple[str, ...], job_num: int = 0) -> Expanded:
        parsed = [self.parse(line) for line in overrides]
        composes = [self._composes(o) for o in parsed]
        key = tuple(o.input_line for o, c in zip(parsed, composes) if c)
        values = [o for o, c in zip(parsed, composes) if not c]
        composed = self._composed(key)
        if composed.config is None and (composed.refused or composed.resolved is None
                                        or not all(self._settable(o, composed) for o in values)):
            composed = self.composed[key] = self._compose(list(key))  # this cell needs it whole
        if composed.refused:
            return Expanded(overrides, None, config=composed.config, error=composed.refused)
        if composed.resolved is not None and all(self._settable(o, composed) for o in values):
            self.fast += 1
            plain = composed.resolved
            for o in values:
                plain = _with(plain, o.key_or_group.split("."), o.value())
            return Expanded(overrides, plain)
        self.slow += 1
        return self._hydra_path(overrides, parsed, values, composed, job_num)

    def _composed(self, key: tuple[str, ...]) -> Composed:
        composed = self.composed.get(key)
        if composed is None:
            composed = self._factorize(key) or self._compose(list(key))
            self.composed[key] = composed
            if self.reference is None and composed.config is not None:
                self.reference = key
        return composed

    def _factorize(self, key: tuple[str, ...]) -> Optional[Composed]:
        """The key as the reference's config with each of its differing group choices' changes
        applied, where it can be (see the module's docstring); None where it must be composed whole."""
        ref_key = self.reference
        if ref_key is None or len(ref_key) != len(key):
            return None
        changed = [i for i, (a, b) in enumerate(zip(ref_key, key)) if a != b]
        if len(changed) < 2 or not self._can_factorize() or any(not self._same_group(self.parse(ref_key[i]), self.parse(key[i]))
                                   for i in changed):
            return None
        ref = self.composed[ref_key]
        alone = [self._composed(ref_key[:i] + (key[i],) + ref_key[i + 1:]) for i in changed]
        if any(c.raw is None or c.resolved is None or c.refused for c in (ref, *alone)):
            return None
        made = {}
        for part in ("raw", "resolved", "choices"):
            changes = [_changes(getattr(ref, part), getattr(c, part)) for c in alone]
            if _overlap(changes):
                return None  # two choices touch one key (or one's value reads what another changes)
            made[part] = functools.reduce(_applied, changes, getattr(ref, part))
        try:
            check_choices(made["choices"])
        except CellError:
            return None
        self.factorized += 1
        return Composed(config=None, interpolations="\n".join(_interpolations(made["raw"])), **made)

    def _same_group(self, a: Any, b: Any) -> bool:
        """Two choices of one config group, neither of them Hydra's own."""
        return (a.key_or_group == b.key_or_group and a.package == b.package and a.type == b.type
                and not a.is_delete() and not a.key_or_group.startswith("hydra")
                and self._composes(a) and self._composes(b))

    def _can_factorize(self) -> bool:
        """No defaults list of conf/ interpolates (a group choice that depends on another's)."""
        if self._factorable is None:
            texts = [p.read_text() for p in CONF.rglob("*.yaml")]
            self._factorable = not any("${" in str((yaml.safe_load(t) or {}).get("defaults", ""))
                                       for t in texts if "${" in t)  # (parsed only where one may be)
        return self._factorable

    def parse(self, line: str) -> Any:
        """Hydra's Override for one line (each distinct line parsed once)."""
        override = self.lines.get(line)
        if override is None:
            match = _INT_LINE.fullmatch(line)
            if match and not match.group(1).startswith("hydra"):
                # lazy: Hydra's parser and config loader only where a sweep is expanded
                from hydra.core.override_parser.types import Override, OverrideType, ValueType

                override = Override(type=OverrideType.CHANGE, key_or_group=match.group(1),
                                    value_type=ValueType.ELEMENT, _value=int(match.group(2)), package=None,
                                    input_line=line, config_loader=self.loader)
            else:
                (override,) = self.parser.parse_overrides([line])
            self.lines[line] = override
        return override

    def _composes(self, override: Any) -> bool:
        """A group choice (or a Hydra setting): part of what is composed, not a value set after."""
        key = override.key_or_group
        if override.package is not None or key == "hydra" or key.startswith(("hydra.", "hydra/")):
            return True
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = self.loader.repository.group_exists(key)
        return group

    def _compose(self, key: list[str]) -> Composed:
        # lazy: Hydra's parser and config loader only where a sweep is expanded
        from hydra.core.hydra_config import HydraConfig

        cfg = self.loader.load_sweep_config(self.master, key)
        app = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        texts = "\n".join(_interpolations(OmegaConf.to_container(app, resolve=False)))
        resolved = None
        if "hydra:" not in texts:  # ${hydra:job.num} and the like differ per cell: Hydra's path
            HydraConfig.instance().set_config(cfg)
            try:
                resolved = OmegaConf.to_container(app, resolve=True)
            except OmegaConfBaseException:
                resolved = None  # each cell then says so, on Hydra's path
        try:  # a group choice outside its folder refuses every cell of this composition
            check_choices(group_choices(cfg))
            refused = None
        except CellError as exc:
            refused = str(exc)
        return Composed(config=cfg, resolved=resolved, interpolations=texts, refused=refused,
                        raw=OmegaConf.to_container(app, resolve=False),
                        choices=OmegaConf.to_container(group_choices(cfg) or {}))

    @staticmethod
    def _settable(override: Any, composed: Composed) -> bool:
        """Whether setting this override's value on the resolved config is what Hydra would make:
        a plain `key=value` of a plain value, the key there already and not a mapping or list,
        and no interpolation of the config mentioning its last part."""
        if override.is_delete() or override.is_add() or override.is_force_add():
            return False
        value = override.value()
        if not isinstance(value, _PLAIN) or (isinstance(value, str) and "${" in value):
            return False
        key = override.key_or_group
        known = composed.settable.get(key)
        if known is None:
            known = composed.settable[key] = _plain_key(key, composed)
        return known

    def _hydra_path(self, overrides: tuple[str, ...], parsed: list[Any], values: list[Any], composed: Composed,
                    job_num: int) -> Expanded:
        """The cell as Hydra composes it: a copy of the composed config, the value overrides
        applied by Hydra (its errors raised as Hydra raises them), `hydra:` set for this cell."""
        # lazy: Hydra's parser and config loader only where a sweep is expanded
        from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
        from hydra.core.hydra_config import HydraConfig

        cfg = copy.deepcopy(composed.config)
        ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        task = [o for o in parsed if not o.is_hydra_override()]  # what Hydra records of the cell
        dirname = cfg.hydra.job.config.override_dirname
        with read_write(cfg.hydra.overrides), read_write(cfg.hydra.job), open_dict(cfg):
            cfg.hydra.overrides.task = [o.input_line for o in task]
            cfg.hydra.job.override_dirname = get_overrides_dirname(
                overrides=task, kv_sep=dirname.kv_sep, item_sep=dirname.item_sep, exclude_keys=dirname.exclude_keys)
            cfg.hydra.job.num = job_num
        HydraConfig.instance().set_config(cfg)
        try:
            return Expanded(overrides, resolved_config(cfg), config=cfg)
        except CellError as exc:
            return Expanded(overrides, None, config=cfg, error=str(exc))


def share_loaded_configs() -> None:
    """One cache of loaded YAML files for every composition in this process: Hydra's own two of
    the primary config (its mode, then the sweep's) and each of the expander's. Hydra makes a new
    cache per composition, so each reads and parses every file again: more than half of a
    composition's time. Each composition gets its own copy of a file's loaded config: Hydra
    merges a loaded config's nodes into the composition without copying them (its
    `no_deepcopy_set_nodes` flag) and then applies the overrides to that composition, so a
    shared one would carry one composition's values into the next (`input=pipeline` composed
    once, every later composition had it). A copy costs a fraction of reading and parsing.
    Keyed by the search path's sources too, so a composition that changes it
    (hydra.searchpath=...) reads its own files. Hydra 1.3.2's ConfigRepository.load_config,
    wrapped once (pyproject pins Hydra)."""
    # lazy: Hydra's parser and config loader only where a sweep is expanded
    from hydra._internal.config_repository import ConfigRepository

    load = ConfigRepository.load_config
    if getattr(load, "shared", False):
        return
    loaded: dict[tuple[Any, ...], Any] = {}

    def load_config(self: Any, config_path: str) -> Any:
        key = (tuple((type(s).__name__, s.provider, s.path) for s in self.sources), config_path)
        if key not in loaded:
            loaded[key] = load(self, config_path)
        kept = loaded[key]
        if kept is None:
            return None
        return dataclasses.replace(kept, config=copy.deepcopy(kept.config), header=dict(kept.header),
                                   defaults_list=copy.deepcopy(kept.defaults_list))

    load_config.shared = True  # type: ignore[attr-defined]
    ConfigRepository.load_config = load_config  # type: ignore[method-assign]


def _interpolations(node: Any) -> Iterator[str]:
    """Every string of a container that holds an interpolation."""
    if isinstance(node, dict):
        for value in node.values():
            yield from _interpolations(value)
    elif isinstance(node, list):
        for value in node:
            yield from _interpolations(value)
    elif isinstance(node, str) and "${" in node:
        yield node


#: A key a group choice's change removes.
_GONE = object()


def _changes(before: Any, after: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """path -> new value (or _GONE) of every leaf where `after` differs from `before`; a mapping
    on one side only, or a list, is one leaf."""
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return {} if before == after and type(before) is type(after) else {path: after}
    out: dict[tuple[str, ...], Any] = {}
    for key in before.keys() | after.keys():
        if key not in after:
            out[path + (key,)] = _GONE
        elif key not in before:
            out[path + (key,)] = after[key]
        else:
            out.update(_changes(before[key], after[key], path + (key,)))
    return out


def _overlap(changes: list[dict[tuple[str, ...], Any]]) -> bool:
    """Whether two of the change sets touch one key (the same path, or one inside the other)."""
    seen: list[tuple[str, ...]] = []
    for change in changes:
        for path in change:
            if any(path[:len(p)] == p or p[:len(path)] == path for p in seen):
                return True
        seen.extend(change)
    return False


def _applied(plain: dict[str, Any], change: dict[tuple[str, ...], Any]) -> dict[str, Any]:
    """`plain` with each path of `change` set to its value (or removed), the rest shared."""
    for path, value in change.items():
        plain = _with(plain, list(path), value)
    return plain


def _plain_key(key: str, composed: Composed) -> bool:
    """The key is in the resolved config already, not a mapping or list, and no interpolation of
    the config mentions its last part (Expander._settable's part that depends on the key alone)."""
    path = key.split(".")
    node: Any = composed.resolved
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    if isinstance(node, (dict, list)):
        return False
    return re.search(rf"(?<![\w-]){re.escape(path[-1])}(?![\w-])", composed.interpolations) is None


def _with(plain: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    """`plain` with the value at `path` replaced: the mappings along the path copied, the rest
    shared with the composition's resolved config and its other cells. Nothing downstream may
    write into a cell's config: a module that changes one makes its own copy (time_limits.learn
    returns new cells with a copied config and hardware; rerun deep-copies the recorded one)."""
    out = dict(plain)
    if len(path) > 1:
        out[path[0]] = _with(plain[path[0]], path[1:], value)
    elif value is _GONE:
        del out[path[0]]
    else:
        out[path[0]] = value
    return out
