"""Each cell of a sweep learns its own time limit (issue 35, 1 and 8): cells made by
orchestrator/sweep/expand.py, which shares the unchanged parts of a composition's config between them,
against one earlier run in a real SQLite results database. The real-cluster half: test_slurm_limits.py."""
import math

import pytest
from hydra import compose, initialize_config_dir

from orchestrator.sweep import time_limits
from orchestrator.sweep.cell import Cell

from helpers import REPO


def _expanded(grid):
    """The cells of `grid` (override lists) as the launcher makes them: orchestrator/sweep/expand.py's
    Expander, which shares the unchanged parts of a composition's config between its cells."""
    from hydra.core.global_hydra import GlobalHydra

    from orchestrator.sweep.expand import Expander

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        master = compose("config", return_hydra_config=True)
        expander = Expander(GlobalHydra.instance().config_loader(), master)
        return [Cell.from_plain(expander.one(tuple(o)).plain, tuple(o)) for o in grid]


def _one_earlier_run(url, cell, wall_s, step_s):
    """One successful run of `cell` in a real results database: `wall_s` from start to end, its
    measured steps `step_s` each (the metric step_time_mean, as the collector records it)."""
    import time

    from orchestrator.store import db, schema

    with db.open_db(url).begin() as session:
        session.add(schema.Sweep(id="earlier", created_at=time.time(), argv=[], overrides=[], n_cells=1))
        session.add(schema.Cell(id=cell.id, settings=cell.settings, created_at=time.time(), **cell.settings))
        session.flush()
        run = schema.Run(uid=f"earlier:{cell.id}:0:1", sweep_id="earlier", cell_id=cell.id, repeat=0, attempt=1,
                         state="pending", executor="local")
        run.state, run.started_at, run.ended_at = "done", 1000.0, 1000.0 + wall_s
        session.add(run)
        session.flush()
        session.add(schema.Metric(run_id=run.id, name="step_time_mean", value=step_s, unit="s"))


def _learned(url, cells):
    from orchestrator.store import db
    from orchestrator.store.sql_adapters import Rows

    with db.open_db(url, create=False)() as session:
        return time_limits.learn(cells, Rows.of(session), lambda config: None, {})


@pytest.mark.parametrize("order", ["forward", "reversed"])
def test_each_cell_of_a_value_sweep_has_its_own_limit_in_either_order(tmp_path, order):
    """Issue 35, 1: a sweep of values only (batch_size, iterations, threads) shares its
    composition's config between cells; the first cell's learned limit held for all of them.
    One earlier 30 s run of the batch 64 / 12-thread cell (10 s of it 50 steps of 0.2 s)."""
    import copy

    grid = [["hardware=cpu12", f"batch_size={b}", f"threads={t}", f"iterations={i}"]
            for b in (64, 4096) for t in (12, 1) for i in (50, 5000)]
    cells = _expanded(grid if order == "forward" else grid[::-1])
    shared = [copy.deepcopy(c.config) for c in cells]
    url = f"sqlite:///{tmp_path}/results.db"
    ran = next(c for c in cells if c.overrides == tuple(grid[0]))
    _one_earlier_run(url, ran, 30.0, 0.2)
    by_overrides = {c.overrides: c.config["hardware"] for c in _learned(url, cells)}
    assert [c.config for c in cells] == shared  # nothing given was written (expand's shared dicts included)
    limits = {o[1:]: (h["time_min"], h["time_floor"], h["time_source"].split(" (")[0]) for o, h in by_overrides.items()}
    # its own history: 30 s -> ceil(0.5 x 1.5 + 1) = 2 min, --time-min ceil(0.5 x 1.4 + 1) = 2
    assert limits[("batch_size=64", "threads=12", "iterations=50")] == (2, 2, time_limits.SAME_CELL)
    # the others scaled: 20 s of start-up kept, each of their (10 + iterations) steps 0.2 s x 64 (batch) x 12 (threads)
    for (b, t, i), (minutes, floor, source) in limits.items():
        if (b, t, i) == ("batch_size=64", "threads=12", "iterations=50"):
            continue
        factor = int(b.split("=")[1]) / 64 * 12 / int(t.split("=")[1])
        seconds = 20 + 0.2 * factor * (10 + int(i.split("=")[1]))
        assert (minutes, floor, source) == (math.ceil(seconds / 60 * 1.5 + 1), None, time_limits.SIMILAR), (b, t, i)
    assert len({m for m, _, _ in limits.values()}) == 8  # eight cells, eight limits


def test_each_gpu_count_of_a_strong_scaling_sweep_has_its_own_limit(tmp_path):
    """gpus=1,2 under strong scaling, the 2-GPU cell run once: the 1-GPU cell steps through
    twice the samples per GPU (issue 35, 7: it was given the 2-GPU cell's limit, or the same work)."""
    grid = [["hardware=p100", f"gpus={g}", "batch_size=64"] for g in (2, 1)]
    url = f"sqlite:///{tmp_path}/results.db"
    for order in (grid, grid[::-1]):
        cells = _expanded(order)
        if order is grid:
            _one_earlier_run(url, cells[0], 20 * 60.0, 23.0)  # 50 steps of 23 s: 1,150 s of steps, 50 s start-up
        limits = {c.overrides[1]: c.config["hardware"]["time_min"] for c in _learned(url, cells)}
        # 2 GPUs: its own 20 min x 1.5 + 1; 1 GPU: 50 s + 60 steps x 46 s = 2,810 s = 46.8 min, x 1.5 + 1
        assert limits == {"gpus=2": 31, "gpus=1": 72}, limits


def test_history_rows_without_a_valid_wall_time_are_left_out_and_counted(tmp_path):
    from orchestrator.store import db

    (cell,) = _expanded([["hardware=cpu12"]])
    url = f"sqlite:///{tmp_path}/results.db"
    _one_earlier_run(url, cell, 30.0, 0.2)
    engine = db.open_db(url).kw["bind"]
    with engine.begin() as con:
        from sqlalchemy import text
        con.execute(text("INSERT INTO runs (uid, sweep_id, cell_id, repeat, attempt, state, started_at, ended_at, latest) "
                         "SELECT uid || 'x', sweep_id, cell_id, 1, 1, 'done', 2000, 1990, 1 FROM runs"))  # reversed
        con.execute(text("INSERT INTO runs (uid, sweep_id, cell_id, repeat, attempt, state, started_at, ended_at, latest) "
                         "SELECT uid || 'y', sweep_id, cell_id, 2, 1, 'done', 2000, NULL, 1 FROM runs WHERE repeat = 0"))
    (learned,) = _learned(url, [cell])
    hardware = learned.config["hardware"]
    assert hardware["time_min"] == 2 and "longest of 1 run(s): 30 s" in hardware["time_source"], hardware
    assert hardware["time_source"].endswith("; 2 run(s) without a valid wall time left out"), hardware


def test_the_foreground_dry_run_shows_the_learned_limit_its_source_and_the_rows_left_out(tmp_path):
    """Issue 35, 8: `dry_run=true` without -m showed `auto min` and no source."""
    from sqlalchemy import text

    from orchestrator.store import db
    from helpers import run_cli

    (cell,) = _expanded([["hardware=cpu12"]])
    url = f"sqlite:///{tmp_path}/results.db"
    _one_earlier_run(url, cell, 30.0, 0.2)
    with db.open_db(url).kw["bind"].begin() as con:  # one more run of it, its end before its start
        con.execute(text("INSERT INTO runs (uid, sweep_id, cell_id, repeat, attempt, state, started_at, ended_at, "
                         "latest) SELECT uid || 'x', sweep_id, cell_id, 1, 1, 'done', 2000, 1990, 1 FROM runs"))
    # time_limits.build_min=0: whether the shared environment is built yet is not this test's question
    done = run_cli(["hardware=cpu12", "dry_run=true", "time_limits.build_min=0"], tmp_path, ORCHESTRATOR_DB=url,
                   COLUMNS="400")
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    assert "2 min (--time-min 2)" in out and "auto min" not in out, done.stdout
    assert "same cell (longest of 1 run(s): 30 s); 1 run(s) without a valid wall time left out" in out, done.stdout


def _timed_out_run(url, cell, limit_min):
    """A timed-out attempt of `cell` at `limit_min` (its sweep's recorded config says so), that
    ran until the limit stopped it."""
    import time

    from orchestrator.store import db, schema

    with db.open_db(url).begin() as session:
        if session.get(schema.Cell, cell.id) is None:
            session.add(schema.Cell(id=cell.id, settings=cell.settings, created_at=time.time(), **cell.settings))
        session.add(schema.Sweep(id="timed", created_at=time.time(), argv=[], overrides=[], n_cells=1))
        session.flush()
        config = {**cell.config, "hardware": {**cell.config["hardware"], "time_min": limit_min}}
        session.add(schema.SweepCell(sweep_id="timed", cell_id=cell.id, config=config))
        run = schema.Run(uid=f"timed:{cell.id}:0:1", sweep_id="timed", cell_id=cell.id, repeat=0, attempt=1,
                         state="pending", executor="slurm")
        run.state = "submitted"
        run.state = "running"
        run.state, run.error_class, run.started_at, run.ended_at = "failed", "timeout", 5000.0, 5000.0 + 60 * limit_min - 20
        session.add(run)


def test_a_cell_whose_history_is_a_timeout_is_given_twice_the_limit_it_timed_out_at(tmp_path):
    """Issue 35 review, 4: cell X timed out at 240 min; cell Y (50 iterations) ran 30 s. Typed
    again, X was given Y's scaled guess, below what is known not to be enough."""
    x, y = _expanded([["hardware=cpu12", "iterations=50000"], ["hardware=cpu12", "iterations=50"]])
    url = f"sqlite:///{tmp_path}/results.db"
    _one_earlier_run(url, y, 30.0, 0.2)  # 50 steps of 0.2 s: trusted, 20 s start-up
    _timed_out_run(url, x, 240)
    lx, ly = _learned(url, [x, y])
    assert lx.config["hardware"]["time_min"] == 480, lx.config["hardware"]
    assert "timed out at 240 min before: at least twice that" in lx.config["hardware"]["time_source"]
    assert ly.config["hardware"]["time_min"] == 2  # its own run: the timeout is X's, not Y's


def test_the_left_out_count_is_said_of_its_own_cell_and_counts_not_toward_the_history(tmp_path):
    """Issue 35 review, 10: the count of a cell's invalid rows was said of every cell learned
    from the same names, and invalid rows filled limit_history's LIMIT in place of valid ones."""
    from sqlalchemy import text

    from orchestrator.store import db
    from orchestrator.store import run_history
    from orchestrator import runstate, setting_registry
    from orchestrator.store.sql_adapters import Rows

    a, b = _expanded([["hardware=cpu12", "iterations=50"], ["hardware=cpu12", "precision=bf16"]])
    url = f"sqlite:///{tmp_path}/results.db"
    _one_earlier_run(url, a, 30.0, 0.2)
    with db.open_db(url).kw["bind"].begin() as con:  # three runs of cell a, each ended before it started, newer
        for n in (1, 2, 3):
            con.execute(text("INSERT INTO runs (uid, sweep_id, cell_id, repeat, attempt, state, started_at, ended_at, "
                             f"latest) SELECT uid || '{n}', sweep_id, cell_id, {n}, 1, 'done', 9000, 8990, 1 FROM runs "
                             "WHERE repeat = 0"))
    la, lb = _learned(url, [a, b])
    assert la.config["hardware"]["time_source"].endswith("; 3 run(s) without a valid wall time left out")
    assert "left out" not in lb.config["hardware"]["time_source"], lb.config["hardware"]
    with db.open_db(url, create=False)() as session:
        found = run_history.limit_history(Rows.of(session), *(a.settings[k] for k in ("framework", "model", "dataset", "hardware")),
                                      setting_registry.NAMES, runstate.DONE, most=1)
    assert [float(r.wall_s) for r in found] == [30.0]


def test_a_sweeps_time_limit_options_are_read_once_per_mapping_and_a_bad_one_still_refused(monkeypatch):
    """learn() reads the `time_limits:` options once per mapping the cells share (a 10,000-cell
    sweep: one), not once per cell; a cell with its own mapping is read again, its bad value refused."""
    from orchestrator.sweep.config_checks import ConfigError

    cells = _expanded([["hardware=cpu12", f"seed={i}"] for i in range(5)])
    read = []
    options = time_limits.options
    monkeypatch.setattr(time_limits, "options", lambda config: (read.append(1), options(config))[1])
    learned = time_limits.learn(cells, None, lambda config: None, {})
    assert len(read) == 1 and [c.config["hardware"]["time_source"] for c in learned] == [time_limits.CEILING] * 5
    own = cells[0].with_config({**cells[0].config, "time_limits": {**cells[0].config["time_limits"], "safety": 0.5}})
    with pytest.raises(ConfigError, match="time_limits.safety"):
        time_limits.learn([*cells, own], None, lambda config: None, {})
    assert len(read) == 3
