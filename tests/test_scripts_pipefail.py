"""The project's shell scripts run under `set -o pipefail`, where `producer | grep -q pattern` is a
race: grep -q exits at its first match, the producer's next write gets SIGPIPE, and the pipeline
fails as if nothing matched. `ip -o addr show` lists an address's inet line and then its inet6
one, so scripts/sharedfs.sh, finding its address "missing", added it again and failed ("Address
already assigned") under load in a full CI run. A test of what every script says, since the
race cannot be made to happen on demand."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: a single `|` (not `||`) into grep with -q among its flags
PIPE_INTO_GREP_Q = re.compile(r"(?<!\|)\|(?!\|)\s*grep\s+(-\w*q\w*\b|--quiet\b)")


def scripts():
    return sorted(p for folder in ("scripts", "slurm", ".ci") for p in (REPO / folder).rglob("*")
                  if p.is_file() and (p.suffix == ".sh" or p.read_bytes()[:2] == b"#!"))


def test_the_pattern_finds_the_race_and_nothing_else():
    assert PIPE_INTO_GREP_Q.search('ip -o addr show dev sfs0 | grep -qF " $CIDR "')
    assert PIPE_INTO_GREP_Q.search("scontrol ping | grep -q 'is UP'")
    assert not PIPE_INTO_GREP_Q.search('[ ! -d x ] || grep -q "^State" /proc/1/status')
    assert not PIPE_INTO_GREP_Q.search('ip -o addr show | grep -F " $CIDR " >/dev/null')


def test_no_script_under_pipefail_pipes_into_grep_q():
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in scripts() if "pipefail" in p.read_text()
             for n, line in enumerate(p.read_text().splitlines(), 1) if PIPE_INTO_GREP_Q.search(line)]
    assert scripts() and not found, "grep -q in a pipeline under pipefail (use grep ... >/dev/null):\n" + "\n".join(found)
