"""A faster submission names the same cells and writes the same rows (issue 36, item 6's speed
goal): the ids and the recorded settings of a grid that holds every setting with a default, at it
and away from it, are pinned as main made them before the speed-ups, and a cell whose time limit
learn() writes keeps the id it had without hashing its settings again."""
import hashlib
import itertools
import json

from orchestrator import setting_registry
from orchestrator.launch.submit_plan import cell_rows
from orchestrator.sweep import time_limits
from orchestrator.sweep.cell import cell_id

from test_time_limits_sweep import _expanded

GRID = [
    ["framework=torch", "framework=tf"],
    ["hardware=cpu12"],
    ["", "seed=3", "nodes=1", "mode=accuracy", "mode=accuracy epochs=2", "input=memory", "threads=2",
     "batch_size=16", "model=alexnet", "dataset.like=cifar10"],
]
#: sha256 of the grid's (id, recorded settings) rows as main wrote them (commit 0ad7e48; 16 distinct
#: ids of 20 cells: nodes=1 and input=memory name the default cell); a change to conf/ may move it
PINNED = "ab303760576744bc7d99ede1ecea33745f5c9111750221b7bcbe4a191ebe3ce7"


def _grid():
    return [[o for part in combo for o in part.split() if o] for combo in itertools.product(*GRID)]


def test_the_grids_ids_and_recorded_settings_are_the_ones_main_wrote():
    cells = _expanded(_grid())
    new, members = cell_rows("s", cells, known=set(), planned=set())
    rows = sorted((row["id"], json.dumps(setting_registry.recorded(row["settings"]), sort_keys=True))
                  for row in new)
    assert len(rows) == len(cells) == len(members) == 20
    assert all(row["settings"] == setting_registry.recorded(cell.settings) for row, cell in zip(new, cells))
    assert hashlib.sha256(json.dumps(rows).encode()).hexdigest() == PINNED, rows


def test_a_learned_limit_keeps_the_cells_id_without_hashing_it_again():
    cells = _expanded(_grid()[:4])
    ids = [cell.id for cell in cells]
    learned = time_limits.learn(cells, None, lambda config: None, {})
    assert [cell.config is not old.config for cell, old in zip(learned, cells)] == [True] * 4
    assert all("id" in cell.__dict__ for cell in learned)  # carried over, not yet worked out again
    assert [cell.id for cell in learned] == ids == [cell_id(cell.settings) for cell in learned]
    assert [cell.settings for cell in learned] == [cell.settings for cell in cells]


def test_a_launch_resolves_its_cells_with_the_cycle_collector_paused_and_turns_it_on_again(monkeypatch):
    """The collector's passes over a launch's long-lived cells were a tenth of a 10,000-cell
    submission's CPU: paused while the cells are made, on again after, a refusal's exit too."""
    import gc

    import pytest

    from orchestrator import front_door
    from orchestrator.sweep.cell import CellError

    seen = []

    def resolve():
        seen.append(gc.isenabled())
        raise CellError("torch/lenet/mnist: refused for the test")

    froze, freeze = [], gc.freeze
    # counted, not read off gc.get_freeze_count(): frozen objects that die leave that count
    monkeypatch.setattr(gc, "freeze", lambda: (froze.append(1), freeze())[1])
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with pytest.raises(SystemExit, match="no cell of this sweep can be placed"):
        front_door.launch([front_door.Asked("seed=1", resolve, lambda: {})])
    assert seen == [False] and gc.isenabled()
    # what was alive before the launch is out of every later pass (Python's at exit included)
    assert froze == [1] and gc.get_freeze_count() > frozen
    # the foreground run's job runs in the launching process: the collector stays on for it
    with pytest.raises(SystemExit, match="no cell of this sweep can be placed"):
        front_door.launch([front_door.Asked("seed=1", resolve, lambda: {})], foreground=True)
    assert seen == [False, True] and gc.isenabled() and froze == [1]


def _launch_rows():
    """A launch's rows as submit_sweep makes them: the grid's cells, a membership whose cell the
    sweep skips (config NULL), runs (a float, a NULL, a Boolean, a JSON config)."""
    from orchestrator.launch.submit_plan import NEW_RUN_COLUMNS

    # distinct cells, as the launcher keeps them
    cells = list({cell.id: cell for cell in _expanded(_grid()[:10])}.values())[:6]
    new, members = cell_rows("s", cells, known=set(), planned={cell.id for cell in cells[1:]})
    runs = [{**dict.fromkeys(NEW_RUN_COLUMNS), "uid": f"u{i}", "sweep_id": "s", "cell_id": row["id"], "repeat": 0,
             "attempt": 1, "state": "pending", "state_detail": "submitting orch-s-1 0/6", "executor": "slurm",
             "run_dir": f"/runs/s/u{i}", "submitted_at": 1764.5 + i, "latest": True}
            for i, row in enumerate(new)]
    return new, members, runs


def test_the_launchs_inserts_write_the_rows_cores_insert_writes(db_url, other_db_url):
    """launch_records.insert_many and update_runs (SQLite: Core's statement, the driver's
    executemany, each parameter's bind processor) store what Core's executemany stores, byte for
    byte: every column of cells, sweep_cells and runs, the JSON text and the job ids included."""
    import time

    from sqlalchemy import bindparam, insert, text, update

    from orchestrator.store import db, launch_records, schema

    new, members, runs = _launch_rows()
    tables = ((schema.Cell.__table__, new), (schema.SweepCell.__table__, members), (schema.Run.__table__, runs))
    outcome = [{"b_uid": run["uid"], "state": "submitted", "job_id": f"9_{i}", "submitted_at": 1770.25,
                "state_detail": None} for i, run in enumerate(runs[:4])]  # what a submission's answer writes
    run_table = schema.Run.__table__
    core = (lambda s, t, rows: s.execute(insert(t), rows),
            lambda s, rows: s.execute(update(run_table).where(run_table.c.uid == bindparam("b_uid")), rows))
    dumps = []
    ours = (launch_records.insert_many, launch_records.update_runs)
    for url, (write, change) in ((db_url, core), (other_db_url, ours)):
        with db.open_db(url)() as session:
            session.add(schema.Sweep(id="s", created_at=time.time()))
            session.flush()
            for table, rows in tables:
                write(session, table, rows)
            change(session, outcome)
            session.commit()
            dumps.append([[tuple(r) for r in session.execute(text(
                f"SELECT * FROM {table.name} ORDER BY {', '.join(c.name for c in table.primary_key)}"))]
                for table, _ in tables])
    assert dumps[0] == dumps[1]
    assert [len(t) for t in dumps[0]] == [len(new), len(members), len(runs)] and len(new) == 6
    assert sum(row[-1] is None for row in dumps[1][1]) == 1  # the skipped cell's config: NULL, not 'null'
    assert sorted(v for row in dumps[1][2] for v in row if str(v).startswith('9_')) == ['9_0', '9_1', '9_2', '9_3']
