"""The hostile review of the rerun work (issue 35 item 6, round 3): what the database records is
never a path, a module, a command or markup; the files that hold a URL are written without
following anyone's planted name. Each test is a reproduction script of that review, turned into
an assertion (real SQLite/PostgreSQL databases, real compositions of conf/, the real CLI)."""
import getpass
import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest
import sqlalchemy

from orchestrator import private_files

ME = getpass.getuser()


@pytest.fixture(autouse=True)
def keep_umask():
    """Tests that set a shared account's umask give the process its own back."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_private_write_never_opens_a_planted_name_and_is_0600_from_its_first_byte(tmp_path, monkeypatch):
    loot = tmp_path / "attacker-loot"
    loot.write_text("")
    os.chmod(loot, 0o666)
    for pid_name in (f"config.yaml.{os.getpid()}.tmp",):  # the old predictable name, planted as a symlink
        os.symlink(loot, tmp_path / pid_name)
    seen = []
    real_replace = os.replace

    def spy(src, dst):  # the temporary file just before it takes the target's name
        seen.append((oct(stat.S_IMODE(os.lstat(src).st_mode)), os.path.islink(src)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    target = tmp_path / "config.yaml"
    private_files.write_text(target, "paths: {db: postgresql://alice:secret@db/bench}\n")
    assert loot.read_text() == "" and not target.is_symlink() and "secret" in target.read_text()
    assert seen == [("0o600", False)] and oct(stat.S_IMODE(target.stat().st_mode)) == "0o600"


def test_keep_private_does_not_follow_a_planted_symlink(tmp_path):
    victim = tmp_path / "victims-file"
    victim.write_text("theirs\n")
    os.chmod(victim, 0o644)
    planted = tmp_path / "multirun.yaml"
    os.symlink(victim, planted)
    with pytest.raises(OSError):
        private_files.keep_private(planted)
    assert oct(stat.S_IMODE(victim.stat().st_mode)) == "0o644" and victim.read_text() == "theirs\n"
    mine = tmp_path / "mine.yaml"
    mine.write_text("old\n")
    os.chmod(mine, 0o644)
    private_files.keep_private(mine)
    assert oct(stat.S_IMODE(mine.stat().st_mode)) == "0o600" and mine.read_text() == "old\n"


CELL = ["framework=numpy", "model=lenet", "iterations=3", "warmup=1", "+framework.env=norecipe"]
#: The caller's own naming of that environment (a rerun builds only what the caller's configuration names).
ENV = "+framework.env=norecipe"


def _picked(tmp_path, planted=None, sweep_id="s1", user=ME, runs=None, overrides=(ENV,), cell=CELL):
    """rerun's pick, as `rerun --failed --all-users` makes it, of one recorded failed cell."""
    from orchestrator.store import db
    from orchestrator.launch import rerun
    from orchestrator.launch.rerun_config import Site
    from trainers.common import failure_classes as fc

    from helpers import record_failed

    url = "sqlite:///%s/results.db" % tmp_path
    record_failed(url, [(cell, fc.CRASH, user)], planted, sweep_id=sweep_id)
    with db.open_db(url, create=False)() as s:
        return rerun.pick(s, Site(list(overrides), url, str(runs or tmp_path / "runs")))


@pytest.mark.parametrize("sweep_id", ["../outside", "s1\ntouch pwned #", "/tmp/abs", ".hidden"])
def test_a_recorded_sweep_id_that_is_a_path_or_a_shell_line_is_refused_in_one_line(tmp_path, sweep_id):
    picks, problems = _picked(tmp_path, sweep_id=sweep_id)
    assert picks == [] and len(problems) == 1, problems
    assert f"sweep id={sweep_id!r} is not a plain name" in problems[0] and "\n" not in problems[0], problems


def test_a_run_directory_that_resolves_outside_runs_is_refused(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "runs" / "s1")
    picks, problems = _picked(tmp_path)
    assert picks == [] and len(problems) == 1 and "resolves outside" in problems[0], problems


@pytest.mark.parametrize("floor", ["x", 10**9, 0, 2.5])
def test_a_recorded_time_floor_is_checked_as_time_limits_makes_it(tmp_path, floor):
    picks, problems = _picked(tmp_path, {"hardware": {"time_min": 30, "time_floor": floor}})
    assert picks == [] and len(problems) == 1, problems
    assert f"hardware.time_floor={floor!r} must be an integer from 1 to 30" in problems[0], problems


def test_a_recorded_learned_limit_within_bounds_is_kept(tmp_path):
    picks, problems = _picked(tmp_path, {"hardware": {"time_min": 30, "time_floor": 12, "time_source": "learned"}})
    assert len(picks) == 1 and picks[0].cell.config["hardware"]["time_floor"] == 12, problems


def test_markup_in_database_values_is_printed_as_text_by_every_command(tmp_path):
    from trainers.common import failure_classes as fc

    from helpers import orchestrator, record_failed, user_dir

    workdir = user_dir(tmp_path)
    workdir[1]["ORCHESTRATOR_CACHE"] = str(tmp_path / "cache")
    url = workdir[1]["ORCHESTRATOR_DB"]
    record_failed(url, [(CELL, fc.CRASH, "mallory[/]")])
    record_failed(url, [(CELL + ["seed=3"], fc.CRASH, ME)], sweep_id="s2[/bold]")
    for args in (["rerun", "--failed", "--dry-run", ENV], ["rerun", "--failed", "--dry-run", "--all-users", ENV],
                 ["status"], ["status", "--failed", "--all-users"]):
        shown = orchestrator(args, workdir)
        assert shown.returncode == 0 and "MarkupError" not in shown.stderr, (args, shown.stderr)
        assert "s2[/bold]" in shown.stdout, (args, shown.stdout)
    assert "mallory[/]: 1" in orchestrator(["rerun", "--failed", "--dry-run", ENV], workdir).stdout


def _with_password(url):
    """The database's URL as a user with a password types it (the test server trusts loopback, so
    the password is carried, never checked: what matters is where it ends up)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    return url if parsed.drivername.startswith("sqlite") else \
        parsed.set(password="s3cret-pw").render_as_string(hide_password=False)


def test_no_database_url_or_password_is_written_into_the_database(db_url, tmp_path):
    """A launch with a typed `paths.db=` (one cell refused) and another user's rerun with their own
    --db: neither the URL nor its password is in any column that keeps overrides, a command line or
    a config (Hydra writes the URL's ':' as '\\:' in its overrides, which a URL pattern misses)."""
    from db_urls import query

    from helpers import orchestrator, user_dir
    from orchestrator.store import db
    from orchestrator.launch import rerun
    from orchestrator.launch.rerun_config import Site

    workdir = user_dir(tmp_path)
    workdir[1].update(ORCHESTRATOR_CACHE=str(tmp_path / "cache"), ORCHESTRATOR_DB=db_url)
    typed = _with_password(db_url)
    launch = orchestrator(["-m", *CELL[:2], "iterations=3,-1", *CELL[3:], f"paths.db={typed}"], workdir)
    assert launch.returncode == 0, launch.stdout + launch.stderr
    assert query(db_url, "SELECT overrides FROM refusals"), "the iterations=-1 cell is refused and recorded"
    with db.open_db(db_url, create=False)() as s:
        s.execute(sqlalchemy.text("UPDATE runs SET state = 'failed', error_class = 'crash'"))
        s.commit()
        picks, problems = rerun.pick(s, Site([ENV], typed, str(tmp_path / "runs")))
        assert len(picks) == 1, problems
        rerun.submit(s, picks)
    for table, column in (("sweeps", "argv"), ("sweeps", "overrides"), ("refusals", "overrides"),
                          ("refusals", "reason"), ("sweep_cells", "config")):
        for (value,) in query(db_url, f"SELECT {column} FROM {table}"):
            text = value if isinstance(value, str) else json.dumps(value)
            assert "s3cret-pw" not in text and "paths.db" not in text and '"db"' not in text, (table, column, text)
            assert "iterations" in text or column == "reason", (table, column, text)


@pytest.mark.parametrize("planted, yours, said", [
    ({"trainer": "this"}, [ENV], "its sweep ran another framework.trainer (recorded) than your configuration names (None)"),
    ({"trainer": "trainers.numpy"}, [ENV], "another framework.trainer (recorded)"),
    ({"env": "numpy"}, [ENV], "its sweep ran another framework.env (recorded) than your configuration names ('norecipe')"),
    ({}, [], "its sweep ran another framework.env (recorded) than your configuration names (None)"),
])
def test_a_recorded_trainer_or_environment_is_never_imported_or_built(tmp_path, planted, yours, said):
    """The review's `framework.trainer: this` (an import in the caller's process) and a torch cell
    recorded with numpy's trainer: refused, unless the caller's own configuration names the same;
    the recorded name is never offered to be copied (whoever can write the database chose it)."""
    picks, problems = _picked(tmp_path, {"framework": planted} if planted else None, overrides=yours)
    assert all(repr(value) not in problems[0] for value in planted.values()), problems
    assert picks == [] and len(problems) == 1 and said in problems[0], problems


def test_the_framework_section_run_is_the_callers_own_composition(tmp_path):
    picks, problems = _picked(tmp_path, overrides=[ENV, "+framework.trainer=trainers.numpy"],
                              planted={"framework": {"trainer": "trainers.numpy", "extra": "x"}})
    assert len(picks) == 1, problems
    assert picks[0].cell.config["framework"] == {"name": "numpy", "env": "norecipe", "trainer": "trainers.numpy"}


@pytest.mark.parametrize("runtime, refused", [("apptainer", False), ("container", False), ("touch pwned", True)])
def test_the_recorded_runtime_is_kept_checked_with_its_choices(tmp_path, runtime, refused):
    """A rerun and retry's follow-up (which types no override) measure in the runtime the sweep did."""
    picks, problems = _picked(tmp_path, {"runtime": runtime})
    if refused:
        assert picks == [] and "runtime='touch pwned' is not one of venv, apptainer, container" in problems[0]
    else:
        assert len(picks) == 1 and picks[0].cell.config["runtime"] == runtime, problems


def test_another_data_folder_than_the_sweeps_is_refused(tmp_path):
    cell = ["framework=numpy", "model=lenet", "dataset=mnist", "+framework.env=norecipe"]
    recorded = "/scratch/theirs/mnist"
    picks, problems = _picked(tmp_path, {"dataset": {"dir": recorded}}, cell=cell,
                              overrides=[ENV, "paths.data=/tmp/mine"])
    assert picks == [] and "its sweep read its data from '/scratch/theirs/mnist' (recorded), your " \
                           "configuration from '/tmp/mine/mnist'; type paths.data=DIR" in problems[0], problems
    (tmp_path / "same").mkdir()
    picks, problems = _picked(tmp_path / "same", {"dataset": {"dir": recorded}}, cell=cell,
                              overrides=[ENV, "paths.data=/scratch/theirs"])
    assert len(picks) == 1 and picks[0].cell.config["dataset"]["dir"] == recorded, problems


@pytest.mark.parametrize("typed, way_out", [("paths.runs=/scratch/me/runs", "use --runs DIR"),
                                            ("paths.db=postgresql://me@db/bench", "use --db URL")])
def test_paths_the_rerun_command_sets_itself_are_refused_as_overrides(tmp_path, typed, way_out):
    from helpers import orchestrator, user_dir

    refused = orchestrator(["rerun", "--failed", "--dry-run", typed], user_dir(tmp_path))
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(f"{typed.partition('=')[0]}=") and "is the rerun command's own; " + way_out \
        in refused.stderr, refused.stderr


def test_a_follow_up_takes_the_launchs_site_options_from_its_pickle_only():
    from orchestrator.launch.rerun_config import site_only

    launch = ["cluster=slurm", "hardware=cpu12", "batch_size=8", "+framework.env=norecipe", "paths.data=/scratch",
              "paths.db=postgresql://me:pw@db/bench", "paths.runs=/x", "runtime=apptainer", "+cluster.setup=[module load x]"]
    assert site_only(launch) == ["cluster=slurm", "+framework.env=norecipe", "paths.data=/scratch",
                                 "+cluster.setup=[module load x]"]


def test_the_follow_up_job_reruns_on_the_launchs_site_configuration(tmp_path, slurm_env, monkeypatch):
    """retry.run, the follow-up job's body, with the overrides its pickle carries, on the test
    cluster: the timed-out repeat is resubmitted on them (without them its recorded environment is
    not the caller's, and it is refused)."""
    import subprocess

    from orchestrator.launch import retry
    from trainers.common import failure_classes as fc

    from helpers import SMALL, orchestrator, record_failed, rows, user_dir

    workdir = user_dir(tmp_path, slurm_env)
    workdir[1]["ORCHESTRATOR_CACHE"] = str(tmp_path / "cache")
    url = workdir[1]["ORCHESTRATOR_DB"]
    launch = [*SMALL, *CELL, "retry.timeout=1", "hardware.time_min=5"]
    record_failed(url, [(launch, fc.TIMEOUT, ME)])
    (tmp_path / "runs").mkdir()
    bare = orchestrator(["rerun", "--failed", "--follow-up", "--sweep", "s1", "--dry-run"], workdir)
    assert "its sweep ran another framework.env (recorded)" in bare.stdout, bare.stdout + bare.stderr
    for key, value in workdir[1].items():
        monkeypatch.setenv(key, value)
    try:
        assert retry.run({"sweep": "s1", "db": url, "runs": str(tmp_path / "runs"), "overrides": launch}) == 0
        assert [(a, j is not None) for a, j in rows(workdir, "select attempt, job_id from runs order by attempt")] \
            == [(1, False), (2, True)]
    finally:
        for (job,) in rows(workdir, "select job_id from runs where job_id is not null"):
            subprocess.run(["scancel", job.split("_")[0]], env=slurm_env)


def test_a_fifo_where_a_recorded_run_directory_points_hangs_no_command(tmp_path):
    """The review's r8: run_dir in the database names a folder whose result.json and job.json are
    FIFOs; `status` and `rerun --dry-run` used to block forever opening them."""
    from trainers.common import failure_classes as fc

    from helpers import orchestrator, record_failed, user_dir

    workdir = user_dir(tmp_path)
    record_failed(workdir[1]["ORCHESTRATOR_DB"], [(CELL, fc.CRASH, "mallory")])
    trap = tmp_path / "trap"
    trap.mkdir()
    for name in ("result.json", "job.json"):
        os.mkfifo(trap / name)
    con = sqlite3.connect(str(tmp_path / "results.db"))
    con.execute("update runs set state = 'submitted', error_class = NULL, run_dir = ?", (str(trap),))
    con.commit()
    con.close()
    for args in (["status"], ["rerun", "--failed", "--dry-run", "--all-users", ENV]):
        shown = orchestrator(args, workdir, timeout=60)  # a hang is a TimeoutExpired: the test fails
        assert shown.returncode == 0, (args, shown.stdout + shown.stderr)


def test_a_repeat_another_rerun_resubmitted_meanwhile_is_left_to_it(db_url, tmp_path, monkeypatch):
    """Two `rerun --failed` of one repeat at once (the review's r5: one exited 1 with UNIQUE constraint
    failed: runs.uid): the other's attempt row is inserted between this one's pick and its insert,
    through a second connection, as the other process does; this one skips that repeat, says so,
    and submits the rest."""
    from orchestrator.store import db, schema
    from orchestrator.launch import rerun
    from orchestrator.launch.rerun_config import Site
    from orchestrator.results.resultfile import run_uid
    from trainers.common import failure_classes as fc

    from helpers import record_failed

    ids = record_failed(db_url, [(CELL, fc.CRASH, ME), (CELL + ["seed=5"], fc.CRASH, ME)])
    (tmp_path / "cache").mkdir()
    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / "cache"))
    with db.open_db(db_url, create=False)() as s:
        picks, problems = rerun.pick(s, Site([ENV], db_url, str(tmp_path / "runs")))
        assert len(picks) == 2, problems
        first = picks[0]
        with db.open_db(db_url, create=False).begin() as other:  # the other rerun, first to insert
            other.add(schema.Run(uid=run_uid("s1", first.cell.id, 0, 2), sweep_id="s1", cell_id=first.cell.id,
                                 repeat=0, attempt=2, state="pending", latest=False, submit_user="other",
                                 run_dir="x", executor="local"))
        (report,) = rerun.submit(s, picks)
    assert [c.id for c, _, _ in report.submitted] == [picks[1].cell.id], (report.failed, report.notes)
    assert any("1 repeat(s) already resubmitted by another rerun meanwhile" in n for n in report.notes), report.notes
    assert sorted(ids) == sorted(p.cell.id for p in picks)


def test_runs_of_unknown_submitter_are_counted_where_they_are_hidden(tmp_path):
    from trainers.common import failure_classes as fc

    from helpers import orchestrator, record_failed, user_dir

    workdir = user_dir(tmp_path)
    record_failed(workdir[1]["ORCHESTRATOR_DB"], [(CELL, fc.CRASH, None), (CELL + ["seed=2"], fc.CRASH, None)])
    dry = orchestrator(["rerun", "--failed", "--dry-run", ENV], workdir)
    assert "2 repeat(s) of unknown submitter: --all-users takes them" in dry.stdout, dry.stdout
    listed = orchestrator(["status", "--failed"], workdir)
    assert "0 run(s)\n2 run(s) of unknown submitter not shown: --all-users takes them" in listed.stdout, listed.stdout
    assert "unknown submitter" not in orchestrator(["status", "--failed", "--all-users"], workdir).stdout


def test_an_open_run_whose_recorded_directory_is_outside_runs_is_not_read(tmp_path):
    """A run_dir the database gives (another user's runs folder, or a planted path) is not opened:
    its run is left as it was and counted; one under --runs is read as before."""
    from trainers.common import failure_classes as fc

    from helpers import orchestrator, record_failed, rows, user_dir

    workdir = user_dir(tmp_path)
    record_failed(workdir[1]["ORCHESTRATOR_DB"], [(CELL, fc.CRASH, ME)])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "result.json").write_text("{not json")  # read, it would mark the run failed (broken)
    con = sqlite3.connect(str(tmp_path / "results.db"))
    con.execute("update runs set state = 'submitted', error_class = NULL, job_id = NULL, run_dir = ?",
                (str(elsewhere),))
    con.commit()
    con.close()
    (tmp_path / "runs").mkdir()
    shown = orchestrator(["status"], workdir)
    assert shown.returncode == 0 and "1 open run(s) recorded with a run directory outside" in shown.stdout, \
        shown.stdout + shown.stderr
    assert rows(workdir, "select state from runs") == [("submitted",)]
    moved = tmp_path / "runs" / "s1"
    elsewhere.rename(moved)
    con = sqlite3.connect(str(tmp_path / "results.db"))
    con.execute("update runs set run_dir = ?", (str(moved),))
    con.commit()
    con.close()
    assert "outside" not in orchestrator(["status"], workdir).stdout
    assert rows(workdir, "select state from runs") != [("submitted",)]


@pytest.mark.parametrize("planted", [{"monitor": {"period_s": 1e300}}, {"monitor": {"idle_s": 10**9}},
                                     {"monitor": {"period_s": 0}}, {"time_limits": {"safety": -3}}])
def test_recorded_monitor_and_time_limit_values_are_checked_as_a_new_sweeps(tmp_path, planted):
    """Issue 35 review: a recorded monitor.period_s of 1e300 or idle_s of 10**9 (a job that
    never samples, or waits for ever) and a safety of -3 were rerun as recorded."""
    picks, problems = _picked(tmp_path, planted)
    (section, values), = planted.items()
    assert picks == [] and len(problems) == 1 and f"{section}.{next(iter(values))}=" in problems[0], problems


@pytest.mark.parametrize("word, kept", [
    ("+cluster.setup=[apptainer pull docker://ubuntu:22.04]", None),
    ("hydra.searchpath=[file:///x/myconf]", None),
    ("https://host:8443/path", None),
    ("+cluster.setup=[export DB=postgresql://alice:pw@db/b]", "+cluster.setup=[export DB=postgresql://alice:***@db/b]"),
    ("paths.x=postgresql\\://alice\\:pw@db/b", "paths.x=postgresql\\://alice\\:***@db/b"),
    ("+cluster.setup=[export DB=postgresql://alice@db/b?sslmode=require&password=pw]",
     "+cluster.setup=[export DB=postgresql://alice@db/b?sslmode=require&password=***]"),
])
def test_only_a_urls_password_is_masked(word, kept):
    """A word with no `user:password@` part is kept byte for byte (the review: SQLAlchemy's parser
    raised on `docker://ubuntu:22.04]`, ending the launch, and rewrote `myconf]` as `myconf%5D`)."""
    from orchestrator.store import db

    assert db.hide_passwords(word) == (kept or word)


def test_a_launch_with_urls_that_hold_no_password_is_recorded_as_typed(tmp_path):
    """The review's launch that ended rc=1 with nothing recorded: its argv is kept as typed."""
    from helpers import orchestrator, user_dir

    workdir = user_dir(tmp_path)
    workdir[1].update(ORCHESTRATOR_CACHE=str(tmp_path / "cache"))
    (tmp_path / "myconf").mkdir()
    typed = ["+cluster.setup=[apptainer pull docker://ubuntu:22.04]", f"hydra.searchpath=[file://{tmp_path}/myconf]"]
    launch = orchestrator(["-m", *CELL, *typed], workdir)
    assert launch.returncode == 0, launch.stdout + launch.stderr
    (argv,) = sqlite3.connect(str(tmp_path / "results.db")).execute("SELECT argv FROM sweeps").fetchone()
    assert json.loads(argv)[-2:] == typed, argv


def test_a_rerun_never_writes_the_callers_site_into_the_sweeps_record(tmp_path, monkeypatch):
    """Issue 35 review: bob's rerun of alice's cell wrote bob's `cluster.setup` (a token) over
    alice's sweep_cells.config, where every user of the shared database reads it."""
    from orchestrator.store import db
    from orchestrator.launch import rerun
    from orchestrator.launch.rerun_config import Site
    from trainers.common import failure_classes as fc

    from helpers import record_failed

    url = "sqlite:///%s/results.db" % tmp_path
    record_failed(url, [(CELL, fc.CRASH, "alice")])
    (before,) = sqlite3.connect(str(tmp_path / "results.db")).execute("SELECT config FROM sweep_cells").fetchone()
    (tmp_path / "cache").mkdir()
    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / "cache"))
    with db.open_db(url, create=False)() as s:
        picks, problems = rerun.pick(s, Site([ENV, "+cluster.setup=['export HF_TOKEN=hf_bobs_secret']"], url,
                                             str(tmp_path / "runs")))
        assert picks, problems
        rerun.submit(s, picks)
    (config,) = sqlite3.connect(str(tmp_path / "results.db")).execute("SELECT config FROM sweep_cells").fetchone()
    assert "hf_bobs_secret" not in config and json.loads(config)["cluster"] == json.loads(before)["cluster"], config


def test_hydra_searchpath_is_the_one_hydra_key_a_rerun_or_follow_up_takes():
    """A follow-up job composes the launch's site: its conf dir (hydra.searchpath) included, never
    Hydra's run or sweep dirs (a carried `hydra.run.dir=` would write elsewhere)."""
    from orchestrator.launch.rerun_config import site_only

    typed = ["hydra.searchpath=[file:///x/myconf]", "hydra.run.dir=/tmp/x", "hydra.sweep.dir=/tmp/y",
             "cluster=slurm", "batch_size=8", "paths.db=sqlite:///x.db"]
    assert site_only(typed) == ["hydra.searchpath=[file:///x/myconf]", "cluster=slurm"]


def test_a_launchs_hydra_searchpath_travels_with_its_cells(tmp_path):
    """Issue 35 review: the follow-up job carried the first cell's overrides, Hydra's task
    overrides, never hydra.searchpath: a sweep on a site cluster from its own conf dir composed no
    such cluster in its follow-up and got no retries. Each cell's overrides (what the follow-up
    carries, and sweeps.overrides records) now hold it."""
    from helpers import orchestrator, user_dir
    from orchestrator.launch.rerun_config import site_only

    workdir = user_dir(tmp_path)
    workdir[1].update(ORCHESTRATOR_CACHE=str(tmp_path / "cache"))
    (tmp_path / "myconf").mkdir()
    searchpath = f"hydra.searchpath=[file://{tmp_path}/myconf]"
    launch = orchestrator(["-m", *CELL[:2], "iterations=3,4", *CELL[3:], searchpath], workdir)
    assert launch.returncode == 0, launch.stdout + launch.stderr
    (overrides,) = sqlite3.connect(str(tmp_path / "results.db")).execute("SELECT overrides FROM sweeps").fetchone()
    cells = json.loads(overrides)
    assert len(cells) == 2 and all(site_only(cell) == [CELL[-1], searchpath] for cell in cells), cells


def test_retry_timeout_is_refused_where_the_cells_site_options_differ():
    """The follow-up job carries one cell's site options (orchestrator/launch/retry.py): a sweep whose
    cells have different ones is refused retry.timeout in one line, before anything is written."""
    from helpers import composed
    from orchestrator.sweep import config_checks
    from orchestrator import front_door
    from orchestrator.sweep.cell import Cell

    def cell(*overrides):
        return Cell.from_plain(composed([*CELL, *overrides]), (*CELL, *overrides))

    same = [cell("seed=1", "+cluster.setup=[echo a]"), cell("seed=2", "+cluster.setup=[echo a]")]
    front_door.one_site(same, 1)
    differ = [same[0], cell("seed=2", "+cluster.setup=[echo b]")]
    front_door.one_site(differ, 0)  # no follow-up: nothing carried
    with pytest.raises(config_checks.ConfigError, match=r"^retry.timeout=1 needs one site configuration.*; launch one"):
        front_door.one_site(differ, 1)


@pytest.mark.parametrize("carried", ["not json", '{"cluster": "x"}', "[1, 2]", '"cluster=slurm"'])
def test_follow_up_overrides_that_are_not_a_list_of_strings_are_one_line(tmp_path, carried):
    """ORCHESTRATOR_FOLLOW_UP_OVERRIDES that is not a JSON list of strings: its one line, never
    a traceback (the review: json.loads' error, or site_only iterating a dict or an int)."""
    from helpers import orchestrator, user_dir

    workdir = user_dir(tmp_path)
    workdir[1]["ORCHESTRATOR_FOLLOW_UP_OVERRIDES"] = carried
    done = orchestrator(["rerun", "--failed", "--follow-up", "--sweep", "s1", "--dry-run"], workdir)
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in said, said
    assert "ORCHESTRATOR_FOLLOW_UP_OVERRIDES=" in said and "is not a JSON list of override strings" in said, said
