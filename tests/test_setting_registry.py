"""The cell's settings are declared once (orchestrator/setting_registry.py): every place that names
them derives from it, existing cell ids do not change, and the trainer accepts what it is told."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from orchestrator.store import schema
from orchestrator.results import resultfile
from orchestrator import setting_registry
from orchestrator.sweep.cell import cell_id
from orchestrator.job.run import trainer_args
from orchestrator.setting_registry import SETTINGS

ROOT = Path(__file__).resolve().parent.parent
NAMES = set(setting_registry.NAMES)

BASE = dict(framework="torch", model="lenet", dataset="mnist", like=None, hardware="local", gpus=0, threads=2,
            batch_size=64, scaling="weak", iterations=50, warmup=10, seed=0, precision="fp32",
            mode=None, epochs=None, target_accuracy=None, input=None, phase=None, min_batches=None,
            min_seconds=None)


@pytest.mark.parametrize("settings, expected", [
    # ids computed by the cell.py of commit 39e1a2c, before the registry: they must never change
    (BASE, "f63572be9ce6"),
    ({**BASE, "mode": "accuracy", "epochs": 10, "dataset": "digits"}, "d7bbc22d2ee2"),
    ({**BASE, "mode": "accuracy", "epochs": 20, "target_accuracy": 0.9}, "2eb41bb365fb"),
    ({**BASE, "dataset": "imagenet", "model": "alexnet", "input": "pipeline", "batch_size": 32}, "239e2e8d2c0a"),
    ({**BASE, "dataset": "synthetic", "like": "cifar10", "gpus": 2, "framework": "tensorflow",
      "precision": "fp16"}, "130406c0698c"),
])
def test_existing_cell_ids_do_not_change(settings, expected):
    assert cell_id(settings) == expected


def test_a_setting_at_its_default_is_not_hashed():
    """A setting declared UNLESS_DEFAULT (added after cells existed) leaves a cell's id alone at its
    default and makes another cell away from it."""
    later = [s for s in SETTINGS if s.hashed == setting_registry.UNLESS_DEFAULT]
    assert later, "the registry has settings added after cells existed (mode, input)"
    for s in later:
        assert s.default is not None, s.name
        other = (next(c for c in s.choices if c != s.default) if s.choices
                 else s.default + "-other" if s.kind is str else s.default + 1)  # build: any other name
        assert cell_id({**BASE, s.name: s.default}) == cell_id(BASE)
        assert cell_id({**BASE, s.name: other}) != cell_id(BASE)



def test_a_setting_only_some_networks_take_is_hashed_where_taken():
    """seq_len (a sequence network's tokens per sequence) and a Transformer's layers, width and heads
    leave every other cell's id as it was before they existed, and tell two cells that take them apart."""
    taken = [s for s in SETTINGS if s.hashed == setting_registry.WHERE_TAKEN]
    assert [s.name for s in taken] == ["seq_len", "layers", "width", "heads"]
    assert cell_id({**BASE, "seq_len": None, "layers": None, "width": None, "heads": None}) == cell_id(BASE)
    lstm = {**BASE, "model": "lstm"}
    assert len({cell_id(lstm), cell_id({**lstm, "seq_len": 32}), cell_id({**lstm, "seq_len": 64})}) == 3
    gpt = {**BASE, "model": "gpt", "seq_len": 32, "layers": 2, "width": 64, "heads": 2}
    assert len({cell_id(gpt), cell_id({**gpt, "layers": 3}), cell_id({**gpt, "width": 128}),
                cell_id({**gpt, "heads": 4})}) == 4


def test_phase_train_keeps_every_cell_id_and_inference_hashes_its_rule():
    """phase=train (the default, stored None or given) keeps the ids pinned above; an inference cell
    hashes its phase and its rule (min_batches, min_seconds), which a train cell does not read."""
    assert cell_id({**BASE, "phase": "train"}) == cell_id(BASE) == "f63572be9ce6"
    assert cell_id({**BASE, "min_batches": 5, "min_seconds": 0.5}) == "f63572be9ce6"  # train: ignored
    inference = {**BASE, "phase": "inference", "min_batches": 64, "min_seconds": 10.0}
    assert cell_id(inference) not in (cell_id(BASE), cell_id({**inference, "min_batches": 65}),
                                      cell_id({**inference, "min_seconds": 1.0}))
    told = trainer_args(inference, None)
    assert told[told.index("--phase") + 1] == "inference" and told[told.index("--min-batches") + 1] == "64"
    told = trainer_args({**inference, "min_batches": 5, "min_seconds": 0.5}, None)
    assert told[told.index("--min-batches") + 1] == "5" and told[told.index("--min-seconds") + 1] == "0.5"
    assert not {"--phase", "--min-batches"} & set(trainer_args({**BASE, "min_batches": 5}, None))


def _declarations(text: str, label: str) -> list[str]:
    """Each tuple, list, set or dict literal in `text` naming five or more settings."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elts = node.elts
        elif isinstance(node, ast.Dict):
            elts = [k for k in node.keys if k is not None]
        else:
            continue
        named = {e.value for e in elts if isinstance(e, ast.Constant) and e.value in NAMES}
        if len(named) >= 5:
            found.append(f"{label}:{node.lineno} names {', '.join(sorted(named))}")
    return found


def test_no_collection_outside_the_registry_names_five_settings():
    """A tuple, list, set or dict literal naming five or more settings is a second declaration of
    them. Migrations are exempt: each is a frozen record of the schema at its revision."""
    modules = [p for p in (ROOT / "orchestrator").rglob("*.py")
               if p.name != "setting_registry.py" and "migrations" not in p.parts]
    assert len(modules) > 30
    found = [line for p in sorted(modules) for line in _declarations(p.read_text(), str(p.relative_to(ROOT)))]
    assert not found, "settings declared outside orchestrator/setting_registry.py:\n" + "\n".join(found)


def test_the_check_finds_a_second_declaration():
    text = 'KEYS = ("framework", "model", "dataset", "gpus", "seed")\nOK = {"framework": 1, "model": 2}\n'
    assert _declarations(text, "m.py") == ["m.py:1 names dataset, framework, gpus, model, seed"]


def test_every_setting_has_its_columns_and_result_field():
    """The `cells` table has a column per setting, `refusals` one per headline setting, the results
    view one per setting, and a result file's `cell` a field per setting."""
    assert set(schema.Cell.__table__.c.keys()) >= NAMES
    assert set(schema.Refusal.__table__.c.keys()) >= set(setting_registry.HEADLINE)
    assert set(schema.RESULTS_COLUMNS) >= NAMES
    assert set(resultfile.CELL_COLUMNS) | set(resultfile.OPTIONAL_CELL_COLUMNS) == NAMES
    for s in SETTINGS:
        column = schema.Cell.__table__.c[s.name]
        assert column.nullable == (s.nullable or s.hashed != setting_registry.ALWAYS), s.name


def test_the_trainer_accepts_every_flag_it_is_told():
    """Each setting passed to the trainer is an option of the trainer protocol's parser, with the same
    choices: the registry and trainers/common/protocol.py agree."""
    from trainers.common.protocol import build_parser

    parser = build_parser()
    options = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    for s in SETTINGS:
        flag = "--" + s.name.replace("_", "-")
        if not s.trainer_flag:
            continue
        assert flag in options, f"the trainer has no {flag}"
        if s.choices:
            assert set(options[flag].choices) == set(s.choices), s.name
    accuracy = {**BASE, "mode": "accuracy", "epochs": 3, "target_accuracy": 0.5}
    args = parser.parse_args(trainer_args(accuracy, "/tmp/data"))
    assert (args.mode, args.epochs, args.target_accuracy, args.data_dir) == ("accuracy", 3, 0.5, "/tmp/data")
    assert "--epochs" not in trainer_args({**BASE, "epochs": 3}, None)
    assert "--input" not in trainer_args({**BASE, "input": "memory"}, None)


def test_the_trainer_run_by_hand_defaults_as_the_grid_does():
    """A trainer started without a flag measures what a cell left at conf/config.yaml's default
    does (its --iterations once defaulted to 100, the grid's to 50): every grid key the trainer also
    takes has one default, and the registry's defaults and choices are the trainer's."""
    import yaml

    from trainers.common import settings
    from trainers.common.protocol import build_parser

    grid = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())
    parser = build_parser()
    parsed = vars(parser.parse_args(["--model", "lenet", "--dataset", "mnist", "--batch-size", "8"]))
    given = ("batch_size",)  # required of the trainer; the grid's null is the model's own default
    shared = {name: parsed[name] for name in grid if name in parsed and name not in given}
    assert len(shared) >= 12, shared
    assert shared == {name: grid[name] for name in shared}  # the trainer's defaults are the grid's
    assert set(shared) == set(settings.DEFAULTS) and shared == settings.DEFAULTS
    options = {a.dest: a for a in parser._actions}
    for s in SETTINGS:
        if s.name in settings.BY_NAME:
            assert tuple(s.choices) == tuple(options[s.name].choices or ()), s.name
            assert s.default in (None, parsed[s.name]), s.name


def test_a_null_target_is_told_to_the_trainer_whose_default_is_a_target():
    """target_accuracy=null (no target) reaches the trainer as `--target-accuracy none`, not as
    silence, which would now mean the default 0.9; throughput mode tells it nothing."""
    from trainers.common.protocol import build_parser

    accuracy = {**BASE, "mode": "accuracy", "epochs": 3, "target_accuracy": None}
    told = trainer_args(accuracy, "/tmp/data")
    assert told[told.index("--target-accuracy") + 1] == "none"
    assert build_parser().parse_args(told).target_accuracy is None
    assert "--target-accuracy" not in trainer_args(BASE, None)
    assert build_parser().parse_args(trainer_args(BASE, None)).target_accuracy == 0.9


def test_the_trainers_help_says_what_none_means_for_the_target():
    """--help spells the null target's flag value and its meaning: `none: no target` (it read
    "(none: none)")."""
    from trainers.common.protocol import build_parser

    text = " ".join(build_parser().format_help().split())
    assert "are reported (none: no target)" in text, text


def test_refused_and_expanded_cells_read_defaults_the_same_way():
    """read_settings is the one default rule: a config that resolves gives the refusal record the
    settings expansion gives the cell."""
    from omegaconf import OmegaConf

    from orchestrator.sweep.cell import lookup, resolve_settings
    from orchestrator.launch.submit_refusals import refusal_settings

    plain = {"framework": {"name": "torch"}, "model": {"name": "lenet", "batch_size": {"mnist": 64}},
             "dataset": {"name": "mnist"}, "hardware": {"name": "local", "cpus": 3}, "cluster": {"name": "local"}, "gpus": 0, "threads": None,
             "batch_size": None, "scaling": "weak", "iterations": 5, "warmup": 1, "seed": 0, "precision": "fp32"}
    read = setting_registry.read_settings(lambda path: lookup(plain, path))
    assert read["threads"] == 3 and read["batch_size"] == 64 and read["mode"] == "throughput"
    refused = refusal_settings(OmegaConf.create(plain))
    assert refused["mode"] is None and refused["input"] is None  # at their defaults: None, as stored
    assert refused == {name: setting_registry.stored(name, value) for name, value in read.items()}
    assert setting_registry.recorded(resolve_settings(plain)) == refused  # a record of the same values


#: override lines and the ids main's cell.py gave their cells (commit b74db17, before a cell's
#: settings held their defaults): resolution filling every default must not change one
COMPOSED_IDS = [
    (["framework=torch", "model=lenet", "dataset=mnist", "threads=2"], "240a93cd2dc8"),
    (["framework=torch", "model=lenet", "dataset=mnist", "threads=2", "nodes=1", "mode=throughput", "input=memory"],
     "240a93cd2dc8"),
    (["framework=torch", "model=lenet", "dataset=mnist", "threads=2", "nodes=2", "cluster=slurm"], "8fa446e66171"),
    (["framework=torch", "model=alexnet", "dataset=imagenet", "input=pipeline", "threads=2"], "92d222731193"),
    (["framework=torch", "model=lenet", "dataset=digits", "mode=accuracy", "epochs=3", "threads=2"], "246609ee3c0d"),
    (["framework=numpy", "model=lenet", "dataset=mnist", "threads=1", "seed=3"], "ee22111e4b35"),
    (["framework=tensorflow", "model=lenet", "dataset=synthetic", "dataset.like=cifar10", "batch_size=16", "threads=2"],
     "2a998f449883"),
]


@pytest.mark.parametrize("overrides, expected", COMPOSED_IDS)
def test_a_resolved_cell_holds_every_default_and_keeps_its_id(overrides, expected):
    """Resolution fills each setting's default into the cell (no reader re-defaults: `nodes` is 1,
    not None), while the id still leaves a setting at its default out, as it did."""
    from orchestrator.sweep.cell import Cell

    from helpers import composed

    cell = Cell.from_plain(composed(overrides), tuple(overrides))
    assert cell.id == expected
    given = dict(o.split("=", 1) for o in overrides)
    assert cell.settings["nodes"] == int(given.get("nodes", 1))
    assert cell.settings["mode"] == given.get("mode", "throughput")
    assert cell.settings["input"] == given.get("input", "memory")
    # a record keeps None at a default (as before); its read fills it back from the declaration
    recorded = setting_registry.recorded(cell.settings)
    assert recorded["nodes"] == (None if cell.settings["nodes"] == 1 else cell.settings["nodes"])
    assert setting_registry.filled(recorded) == cell.settings


def test_a_rerun_picks_by_a_setting_a_record_keeps_as_none(tmp_path):
    """`rerun --where nodes=1` finds a one-node cell, whose record keeps None for nodes (as every
    cell made before nodes existed does): the read fills the default, as the `results` view does."""
    from helpers import orchestrator, record_failed, user_dir
    from trainers.common import failure_classes

    workdir = user_dir(tmp_path)
    workdir[1]["ORCHESTRATOR_CACHE"] = str(tmp_path / "cache")
    [mine] = record_failed(workdir[1]["ORCHESTRATOR_DB"], [(["framework=numpy", "model=lenet", "threads=1"],
                                                           failure_classes.CRASH, __import__("getpass").getuser())])
    for where, found in (("nodes=1", True), ("mode=throughput", True), ("nodes=2", False)):
        dry = orchestrator(["rerun", "--failed", "--dry-run", "--where", where], workdir)
        assert dry.returncode == 0, dry.stderr
        assert (mine in dry.stdout) is found and ("nothing to rerun" in dry.stdout) is not found, (where, dry.stdout)
