"""Learned time limits against the real four-node Slurm cluster of slurm/ (started by
scripts/test.sh as root): what sbatch is given (`--time`, `--time-min`) for each cell after
earlier runs, and the refusal at MaxTime. The canned half: test_time_limits.py and
test_time_limits_sweep.py."""
import re
import sqlite3
from pathlib import Path

import pytest

from helpers import SMALL, orchestrator, rows, wait_until_final

pytestmark = pytest.mark.slow


def test_a_sweep_run_once_asks_for_learned_limits_with_time_min_and_a_timeout_at_maxtime_is_refused(slurm_workdir):
    sweep = ["-m", *SMALL, "hardware=cpu12", "model=lenet", "seed=1,2,3", "batch_size=8,16"]
    first = orchestrator(sweep, slurm_workdir)
    assert first.returncode == 0, first.stderr
    wait_until_final(slurm_workdir)
    assert orchestrator(["collect"], slurm_workdir).returncode == 0
    assert rows(slurm_workdir, "select count(*) from runs where state = 'done'") == [(6,)]
    scripts = sorted(Path(slurm_workdir[0], "runs").glob("*/.submitit/*submission.sh"))
    assert scripts and all("#SBATCH --time=120\n" in p.read_text() and "--time-min" not in p.read_text()
                           for p in scripts)  # nothing learned yet: hardware.time_max

    dry = orchestrator([*sweep, "force=true", "dry_run=true"], slurm_workdir)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.count("same cell") == 6, dry.stdout  # each limit's source

    again = orchestrator([*sweep, "force=true"], slurm_workdir)
    assert again.returncode == 0, again.stderr
    (sweep_id,) = rows(slurm_workdir, "select sweep_id from runs where attempt = 2 group by sweep_id")[0]
    scripts = sorted(Path(slurm_workdir[0], "runs", sweep_id, ".submitit").glob("*submission.sh"))
    assert scripts
    for script in scripts:
        text = script.read_text()
        limit = int(re.search(r"#SBATCH --time=(\d+)\n", text).group(1))
        floor = int(re.search(r"#SBATCH --time-min=(\d+)\n", text).group(1))
        assert 1 <= floor <= limit <= 10, text
    sources = rows(slurm_workdir, f"select config from sweep_cells where sweep_id = '{sweep_id}'")
    assert len(sources) == 6 and all('"time_source": "same cell' in c for (c,) in sources), sources

    # a cell that timed out at its partition's MaxTime (2-00:00:00 here) cannot be given more:
    # refused with the way out (its timeout is written into the database: two days are not waited for)
    at_max = orchestrator(["-m", *SMALL, "hardware=cpu12", "model=lenet", "seed=9", "hardware.time_min=2880"],
                          slurm_workdir)
    assert at_max.returncode == 0, at_max.stderr
    wait_until_final(slurm_workdir)
    con = sqlite3.connect(str(slurm_workdir[0] / "results.db"))
    with con:
        con.execute("update runs set state = 'failed', error_class = 'timeout' where cell_id in "
                    "(select id from cells where seed = 9)")
    con.close()
    refused = orchestrator(["rerun", "--failed", "--class", "timeout"], slurm_workdir)
    assert "timed out at 2880 min, which is already its partition's MaxTime" in refused.stdout, refused.stdout
    assert "hardware.partition=NAME" in refused.stdout and "nothing to rerun" in refused.stdout, refused.stdout


TINY = ("name: tiny\npartition: cpu\ngpu_type: null\ngpus_per_node: 0\ncpus: 1\nmem_gb: 1\ntime_min: auto\n"
        "time_max: 120\npeak_tflops: {fp32: null, fp16: null, bf16: null}\n")


def _expected_limits(slurm_workdir, sweep_id):
    """Each cell of the sweep: the limit time_limits.predict gives it from the database's one
    earlier run (wall time and step time as recorded), and whether it is its own history."""
    import json

    from orchestrator.sweep import time_limits

    (cell_id, wall_s, step_s, settings), = rows(slurm_workdir, (
        "select cells.id, runs.ended_at - runs.started_at, metrics.value, cells.settings from runs join cells on "
        "cells.id = runs.cell_id left join metrics on metrics.run_id = runs.id and metrics.name = 'step_time_mean' "
        "where runs.state = 'done'"))
    past = [time_limits.Past(cell_id, wall_s, json.loads(settings), step_s)]
    return {cid: (time_limits.predict(cid, json.loads(s), past, 120, max_time_min=2880), cid == cell_id)
            for cid, s in rows(slurm_workdir, "select cells.id, cells.settings from sweep_cells join cells on "
                                              f"cells.id = sweep_cells.cell_id where sweep_id = '{sweep_id}'")}


def test_each_cell_of_a_value_sweep_is_submitted_with_its_own_learned_limit(slurm_workdir, tmp_path_factory):
    """Issue 35, 1, through sbatch: after one run of one small cell, a sweep of values only
    (batch_size, iterations; nothing under hardware.) gave every cell the first cell's limit.
    The run once is 3 steps, too few to scale (time_limits.trusted_step): the others get the
    ceiling, each in its own script."""
    site = tmp_path_factory.mktemp("site-conf")
    (site / "hardware").mkdir()
    (site / "hardware" / "tiny.yaml").write_text(TINY)
    # --config-dir, not hydra.searchpath=: an override of the search path composes each cell whole (nothing shared)
    base = ["-m", "--config-dir", str(site), "cluster=slurm", "hardware=tiny", "model=lenet", "warmup=1",
            "time_limits.build_min=0"]  # whether the shared environment is built yet is not this test's question
    first = orchestrator([*base, "batch_size=8", "iterations=3"], slurm_workdir)
    assert first.returncode == 0, first.stderr
    wait_until_final(slurm_workdir)
    assert rows(slurm_workdir, "select count(*) from runs where state = 'done'") == [(1,)]

    wide = (slurm_workdir[0], {**slurm_workdir[1], "COLUMNS": "400"})
    dry = orchestrator([*base, "batch_size=512,8", "iterations=50000,3", "force=true", "dry_run=true"], wide)
    assert dry.returncode == 0, dry.stderr  # the other order, in a dry run
    again = orchestrator([*base, "batch_size=8,512", "iterations=3,50000", "force=true"], slurm_workdir)
    assert again.returncode == 0, again.stderr
    (sweep_id,) = rows(slurm_workdir, "select sweep_id from runs where attempt = 2")[0]
    expected = _expected_limits(slurm_workdir, sweep_id)
    assert len(expected) == 4 and sum(own for _, own in expected.values()) == 1, expected
    # 64 times the batch over 16,667 times the steps: far longer than the cell run once, whatever its step time
    assert max(limit.minutes for limit, _ in expected.values()) > min(limit.minutes for limit, _ in expected.values())
    jobs = dict(rows(slurm_workdir, f"select cell_id, job_id from runs where sweep_id = '{sweep_id}'"))
    for cid, (limit, own) in expected.items():  # the script sbatch was given for the cell's array
        script = next(Path(slurm_workdir[0], "runs", sweep_id, ".submitit").glob(
            f"{jobs[cid].split('_')[0]}_submission.sh")).read_text()
        assert f"#SBATCH --time={limit.minutes}\n" in script, script
        assert (f"#SBATCH --time-min={limit.floor}\n" in script) if own else ("--time-min" not in script), script
        line = next(li for li in dry.stdout.splitlines() if cid in li)
        assert f" {limit.minutes} min" in line and limit.source.split(" (")[0] in line, line
