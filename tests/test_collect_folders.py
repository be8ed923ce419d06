"""Which folders of runs/ `collect` looks into (issue 35): a project's runs/ keeps every sweep it
ever ran, and on a network file system walking them all took minutes at 20,000 runs. The folder
of a sweep the launcher recorded whose runs are all collected holds nothing to land; every other
folder is looked into, and `--all` looks into all of them."""
from orchestrator import db
from orchestrator.collector import collect
from orchestrator.schema import Run, Sweep
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
