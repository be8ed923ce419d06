"""Which folders of runs/ `collect` looks into (issue 35): a project's runs/ keeps every sweep it
ever ran, and on a network file system walking them all took minutes at 20,000 runs. The folder
of a sweep the launcher recorded whose runs are all collected holds nothing to land; every other
folder is looked into, and `--all` looks into all of them."""
import sqlite3

from sqlalchemy import event

from orchestrator.store import db
from orchestrator.results.collector import collect
from orchestrator.store.schema import Run, Sweep
from result_factory import make_result, write_result, write_text


def test_the_folder_of_a_recorded_sweep_whose_runs_are_all_collected_is_not_looked_into(tmp_path, db_url):
    runs = tmp_path / "runs"
    results = [make_result(sweep="s1", seed=i) for i in range(3)] + [make_result(sweep="s2", seed=9)]
    for r in results:
        write_result(runs, r)
    factory = db.open_db(db_url)
    with factory.begin() as session:  # s1 as the launcher records a sweep (its cells); s2 unknown to it
        session.add(Sweep(id="s1", created_at=1.0, argv=["orchestrator"], overrides=[], n_cells=3))
    first = collect(factory, runs)
    assert (first.added, first.already, first.broken) == (4, 0, [])
    for sweep in ("s1", "s2"):  # a file no run of the database has: only a look finds it
        write_text(runs, f"{sweep}/stray/0/result.json", "{")
    again = collect(factory, runs)
    assert (again.added, again.already) == (0, 4)
    assert [p.parts[-4] for p, _ in again.broken] == ["s2"]  # the collector's own sweep: looked into
    everything = collect(factory, runs, everything=True)
    assert (everything.added, everything.already) == (0, 4)
    assert sorted(p.parts[-4] for p, _ in everything.broken) == ["s1", "s2"]
    with factory.begin() as session:  # a run of s1 still to collect: its folder is looked into again
        session.add(Run(uid="s1:x:0:1", sweep_id="s1", cell_id=results[0]["cell_id"], repeat=5, attempt=1,
                        state="pending"))
    pending = collect(factory, runs)
    assert (pending.added, pending.already) == (0, 4)
    assert sorted(p.parts[-4] for p, _ in pending.broken) == ["s1", "s2"]


def test_a_thousand_sweep_folders_fit_an_sqlite_that_binds_999_variables(tmp_path):
    """SQLite before 3.32 (RHEL 8's 3.26) allows 999 variables per statement: the first look names
    every top-level folder of runs/, so it is asked in parts."""
    runs = tmp_path / "runs"
    for i in range(1000):
        (runs / f"sweep{i:04d}").mkdir(parents=True)
    write_result(runs, make_result(sweep="sweep0999", seed=1))
    factory = db.open_db(f"sqlite:///{tmp_path}/results.db")
    engine = factory.kw["bind"]
    event.listen(engine, "connect", lambda con, _: con.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999))
    engine.dispose()
    with factory.begin() as session:
        session.add_all(Sweep(id=f"sweep{i:04d}", created_at=1.0, argv=["orchestrator"], overrides=[], n_cells=1)
                        for i in range(1000))
    first = collect(factory, runs)
    assert (first.added, first.already, first.broken) == (1, 0, [])
    again = collect(factory, runs)  # sweep0999 now fully collected: counted without a look
    assert (again.added, again.already, again.broken) == (0, 1, [])


def test_a_database_restored_from_before_a_sweeps_last_run_is_told_to_collect_all(tmp_path):
    """A backup from before a sweep's last result landed, restored: its surviving runs are all
    collected, so a plain collect skips its folder; it says so, and --all lands the missing one."""
    runs = tmp_path / "runs"
    results = [make_result(sweep="s1", seed=i) for i in range(3)]
    for r in results[:2]:
        write_result(runs, r)
    factory = db.open_db(f"sqlite:///{tmp_path / 'results.db'}")  # a file, restored by copying it
    with factory.begin() as session:
        session.add(Sweep(id="s1", created_at=1.0, argv=["orchestrator"], overrides=[], n_cells=3))
    assert collect(factory, runs).hint() == ""
    _copy(tmp_path / "results.db", tmp_path / "backup.db")  # the nightly backup (SQLite's backup API)
    write_result(runs, results[2])  # (a run the launcher had not recorded: landed by looking)
    assert collect(factory, runs, everything=True).added == 1
    factory.kw["bind"].dispose()
    _copy(tmp_path / "backup.db", tmp_path / "results.db")  # restored
    restored = collect(factory, runs)
    assert (restored.added, restored.already) == (0, 2)
    assert restored.hint().startswith("1 sweep(s) (s1) hold fewer runs than cells and were not looked into")
    assert "orchestrator collect --all" in restored.hint() and "\n" not in restored.hint()
    everything = collect(factory, runs, everything=True)
    assert (everything.added, everything.already) == (1, 2)
    assert collect(factory, runs).hint() == ""


def _copy(source, target):
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
