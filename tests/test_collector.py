"""The collector on real result files and real databases (`db_url`: SQLite files and PostgreSQL
databases), including two collectors at once, and four `orchestrator collect` processes."""
import json
import multiprocessing
import re
import shutil
from pathlib import Path

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.exc import DBAPIError

from orchestrator.store import db
from orchestrator.results.collector import collect
from orchestrator.store.schema import Cell, Metric, Run, Sweep, SweepCell
from db_urls import execute, is_sqlite, query
from result_factory import make_result, write_result, write_text


def three_results(runs: Path):
    """Two finished runs of different cells and one failed run, as jobs leave them."""
    return [
        write_result(runs, make_result(model="lenet")),
        write_result(runs, make_result(model="alexnet", batch_size=128, metrics={"images_per_sec": 50.0})),
        write_result(runs, make_result(model="vgg16", state="failed")),
    ]


def test_collect_lands_runs_metrics_and_view_rows(tmp_path, db_url):
    runs = tmp_path / "runs"
    paths = three_results(runs)
    Session = db.open_db(db_url)

    report = collect(Session, runs)

    assert (report.added, report.already, report.broken) == (3, 0, [])
    with Session() as s:
        lenet = s.scalar(select(Run).join(Cell).where(Cell.model == "lenet"))
        assert lenet.state == "done" and lenet.collected_at is not None
        assert (lenet.node, lenet.job_id, lenet.executor) == ("node01", "4242", "local")
        assert (lenet.params, lenet.framework_version) == (61706, "2.3.1")
        # provenance: where and with what it was measured
        assert lenet.framework_build == {"cuda": None} and lenet.environment == "sif:sha256:0123456789abcdef"
        assert lenet.cpu_model.startswith("Intel(R) Xeon(R) CPU E5-2680") and (lenet.cpu_cores, lenet.cpu_threads) == (28, 16)
        assert (lenet.gpu_name, lenet.gpu_uuids) == ("Tesla P100-PCIE-16GB", "GPU-1111")
        assert (lenet.gpu_driver, lenet.cuda_driver) == ("535.104.05", "12.2")
        assert lenet.git_revision.startswith("3cdf11e") and lenet.git_dirty is False
        assert (lenet.slurm_job_id, lenet.exclusive) == ("4242_3", True)
        assert lenet.provenance["node"] == "node01" and lenet.energy_method is None
        assert lenet.started_at == 1_700_000_000.0 and lenet.ended_at == 1_700_000_100.0
        assert lenet.result_path == str(paths[0].resolve())
        assert lenet.run_dir == str(paths[0].parent.resolve())
        assert lenet.log_path == str(paths[0].parent.resolve() / "trainer.log")
        metrics = {m.name: (m.value, m.unit) for m in lenet.metrics}
        assert len(metrics) == 12
        assert metrics["images_per_sec"] == (1000.0, "img/s")
        assert metrics["rss_peak_bytes"] == (512 * 2**20, "B")
        assert metrics["step_time_mean"] == (0.064, "s")

        vgg = s.scalar(select(Run).join(Cell).where(Cell.model == "vgg16"))
        assert vgg.state == "failed" and vgg.error_class == "out_of_memory"
        assert vgg.error_message.startswith("CUDA out of memory.") and vgg.metrics == []
        assert vgg.params is None

        # the launcher never recorded this sweep: the collector made a minimal one, and linked its cells
        sweep = s.get(Sweep, "sweep-a")
        assert "created by the collector" in sweep.note
        assert s.scalar(select(func.count()).select_from(SweepCell)) == 3
        cell = s.get(Cell, lenet.cell_id)
        assert cell.settings["model"] == "lenet" and cell.batch_size == 64 and cell.like is None

    rows = query(db_url, "select model, state, images_per_sec, peak_rss_mb from results order by model")
    assert rows == [("alexnet", "done", 50.0, None), ("lenet", "done", 1000.0, 512.0), ("vgg16", "failed", None, None)]


def test_a_nul_in_a_result_files_text_lands_as_a_replacement_character(tmp_path, db_url):
    """A trainer's stderr tail may hold a NUL (JSON's \\u0000): PostgreSQL's text holds none, so the
    run counted as broken and never landed there; it lands, on both databases, with U+FFFD in its
    place (keys and nested values too)."""
    runs = tmp_path / "runs"
    result = make_result(model="vgg16", state="failed",
                         error={"class": "crash", "message": "bad\x00byte\ntail"})
    result["provenance"] = {**result.get("provenance", {}), "note\x00": ["n\x00de"]}
    write_result(runs, result)
    Session = db.open_db(db_url)
    report = collect(Session, runs)
    assert (report.added, report.broken) == (1, [])
    with Session() as s:
        run = s.scalar(select(Run))
        assert run.error_message == "bad\ufffdbyte\ntail"
        assert run.provenance["note\ufffd"] == ["n\ufffdde"]


def test_a_run_the_launcher_recorded_is_updated_in_place(tmp_path, db_url):
    runs = tmp_path / "runs"
    result = make_result(model="lenet")
    write_result(runs, result)
    Session = db.open_db(db_url)
    with Session.begin() as s:
        s.add(Sweep(id="sweep-a", created_at=1.0, argv=["-m", "model=lenet"], overrides=[["model=lenet"]],
                    n_cells=1, note=None))
        s.add(Cell(id=result["cell_id"], settings=result["cell"], created_at=1.0, **result["cell"]))
        s.flush()
        s.add(SweepCell(sweep_id="sweep-a", cell_id=result["cell_id"]))
        run = Run(uid=result["run_uid"], sweep_id="sweep-a", cell_id=result["cell_id"], repeat=0, attempt=1,
                  state="pending", job_id="4242", submitted_at=5.0)
        run.state, run.state_detail = "running", "on node01"  # as the launcher and tracking move it
        s.add(run)

    assert collect(Session, runs).added == 1

    with Session() as s:
        (run,) = s.scalars(select(Run)).all()
        assert run.state == "done" and run.state_detail is None
        assert run.submitted_at == 5.0 and run.collected_at is not None
        assert s.get(Sweep, "sweep-a").argv == ["-m", "model=lenet"]  # the launcher's record kept
        assert s.get(Sweep, "sweep-a").note is None


def test_collecting_twice_adds_nothing_even_from_a_moved_tree(tmp_path, db_url):
    runs = tmp_path / "runs"
    three_results(runs)
    Session = db.open_db(db_url)
    assert collect(Session, runs).added == 3

    again = collect(Session, runs)
    assert (again.added, again.already, again.broken) == (0, 3, [])
    # the same runs copied elsewhere (e.g. rsynced off the cluster) are recognised by their uid
    moved = tmp_path / "copy"
    shutil.copytree(runs, moved)
    third = collect(Session, moved)
    assert (third.added, third.already) == (0, 3)
    with Session() as s:
        assert s.scalar(select(func.count()).select_from(Run)) == 3
        assert s.scalar(select(func.count()).select_from(Metric)) == 12 + 1


def test_recollecting_after_a_reset_replaces_metrics(tmp_path, db_url):
    runs = tmp_path / "runs"
    path = write_result(runs, make_result(metrics={"images_per_sec": 1.0}))
    Session = db.open_db(db_url)
    collect(Session, runs)
    fixed = json.loads(path.read_text())
    fixed["metrics"] = {"images_per_sec": 2.0, "images_per_sec_std": 0.5}
    path.write_text(json.dumps(fixed))
    with Session.begin() as s:
        s.execute(update(Run).values(collected_at=None))
    assert collect(Session, runs).added == 1
    with Session() as s:
        assert dict(s.execute(select(Metric.name, Metric.value)).all()) == {
            "images_per_sec": 2.0, "images_per_sec_std": 0.5}


def test_broken_files_are_reported_left_in_place_and_do_not_stop_the_rest(tmp_path, db_url):
    runs = tmp_path / "runs"
    good = three_results(runs)
    valid = json.dumps(make_result(model="googlenet"))
    broken = {
        write_text(runs, "sweep-a/x1/0/result.json", valid[: len(valid) // 2]): "truncated JSON",
        write_text(runs, "sweep-a/x2/0/result.json", "Traceback (most recent call last):\n"): "not JSON",
        write_text(runs, "sweep-a/x3/0/result.json", ""): "empty file",
        write_text(runs, "sweep-a/x4/0/result.json",
                   json.dumps({k: v for k, v in make_result(model="resnet50").items() if k != "cell"})):
            "missing key 'cell'",
        write_text(runs, "sweep-a/x5/0/result.json", json.dumps({**make_result(model="resnet50"), "schema": 2})):
            "schema 2 is not 1",
        write_text(runs, "sweep-a/x6/0/result.json", json.dumps({**make_result(model="resnet50"), "repeat": "0"})):
            "'repeat' is a string \"0\", expected an integer",
        write_text(runs, "sweep-a/x7/0/result.json",
                   json.dumps(make_result(model="resnet50", metrics={"images_per_sec": float("nan")}))):
            "NaN is not a JSON number",
        write_text(runs, "sweep-a/x8/0/result.json", json.dumps([1, 2])): "top level is an array, expected an object",
        write_text(runs, "sweep-a/x9/0/result.json",
                   json.dumps({**make_result(model="resnet50"), "run_uid": "other:uid:0:1"})):
            "does not match sweep_id:cell_id:repeat:attempt",
        # hostile files, sorted before the valid ones: each is reported and every later file lands
        write_text(runs, "sweep-a/0a/0/result.json", "[" * 100_000 + "]" * 100_000): "nested deeper than 32",
        write_text(runs, "sweep-a/0b/0/result.json", json.dumps({**make_result(model="resnet50"), "repeat": 10**30})):
            "outside the database's integer range",
        write_text(runs, "sweep-a/0c/0/result.json",
                   json.dumps(make_result(model="resnet50", metrics={"images_per_sec": 10**400}))):
            "metric values must be finite numbers",
        write_text(runs, "sweep-a/0d/0/result.json",
                   json.dumps({**make_result(model="resnet50"), "provenance": json.loads("{\"a\":" * 40 + "1" + "}" * 40)})):
            "nested deeper than 32",
        write_text(runs, "sweep-a/0e/0/result.json", " " * (9 * 2**20)): "more than the 8,388,608",
    }
    before = {p: p.read_bytes() for p in broken}
    # a job's temporary file, not yet renamed into place, is not a result
    write_text(runs, "sweep-a/x10/0/result.json.tmp", valid[:10])

    Session = db.open_db(db_url)
    report = collect(Session, runs)

    assert report.added == len(good) and report.already == 0
    reasons = dict(report.broken)
    assert set(reasons) == set(broken), "every broken file reported, the .tmp file not"
    for path, expected in broken.items():
        assert expected in reasons[path], (path, reasons[path])
        assert path.read_bytes() == before[path]  # left in place, untouched

    # fixing one lands it on the next collection; nothing was lost
    (runs / "sweep-a/x1/0/result.json").write_text(valid)
    second = collect(Session, runs)
    assert (second.added, second.already, len(second.broken)) == (1, 3, len(broken) - 1)


def _collect_in_process(url: str, runs: str, batch: int, start, queue, turns, which: int) -> None:
    """One collector process: open the (possibly fresh) DB, wait for the other, collect. With
    `turns` (a barrier of two), the two land their batches in rounds, see two_collectors_at_once."""
    Session = db.open_db(url)
    if turns is not None:
        from types import SimpleNamespace

        from orchestrator.results import collector

        land = collector._land

        def land_then_wait(*args):
            land(*args)
            turns.wait(timeout=120)

        collector._land = land_then_wait  # this process's module: the other's is its own
        collector.random = SimpleNamespace(randrange=lambda n: which * n // 2)  # starts half the batches apart
    start.wait(timeout=30)
    report = collect(Session, Path(runs), batch_size=batch)
    queue.put((report.added, report.already, [str(p) for p, _ in report.broken]))


def two_collectors_at_once(url: str, runs: Path, batch: int, timeout: float = 60,
                           in_rounds: bool = False) -> list[tuple]:
    """Two collector processes started together on `url` and `runs` (batches of `batch`): each
    one's (added, already, broken paths), once both ended well.

    `in_rounds`: each lands its k-th batch, then waits for the other to have landed its k-th, and
    they start half the batches apart (as collect's random start means them to). Left alone, the
    two need not interleave at all: SQLite's busy handler is not fair, and a writer that commits
    every few milliseconds takes the lock again before the one waiting wakes from its back-off
    sleep, so on a loaded machine one collector can land every batch before the other lands one.
    In rounds, both land runs of the same cells in every round, their transactions begun together."""
    ctx = multiprocessing.get_context("spawn")
    start, queue = ctx.Barrier(2), ctx.Queue()
    turns = ctx.Barrier(2) if in_rounds else None
    procs = [ctx.Process(target=_collect_in_process, args=(url, str(runs), batch, start, queue, turns, which))
             for which in range(2)]
    for p in procs:
        p.start()
    try:
        outcomes = [queue.get(timeout=timeout) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():  # only on failure: do not leave a stuck collector behind
                p.terminate()
    assert [p.exitcode for p in procs] == [0, 0]
    return outcomes


@pytest.mark.parametrize("batch", [500, 3])  # all in one batch each; batches that interleave
def test_two_collectors_at_once_land_each_run_exactly_once(tmp_path, db_url, batch):
    runs = tmp_path / "runs"
    n = 24
    for i in range(n):  # many runs of few cells, so both collectors race for the same sweep/cells
        write_result(runs, make_result(model=("lenet", "alexnet", "vgg16")[i % 3], repeat=i // 3))
    url = db_url  # not made yet (no file, or no tables): both processes make it at once
    outcomes = two_collectors_at_once(url, runs, batch)

    assert sum(added for added, _, _ in outcomes) == n
    assert all(added + already == n and broken == [] for added, already, broken in outcomes)
    assert query(url, "select count(*), count(distinct uid), count(collected_at) from runs") == [(n, n, n)]
    assert query(url, "select count(*) from metrics") == [(n * 12,)]
    assert query(url, "select count(*) from sweeps") == [(1,)]
    assert query(url, "select count(*) from cells") == [(3,)]
    assert query(url, "select count(*) from results") == [(n,)]


def test_a_collect_killed_mid_way_and_run_again_lands_every_run_once(tmp_path, db_url):
    """`orchestrator collect` SIGKILLed three times while it lands 600 runs, then run to its end:
    every run lands once, with all its metrics (one transaction per batch of 10 files, each run
    claimed by one UPDATE)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    runs, n = tmp_path / "runs", 600
    for i in range(n):
        write_result(runs, make_result(model=("lenet", "alexnet")[i % 2], repeat=i // 2))
    env = {**os.environ, "ORCHESTRATOR_DB": db_url, "ORCHESTRATOR_RUNS": str(runs)}

    def collected():
        return query(db_url, "select count(*) from runs where collected_at is not null")[0][0]

    def landed_so_far():
        if is_sqlite(db_url) and not (tmp_path / "results.db").exists():
            return 0
        try:
            return collected()
        except DBAPIError:  # no runs table yet
            return 0

    argv = [sys.executable, "-m", "orchestrator", "collect", "--batch", "10"]
    landed = []
    for _ in range(3):
        proc = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        before = landed[-1] if landed else 0
        # It runs in slices of ~20 ms and its progress is read while it stands stopped, so it is
        # killed at the first slice that landed something and can never run on to the end
        # between the read and the kill, however slow a loaded machine makes the read.
        while proc.poll() is None:
            os.kill(proc.pid, signal.SIGSTOP)
            if landed_so_far() > before:
                break
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.02)
        proc.kill()
        proc.wait()
        landed.append(collected())
        assert landed[-1] < n, landed  # it stopped mid-way, not at its end
    assert landed == sorted(landed) and landed[0] > 0, landed  # each landed some, none lost any
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"{n - landed[-1]} added, {landed[-1]} already"), done.stdout
    assert query(db_url, "select count(*), count(distinct uid), count(collected_at) from runs") == [(n, n, n)]
    assert query(db_url, "select count(*) from metrics") == [(n * 12,)]


def test_a_gpu_run_lands_its_energy_method_and_gpu_columns(tmp_path, db_url):
    runs = tmp_path / "runs"
    result = make_result(gpus=1, metrics={"images_per_sec": 2065.9, "gpu_power_avg_w": 597.0,
                                          "gpu_idle_power_w": 78.6, "energy_j": 11112.5, "energy_net_j": 9649.0,
                                          "energy_per_image_j": 0.289, "images_per_sec_per_w": 3.46,
                                          "gpu_mem_peak_bytes": 14550 * 2**20, "gpu_util_avg": 98.9})
    result["energy"] = {"method": "counter", "samples": 516, "period_s": 0.1, "idle_s": 5.0}
    write_result(runs, result)
    Session = db.open_db(db_url)
    assert collect(Session, runs).added == 1
    (row,) = query(db_url, "select energy_method, gpu_name, gpu_power_avg_w, gpu_idle_power_w, energy_net_j, "
                           "images_per_sec_per_w, gpu_mem_peak_mb, gpu_util, git_dirty from results")
    assert row == ("counter", "Tesla P100-PCIE-16GB", 597.0, 78.6, 9649.0, 3.46, 14550.0, 98.9, 0)


def test_a_run_across_nodes_lands_its_nodes_addresses_in_rank_order(tmp_path, db_url):
    """result.json's `nodes[].addr` become runs.node_addrs (the report tells emulated nodes
    sharing one host by them); a run on one node, or a node without an address, leaves it null."""
    runs = tmp_path / "runs"
    for model, addrs in (("lenet", ["10.0.0.2", "10.0.0.1"]), ("alexnet", ["127.0.0.1", None]), ("vgg16", None)):
        result = make_result(model=model, nodes=2 if addrs else None)
        if addrs:
            result["nodes"] = [{"node": f"node{k + 1}", "rank": k, "addr": a} for k, a in enumerate(addrs)]
        write_result(runs, result)
    assert collect(db.open_db(db_url), runs).added == 3
    assert query(db_url, "select model, node_addrs from runs join cells on cells.id = runs.cell_id "
                         "order by model") == [("alexnet", None), ("lenet", "10.0.0.2,10.0.0.1"), ("vgg16", None)]


def test_a_file_the_database_refuses_in_a_batch_loses_none_of_the_others(tmp_path, db_url):
    """The batch it was in rolls back; each of its files then lands alone: that one is reported
    broken (with the database's reason, tried twice), the rest land with their metrics."""
    runs = tmp_path / "runs"
    results = [make_result(model="lenet", repeat=i) for i in range(10)]
    for r in results:
        write_result(runs, r)
    Session = db.open_db(db_url)
    refused = results[6]["run_uid"]
    with Session.begin() as s:  # the database refuses one run, whatever the collector does
        if is_sqlite(db_url):
            s.connection().exec_driver_sql(
                f"CREATE TRIGGER refuse BEFORE INSERT ON runs WHEN NEW.uid = '{refused}' "
                f"BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
        else:  # a constraint's error, as SQLite's RAISE(ABORT) is
            s.connection().exec_driver_sql(
                f"CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF NEW.uid = '{refused}' THEN RAISE EXCEPTION 'refused by the test' "
                f"USING ERRCODE = 'integrity_constraint_violation'; END IF; RETURN NEW; END $$")
            s.connection().exec_driver_sql(
                "CREATE TRIGGER refuse BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION refuse()")

    report = collect(Session, runs, batch_size=4)

    assert (report.added, report.already) == (9, 0)
    ((path, reason),) = report.broken
    assert path == write_result(runs, results[6]) and "refused it twice: refused by the test" in reason
    assert query(db_url, "select count(*), count(collected_at) from runs") == [(9, 9)]
    assert query(db_url, "select count(*) from metrics") == [(9 * 12,)]
    assert query(db_url, "select count(*) from runs where uid = :uid", {"uid": refused}) == [(0,)]
    execute(db_url, "DROP TRIGGER refuse" if is_sqlite(db_url) else "DROP TRIGGER refuse ON runs")
    again = collect(Session, runs, batch_size=4)
    assert (again.added, again.already, again.broken) == (1, 9, [])


def test_in_flight_and_ended_runs_in_one_batch_keep_their_rules(tmp_path, db_url):
    """In one batch: a run the launcher recorded lands; a failed result of a run whose job is
    still in flight waits (nothing written); a run tracking ended keeps its verdict; a lost run
    takes its late result; a run nobody recorded is created."""
    runs = tmp_path / "runs"
    submitted = make_result(model="lenet")
    in_flight = make_result(model="alexnet", state="failed",
                            error={"class": "signal", "message": "terminated by SIGTERM (requeued)"})
    cancelled = make_result(model="vgg16", state="failed",
                            error={"class": "signal", "message": "terminated by SIGTERM"})
    lost = make_result(model="resnet50")
    unrecorded = make_result(model="googlenet")
    for r in (submitted, in_flight, cancelled, lost, unrecorded):
        write_result(runs, r)
    Session = db.open_db(db_url)
    with Session.begin() as s:  # the launcher's rows, moved as tracking moved them
        s.add(Sweep(id="sweep-a", created_at=1.0, argv=[], overrides=[["model=x"]] * 1000, n_cells=4))
        for r, moves in ((submitted, ["submitted"]), (in_flight, ["submitted", "running"]),
                         (cancelled, ["submitted", "running", "cancelled"]), (lost, ["submitted", "lost"])):
            s.add(Cell(id=r["cell_id"], settings=r["cell"], created_at=1.0, **r["cell"]))
            s.flush()
            s.add(SweepCell(sweep_id="sweep-a", cell_id=r["cell_id"]))
            run = Run(uid=r["run_uid"], sweep_id="sweep-a", cell_id=r["cell_id"], repeat=0, attempt=1,
                      state="pending", job_id="77_1")
            for state in moves:
                run.state = state
            if run.state == "cancelled":
                run.error_class, run.error_message = "cancelled", "slurm ended job 77_1 as CANCELLED"
            s.add(run)

    report = collect(Session, runs, batch_size=10)

    assert (report.added, report.already, report.waiting, report.broken) == (4, 0, 1, [])
    with Session() as s:
        state = {r.cell.model: (r.state, r.error_class, r.collected_at is not None) for r in s.scalars(select(Run))}
        assert state == {"lenet": ("done", None, True), "alexnet": ("running", None, False),
                         "vgg16": ("cancelled", "cancelled", True), "resnet50": ("done", None, True),
                         "googlenet": ("done", None, True)}
        assert s.scalar(select(func.count()).select_from(Metric)) == 3 * 12
        assert s.scalar(select(func.count()).select_from(SweepCell)) == 5

    with Session.begin() as s:  # the scheduler's final word on the requeued job: it failed
        s.scalar(select(Run).join(Cell).where(Cell.model == "alexnet")).state = "failed"
    again = collect(Session, runs, batch_size=10)
    assert (again.added, again.already, again.waiting) == (1, 4, 0)


def test_collect_costs_statements_per_batch_not_per_file_and_never_reads_a_sweeps_overrides(tmp_path, db_url):
    """A few statements per batch, whatever its size (claims and inserts go in bulk); sweeps and
    cells looked up by id; no query reads `sweeps.overrides` (a large sweep's is megabytes)."""
    from sqlalchemy import event

    runs, n = tmp_path / "runs", 300
    results = [make_result(sweep=f"sweep-{i % 3}", seed=i) for i in range(n)]  # many cells, few sweeps
    for r in results:
        write_result(runs, r)
    Session = db.open_db(db_url)
    with Session.begin() as s:  # half of them recorded by the launcher (claimed by an UPDATE each)
        for i in range(3):
            s.add(Sweep(id=f"sweep-{i}", created_at=1.0, argv=[], overrides=[["seed=1"]] * n, n_cells=n // 3))
        for r in results[: n // 2]:
            s.add(Cell(id=r["cell_id"], settings=r["cell"], created_at=1.0, **r["cell"]))
            s.flush()
            s.add(Run(uid=r["run_uid"], sweep_id=r["sweep_id"], cell_id=r["cell_id"], repeat=0, attempt=1,
                      state="pending"))
    statements = []
    engine = Session.kw["bind"]
    listen = lambda conn, cursor, sql, params, context, many: statements.append(sql)  # noqa: E731
    event.listen(engine, "before_cursor_execute", listen)
    try:
        report = collect(Session, runs, batch_size=100)
    finally:
        event.remove(engine, "before_cursor_execute", listen)

    assert (report.added, report.broken) == (n, [])
    # one look at which sweeps' folders need a look, then per batch of 100 files a look at which
    # are landed and a dozen statements, none per file (three of them the kept summary's refresh,
    # two the kept metrics', two the kept CSV texts')
    assert len(statements) <= 1 + 3 * 21, statements
    assert not [sql for sql in statements if "overrides" in sql and not sql.startswith("INSERT")]
    assert query(db_url, "select count(*), count(collected_at) from runs") == [(n, n)]
    assert query(db_url, "select count(*) from sweeps") == [(3,)]
    assert query(db_url, "select count(*) from cells") == [(n,)]
    assert query(db_url, "select count(*) from sweep_cells") == [(n,)]
    assert query(db_url, "select count(*) from metrics") == [(n * 12,)]
    assert query(db_url, "select count(*) from results") == [(n,)]


def test_a_claim_that_finds_a_run_taken_since_the_lookup_lands_the_batch_file_by_file(tmp_path, db_url, monkeypatch):
    """Where a claim changes fewer runs than it should (another process took one after the batch
    looked them up: a server database, where batches do not hold a lock), the batch rolls back
    and its files land alone, none lost, none twice; so too where the database cannot count the
    rows of one statement run many times (one claim per run then)."""
    from sqlalchemy import event

    runs = tmp_path / "runs"
    results = [make_result(model="lenet", repeat=i) for i in range(6)]
    for r in results:
        write_result(runs, r)
    Session = db.open_db(db_url)
    with Session.begin() as s:
        s.add(Sweep(id="sweep-a", created_at=1.0, argv=[], overrides=[], n_cells=1))
        s.add(Cell(id=results[0]["cell_id"], settings=results[0]["cell"], created_at=1.0, **results[0]["cell"]))
        s.flush()
        for r in results:
            s.add(Run(uid=r["run_uid"], sweep_id="sweep-a", cell_id=r["cell_id"], repeat=r["repeat"], attempt=1,
                      state="pending"))
    fired = []

    def another_collector(conn, cursor, sql, params, context, many):
        if sql.startswith("UPDATE runs") and not fired:  # the first claim: one run taken just before
            fired.append(sql)
            cursor.connection.execute("UPDATE runs SET collected_at = 1 WHERE uid = " + ("?" if is_sqlite(db_url) else "%s"),
                                      (results[3]["run_uid"],))

    engine = Session.kw["bind"]
    event.listen(engine, "before_cursor_execute", another_collector)
    try:
        report = collect(Session, runs, batch_size=6)
    finally:
        event.remove(engine, "before_cursor_execute", another_collector)
    assert fired and (report.added, report.already, report.broken) == (6, 0, [])

    with Session.begin() as s:
        s.execute(update(Run).values(collected_at=None))
    monkeypatch.setattr(engine.dialect, "supports_sane_multi_rowcount", False)
    assert (collect(Session, runs, batch_size=6).added, collect(Session, runs).already) == (6, 6)
    assert query(db_url, "select count(*), count(collected_at) from runs") == [(6, 6)]
    assert query(db_url, "select count(*) from metrics") == [(6 * 12,)]


def test_unrecorded_attempts_landed_out_of_order_leave_the_highest_one_latest(tmp_path, db_url):
    """Results copied from elsewhere, attempt 2 collected before attempt 1 of the same repeat:
    the flag every reader of "the latest attempt" uses (schema.latest_runs) stays on attempt 2."""
    runs = tmp_path / "runs"
    second, first = make_result(attempt=2), make_result(attempt=1)
    other = make_result(repeat=1)
    Session = db.open_db(db_url)
    write_result(runs, second)
    write_result(runs, other)
    assert collect(Session, runs).added == 2
    write_result(runs, first)
    assert collect(Session, runs).added == 1
    assert query(db_url, "select repeat, attempt, latest from runs order by repeat, attempt") == [
        (0, 1, 0), (0, 2, 1), (1, 1, 1)]
    assert query(db_url, "select count(*), sum(n) from cell_summary") == [(1, 2)]


def test_four_collect_commands_at_once_land_each_result_exactly_once(tmp_path, db_url):
    """Four `orchestrator collect` processes started together on one database and the same files
    (many runs of few cells over two sweeps; half of them recorded by the launcher, claimed by an
    UPDATE each, the others inserted, collected): every run lands once, with its metrics once,
    and each process accounts for every file (added here or already there), none broken."""
    import os
    import subprocess
    import sys

    runs, n = tmp_path / "runs", 480
    results = [make_result(sweep=f"sweep-{i % 2}", model=("lenet", "alexnet", "vgg16", "resnet50")[i // 2 % 4],
                           repeat=i // 8) for i in range(n)]
    for r in results:
        write_result(runs, r)
    Session = db.open_db(db_url)
    with Session.begin() as s:  # what the launcher recorded of half of them
        recorded = results[::2]
        for sweep in sorted({r["sweep_id"] for r in recorded}):
            s.add(Sweep(id=sweep, created_at=1.0, argv=[], overrides=[], n_cells=4))
        for cell in {r["cell_id"]: r for r in recorded}.values():
            s.add(Cell(id=cell["cell_id"], settings=cell["cell"], created_at=1.0, **cell["cell"]))
        s.flush()
        for r in recorded:
            s.add(Run(uid=r["run_uid"], sweep_id=r["sweep_id"], cell_id=r["cell_id"], repeat=r["repeat"],
                      attempt=1, state="pending"))
    Session.kw["bind"].dispose()

    env = {**os.environ, "ORCHESTRATOR_DB": db_url, "ORCHESTRATOR_RUNS": str(runs), "COLUMNS": "200"}
    argv = [sys.executable, "-m", "orchestrator", "collect", "--batch", "20"]
    procs = [subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    said = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=300)
            said.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:  # only on failure: no collector left behind
                p.kill()
    assert [rc for rc, _, _ in said] == [0, 0, 0, 0], said
    counts = []
    for _, out, _ in said:  # "<n> added, <m> already in the DB, 0 broken"
        (line,) = [line for line in out.splitlines() if re.match(r"\d+ added, \d+ already in the DB, ", line)]
        assert line.endswith(" 0 broken"), out
        counts.append(tuple(int(n) for n in re.findall(r"\d+", line)[:2]))
    assert sum(added for added, _ in counts) == n, counts
    assert all(added + already == n for added, already in counts), counts
    assert query(db_url, "select count(*), count(distinct uid), count(collected_at) from runs") == [(n, n, n)]
    assert query(db_url, "select count(*), count(distinct run_id) from metrics") == [(n * 12, n)]
    assert query(db_url, "select count(*) from (select run_id, name from metrics group by run_id, name "
                         "having count(*) > 1) as twice") == [(0,)]
    assert query(db_url, "select count(*) from sweeps") == [(2,)]
    assert query(db_url, "select count(*) from cells") == [(4,)]
    assert query(db_url, "select count(*) from sweep_cells") == [(8,)]
    assert query(db_url, "select count(*), sum(case when latest then 1 else 0 end) from runs") == [(n, n)]


def test_a_collector_waits_for_another_adding_the_same_rows_and_finds_them_landed(tmp_path, postgres_server, monkeypatch):
    """On a server, where a batch holds no lock while it looks rows up: before each lookup of
    this collector, "another collector" inserts, in its own open transaction, the sweep, cell,
    sweep-cell and run the file needs, and commits once this collector waits on it. This
    collector must wait and skip each (not fail its batch on the key, and then fail its file
    alone on the next: that was "the database refused it twice", found by the four-collector
    test), and then find the run landed: already there, one row, no broken file."""
    import threading
    import time

    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import Session as OrmSession
    from sqlalchemy.pool import NullPool

    from db_urls import create_database, drop_database
    from orchestrator.store import result_rows

    url = create_database(postgres_server)
    runs = tmp_path / "runs"
    result = make_result(sweep="sweep-a", model="lenet")
    write_result(runs, result)
    Session = db.open_db(url)
    engine = create_engine(url, poolclass=NullPool)
    rows = {"sweeps": lambda: Sweep(id="sweep-a", created_at=1.0, argv=[], overrides=[], n_cells=1),
            "cells": lambda: Cell(id=result["cell_id"], settings=result["cell"], created_at=1.0, **result["cell"]),
            "sweep_cells": lambda: SweepCell(sweep_id="sweep-a", cell_id=result["cell_id"]),
            "runs": lambda: Run(uid=result["run_uid"], sweep_id="sweep-a", cell_id=result["cell_id"], repeat=0,
                                attempt=1, state="done", collected_at=2.0)}
    waited, committers = [], []

    def commit_when_waited_on(other: OrmSession, table: str) -> None:
        with engine.connect() as look:  # autocommit reads: pg_stat_activity is cached per transaction
            look.execution_options(isolation_level="AUTOCOMMIT")
            for _ in range(3000):
                if look.execute(text("select count(*) from pg_stat_activity where datname = current_database() "
                                     "and wait_event_type = 'Lock'")).scalar():
                    waited.append(table)
                    break
                time.sleep(0.02)
        other.commit()
        other.close()

    def another_collector_first(table: str) -> None:
        if table in rows:  # each row once, before this collector's first look for it
            other = OrmSession(engine)
            other.add(rows.pop(table)())
            other.flush()
            committers.append(threading.Thread(target=commit_when_waited_on, args=(other, table)))
            committers[-1].start()

    present, looked_up = result_rows.present, result_rows.looked_up
    monkeypatch.setattr(result_rows, "present", lambda conn, table, ids, sweep=None: (
        another_collector_first(table), present(conn, table, ids, sweep))[1])
    monkeypatch.setattr(result_rows, "looked_up", lambda conn, uids: (
        another_collector_first("runs"), looked_up(conn, uids))[1])
    try:
        report = collect(Session, runs)
        for t in committers:
            t.join()
        assert (report.added, report.already, report.broken) == (0, 1, [])
        assert waited == ["sweeps", "cells", "sweep_cells", "runs"]  # each was met while its insert waited
        assert query(url, "select count(*), min(collected_at) from runs") == [(1, 2.0)]
        assert query(url, "select (select count(*) from sweeps), (select count(*) from cells), "
                          "(select count(*) from sweep_cells), (select count(*) from metrics)") == [(1, 1, 1, 0)]
    finally:
        Session.kw["bind"].dispose()
        engine.dispose()
        drop_database(postgres_server, url)
