"""orchestrator/sweep/expand.py: composing once per distinct configuration names the same cells, with
the same configs and the same refusals, as composing every cell through Hydra (issue 13, item 1)."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig

from orchestrator.sweep.cell import Cell, CellError
from orchestrator.sweep.expand import Expander

REPO = Path(__file__).resolve().parent.parent

# group choices, plain values, a value some interpolation reads (paths.cache: apptainer.images),
# a value that is itself an interpolation, a nested key inside a group, an added key, aliases
# (tf and tensorflow: one cell), cells refused (GPUs on CPU hardware, a bad integer)
GRID = [
    ["framework=torch", "framework=tf", "framework=tensorflow"],
    ["hardware=cpu12", "hardware=p100"],
    ["gpus=0", "gpus=1"],
    ["", "seed=2", "batch_size=16", "batch_size=-3", "threads=2", "hardware.cpus=4", "paths.cache=/tmp/elsewhere",
     "iterations=${warmup}", "model.batch_size.mnist=8", "+extra_key=1", "model=alexnet", "dataset.like=cifar10"],
]


@pytest.fixture(scope="module")
def hydra_loader():
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        master = compose("config", return_hydra_config=True)
        yield GlobalHydra.instance().config_loader(), master


def _plain(loader, master, overrides):
    """A cell the way the launcher made it before: Hydra composes this override list alone."""
    cfg = loader.load_sweep_config(master, list(overrides))
    HydraConfig.instance().set_config(cfg)
    try:
        return Cell.from_config(cfg, tuple(overrides))
    except CellError as exc:
        return str(exc)


def _fast(expander, overrides):
    expanded = expander.one(tuple(overrides))
    try:
        if expanded.error:
            raise CellError(expanded.error)
        return Cell.from_plain(expanded.plain, tuple(overrides))
    except CellError as exc:
        return str(exc)


def _as_hydra_makes_them(expander, loader, master, grid):
    """Expands each override list of `grid` both ways and asserts the same cell (id, settings,
    config) or the same refusal; the cells' ids and how many were refused."""
    ids, refused = set(), 0
    for overrides in grid:
        fast, plain = _fast(expander, overrides), _plain(loader, master, overrides)
        if isinstance(plain, str):
            assert fast == plain, overrides
            refused += 1
            continue
        assert isinstance(fast, Cell), (overrides, fast)
        assert (fast.id, fast.settings, fast.config) == (plain.id, plain.settings, plain.config), overrides
        ids.add(fast.id)
    return ids, refused


def test_the_fast_and_the_plain_expansion_name_the_same_cells(hydra_loader):
    loader, master = hydra_loader
    expander = Expander(loader, master)
    grid = [[o for o in combo if o] for combo in itertools.product(*GRID)]
    ids, refused = _as_hydra_makes_them(expander, loader, master, grid)
    # the grid exercised both paths, refusals and cells, and the aliases met
    assert expander.fast > 60 and expander.slow > 30, (expander.fast, expander.slow)
    assert refused > 30 and len(ids) < len(grid) - refused
    # one composition per distinct set of group choices, not one per cell
    assert len(expander.composed) == 3 * 2 * 2  # framework × hardware × (model default or alexnet)


def test_the_fast_path_takes_hydras_values(hydra_loader):
    loader, master = hydra_loader
    expander = Expander(loader, master)
    cell = Cell.from_plain(expander.one(("hardware=p100", "seed=7", "threads=null", "precision=fp32",
                                         "hardware.mem_gb=32")).plain)
    assert expander.slow == 0
    assert cell.settings["seed"] == 7 and cell.settings["threads"] == 16  # null: the hardware's CPUs
    assert cell.config["hardware"]["mem_gb"] == 32
    # a value another key interpolates is set before resolving, on Hydra's path
    moved = expander.one(("paths.cache=/tmp/elsewhere",))
    assert expander.slow == 1 and moved.plain["apptainer"]["images"] == "/tmp/elsewhere/images"


def test_the_fast_parse_of_an_integer_is_hydras(hydra_loader):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    loader, master = hydra_loader
    expander, parser = Expander(loader, master), OverridesParser.create(config_loader=loader)
    for line in ("seed=0", "seed=-0", "seed=12", "hardware.cpus=4", "x-y.z_1=10", "seed=007", "seed=1_000",
                 "seed=1e3", "seed=+5", "+seed=5", "~seed"):
        assert expander.parse(line) == parser.parse_overrides([line])[0], line


def test_a_wrong_key_fails_as_hydra_fails(hydra_loader):
    from hydra.errors import ConfigCompositionException

    loader, master = hydra_loader
    with pytest.raises(ConfigCompositionException, match="nosuchkey"):
        Expander(loader, master).one(("nosuchkey=3",))


def test_a_grid_of_group_choices_is_factorized_into_the_configs_hydra_composes(hydra_loader):
    """The study preset's grid (networks × frameworks × hardware configurations, each a group
    choice): each choice is composed alone, the rest factorized, and every cell is the one Hydra
    composes whole (the same id, settings and config, the same refusals)."""
    loader, master = hydra_loader
    expander = Expander(loader, master)
    nets, frameworks, ons = ["lenet_mnist", "vgg16_imagenet"], ["caffe", "torch", "cntk"], ["cpu12", "k20m_x2", "p100_x1"]
    grid = [["+preset=study", f"+preset/net={n}", f"framework={f}", f"+preset/on={o}", "cluster=slurm", "seed=1"]
            for n, f, o in itertools.product(nets, frameworks, ons)]
    _, refused = _as_hydra_makes_them(expander, loader, master, grid)
    assert refused == 0  # torch on a K20m takes its Kepler build (the study's preset.builds.k20m)
    # composed whole: the first key and each choice alone (1 + 1 + 2 + 2); the other 12 factorized
    assert expander.factorized == 12 and sum(c.config is not None for c in expander.composed.values()) == 6


def test_two_choices_that_touch_one_key_give_hydras_config(hydra_loader):
    """hardware= and +preset/on= both choose the hardware: whichever way the key is made, it is the
    config Hydra composes."""
    loader, master = hydra_loader
    expander = Expander(loader, master)
    for overrides in (["hardware=cpu12", "+preset/on=cpu12"], ["hardware=p100", "+preset/on=cpu20"],
                      ["hardware=p100", "+preset/on=k20m_x1"]):
        fast, plain = _fast(expander, overrides), _plain(loader, master, overrides)
        assert (fast.id, fast.config) == (plain.id, plain.config), overrides


def test_changes_that_touch_one_key_overlap():
    """Two choices' changes may be applied together only where no key is in both (or inside one the
    other replaces); a removed key is a change too."""
    from orchestrator.sweep.expand import _applied, _changes, _overlap

    ref = {"framework": {"name": "torch", "threads": 2}, "hardware": {"name": "cpu12"}, "label": "torch-cpu12"}
    fw = {"framework": {"name": "caffe"}, "hardware": {"name": "cpu12"}, "label": "caffe-cpu12"}
    hw = {"framework": {"name": "torch", "threads": 2}, "hardware": {"name": "p100", "gpus": 2}, "label": "torch-p100"}
    a, b = _changes(ref, fw), _changes(ref, hw)
    assert a == {("framework", "name"): "caffe", ("framework", "threads"): a[("framework", "threads")],
                 ("label",): "caffe-cpu12"}
    assert _overlap([a, b])  # both change `label` (an interpolation reading both groups' keys)
    del fw["label"], hw["label"], ref["label"]
    a, b = _changes(ref, fw), _changes(ref, hw)
    assert not _overlap([a, b])
    assert _applied(_applied(ref, a), b) == {"framework": {"name": "caffe"}, "hardware": {"name": "p100", "gpus": 2}}
    assert _overlap([{("hardware",): {}}, {("hardware", "name"): "x"}])  # one inside the other


def test_one_compositions_values_never_reach_the_next_through_the_shared_files():
    """share_loaded_configs keeps each YAML file loaded once per process; Hydra merges a loaded
    file's nodes into a composition without copying them and then sets the overrides on it, so a
    shared file once carried `input=pipeline` into every later composition (the cells of a
    sweep, a foreground run after a rerun's) until each composition got its own copy."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from orchestrator.sweep.expand import share_loaded_configs

    share_loaded_configs()
    GlobalHydra.instance().clear()  # another test's Hydra may be left initialized
    asked = [["framework=torch", "dataset=imagenet", "input=pipeline", "seed=11"], ["framework=numpy"]]
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf"), job_name="test"):
        first, second = (OmegaConf.to_container(compose("config", overrides=o), resolve=True) for o in asked)
    assert (first["input"], first["seed"]) == ("pipeline", 11)
    assert (second["input"], second["seed"]) == ("memory", 0), second


def test_a_launchs_memo_checks_each_shared_group_mapping_once_and_changes_no_cell(hydra_loader, monkeypatch):
    """Cells of one composition share their group mappings: with the launch's memo
    (cell.resolve_settings's `checked`) those are checked once per mapping, not per cell; a
    mapping that only equals a checked one (a cell's own hardware.cpus) is checked again, and
    the whole grid names the same cells and refusals with the memo as without it."""
    from orchestrator.sweep import cell as cell_module

    loader, master = hydra_loader
    calls = []
    check = cell_module._check_hardware
    monkeypatch.setattr(cell_module, "_check_hardware", lambda hardware: (calls.append(id(hardware)), check(hardware)))
    expander, memo = Expander(loader, master), {}
    seeds = [Cell.from_plain(expander.one(("hardware=p100", f"seed={i}")).plain, (), memo) for i in range(10)]
    assert len(calls) == 1 and len({c.id for c in seeds}) == 10
    with pytest.raises(CellError, match="hardware.cpus"):
        Cell.from_plain(expander.one(("hardware=p100", "hardware.cpus=0", "threads=1")).plain, (), memo)
    assert len(calls) == 2
    monkeypatch.setattr(cell_module, "_check_hardware", check)

    def both(overrides):
        expanded = expander.one(tuple(overrides))
        out = []
        for checked in (memo, None):
            try:
                if expanded.error:
                    raise CellError(expanded.error)
                made = Cell.from_plain(expanded.plain, tuple(overrides), checked)
                out.append((made.id, made.settings, made.config))
            except CellError as exc:
                out.append(str(exc))
        return out

    grid = [[o for o in combo if o] for combo in itertools.product(*GRID)]
    pairs = [both(overrides) for overrides in grid]
    assert all(with_memo == without for with_memo, without in pairs)
    assert sum(isinstance(a, str) for a, _ in pairs) > 30  # refusals met with the memo filled


def test_whether_a_key_takes_a_plain_value_is_asked_once_per_composition_not_per_cell(hydra_loader, monkeypatch):
    """A sweep of seeds sets `seed` on the same composition in every cell: whether that is what
    Hydra makes (the key's path, the interpolations that mention it) is worked out once; a key an
    interpolation reads still takes Hydra's path, every time."""
    import re

    loader, master = hydra_loader
    expander, searched = Expander(loader, master), []
    search = re.search
    monkeypatch.setattr(re, "search", lambda *a, **k: (searched.append(a[0]), search(*a, **k))[1])
    seeds = [expander.one(("hardware=p100", f"seed={i}")) for i in range(20)]
    assert expander.fast == 20 and len({e.plain["seed"] for e in seeds}) == 20
    assert sum("seed" in pattern for pattern in searched) == 1
    moved = [expander.one(("hardware=p100", f"paths.cache=/tmp/c{i}")) for i in range(2)]
    assert expander.slow == 2
    assert [m.plain["apptainer"]["images"] for m in moved] == ["/tmp/c0/images", "/tmp/c1/images"]
