"""Two login nodes, one results file on a real cluster file system: GlusterFS (scripts/sharedfs.sh,
started by scripts/test.sh as root) mounts one volume twice, each mount with its own client and
page cache, and `orchestrator collect` runs on both "hosts" at once (each in its own UTS
namespace, with its own hostname), over result files written through one of them
(benchmarks/shared_fs.py's rounds). Nothing may be lost, stored twice or claimed by both, the file
must pass integrity_check, and every command must succeed.

The release before the lease lost one host's whole commit in each of 20 rounds of this (both
collectors exited 0); with it, 80 rounds (40 each collecting its own sweep, 20 both collecting
everything, 20 making the file together) lost nothing (docs/shared-results.md). Here a few
rounds of each kind: about 30 s."""
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
import shared_fs  # noqa: E402 - the benchmark's own rounds

from orchestrator.store import sqlite_lease  # noqa: E402

HOW = "start it as root with `scripts/sharedfs.sh start` (scripts/test.sh does when run as root)"


@pytest.fixture(scope="module")
def mounts():
    a, b = shared_fs.SCRATCH / "hostA", shared_fs.SCRATCH / "hostB"
    if os.geteuid() != 0:
        pytest.skip(f"SHARED FILE SYSTEM TEST SKIPPED: two hosts need UTS namespaces (root); {HOW}")
    for d in (a, b):
        if not os.path.ismount(d):
            pytest.skip(f"SHARED FILE SYSTEM TEST SKIPPED: {d} is not mounted; {HOW}")
    return a, b


@pytest.mark.parametrize("how", [["--split"], [], ["--race-create"]],
                         ids=["each-its-own-sweep", "both-collect-all", "both-make-the-file"])
def test_collectors_on_two_hosts_of_one_glusterfs_volume_lose_nothing(mounts, how, capsys):
    status = shared_fs.main([str(mounts[0]), str(mounts[1]), "--rounds", "3", "--files", "60", *how])
    said = capsys.readouterr().out
    totals = said.strip().splitlines()[-1]
    assert "on fuse.glusterfs, journal mode delete: 3 rounds, 180 files made, 180 landed, 0 lost" in totals, said
    assert "0 duplicated, 0 claimed twice, 0 rounds failing integrity_check, 0 of 6 commands exited non-zero" \
        in totals, said
    assert status == 0, said


def test_a_collector_stopped_past_the_stale_time_commits_nothing_after_the_other_broke_its_lease(mounts, capsys):
    """loginA stops itself (SIGSTOP: its heartbeat too) at its first write commit, before its
    fence, for longer than the stale time; loginB breaks the lease and collects; loginA, continued,
    must not commit what it began (its fence fires and rolls it back), lands nothing twice, and
    both exit 0. The old stop, from outside once the lease was held, mostly hit a read turn, where
    no fence runs. About 40 s."""
    status = shared_fs.main([str(mounts[0]), str(mounts[1]), "--rounds", "1", "--files", "60",
                             "--stall", str(sqlite_lease.LEASE_STALE_S + 5)])
    said = capsys.readouterr().out
    assert f"loginA stopped {sqlite_lease.LEASE_STALE_S + 5:g} s at a commit (before its fence)" in said, said
    assert "loginA's fence fired (LeaseLost): yes" in said, said
    totals = said.strip().splitlines()[-1]
    assert "1 rounds, 60 files made, 60 landed, 0 lost" in totals, said
    assert "0 duplicated, 0 claimed twice, 0 rounds failing integrity_check, 0 of 2 commands exited non-zero" \
        in totals, said
    assert status == 0, said
