"""The kept tables remade once, by the head code, after an upgrade's last revision
(store/migrations/__init__.py, result_rows.remake), on real SQLite files and PostgreSQL databases.

The hazard: kept_summary is computed by code that reads every setting `cells` has at the head. A
revision that filled it as it ran (0017 and 0022 did) read a column a later revision adds, so an old
database's upgrade failed as soon as a setting came after it. Shown here as a developer meets it: a
copy of this orchestrator with one more setting and the revision that gives it its column, which
upgrades a database taken back to before kept_summary existed."""
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from orchestrator.store import db, migrations, result_rows
from db_urls import query
from test_db import taken_back
from test_results_summary import assert_exact, landed

ROOT = Path(__file__).resolve().parents[1]

#: The new setting, declared as docs/adding-a-setting.md says (a default that keeps every cell id).
KNOB = ('    SettingDef("knob", str, _key("knob", "plain"), hashed=UNLESS_DEFAULT, default="plain",\n'
        '       choices=("plain", "fancy"), trainer_flag=False),\n')

#: Its revision, after the head, written as the migrations' docstring says a setting's is.
REVISION = '''"""A setting after the head (tests/test_kept_remake.py): `cells` gains `knob`."""
import sqlalchemy as sa
from alembic import op

revision = "9999"
down_revision = "{head}"
branch_labels = None
depends_on = None
views_sha256 = "not checked here"
rebuilds = ("kept_summary",)


def upgrade() -> None:
    op.add_column("cells", sa.Column("knob", sa.String, nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE cells DROP COLUMN knob")
'''

#: What the copy runs: it upgrades the old database, lands the same runs in a fresh one, and
#: prints both kept summaries.
UPGRADE = '''
import json, sys
from orchestrator.results.collector import collect
from orchestrator.store import db, schema
from sqlalchemy import select
old, fresh, runs = sys.argv[1:]
assert "knob" in schema.Cell.__table__.c and db.SCHEMA_VERSION == "9999"
kept = {}
for url in (old, fresh):
    Session = db.open_db(url)
    if url == fresh:
        collect(Session, runs)
    with Session() as session:
        table = schema.KeptSummary.__table__
        rows = session.execute(select(table).order_by(table.c.cell)).mappings()
        kept[url] = [dict(r) for r in rows]
    Session.kw["bind"].dispose()
print(json.dumps([kept[old], kept[fresh]]))
'''


def head_with_a_new_setting(where):
    """A copy of the orchestrator (and the trainers' shared settings it reads) at `where`, with
    the setting KNOB and its revision 9999 after this head."""
    for package in ("orchestrator", "trainers"):
        shutil.copytree(ROOT / package, where / package, ignore=shutil.ignore_patterns("__pycache__"))
    registry = where / "orchestrator" / "setting_registry.py"
    text = registry.read_text()
    end = "\n)\nBY_NAME"
    assert text.count(end) == 1, "SETTINGS' end moved: find where its last entry ends"
    registry.write_text(text.replace(end, "\n" + KNOB.rstrip("\n") + "\n)\nBY_NAME"))
    versions = where / "orchestrator" / "store" / "migrations" / "versions"
    (versions / "9999_cells_knob.py").write_text(REVISION.format(head=db.SCHEMA_VERSION))
    return where


def in_copy(copy, script, *args):
    """`script` run by a Python that imports the copy's orchestrator."""
    env = {**os.environ, "PYTHONPATH": str(copy)}
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], cwd=copy, env=env,
                          capture_output=True, text=True, timeout=300)


def test_an_old_database_upgrades_past_a_setting_added_after_the_kept_summary(tmp_path, db_url, other_db_url):
    """A database at 0016 (before kept_summary) with runs, upgraded by an orchestrator whose head
    has one more setting: the revisions run on a `cells` without it until 9999 adds it, and the kept
    summary comes out as a fresh database's that collected the same runs, the new setting's default
    filled in. Before the remake, 0017 computed the summary with `cells.knob` not yet there."""
    runs = tmp_path / "runs"
    landed(db_url, runs, 9)
    taken_back(db_url, "0016")
    copy = head_with_a_new_setting(tmp_path / "head")
    done = in_copy(copy, UPGRADE, db_url, other_db_url, runs)
    assert done.returncode == 0, done.stderr[-3000:]
    upgraded, fresh = json.loads(done.stdout.splitlines()[-1])
    assert upgraded == fresh and len(upgraded) == 3
    assert {r["knob"] for r in upgraded} == {"plain"} and {r["n"] for r in upgraded} == {3}
    assert query(db_url, "select version_num from alembic_version") == [("9999",)]


#: What the copy of a crashing upgrade runs: the upgrade, killed (SIGKILL, no cleanup of any kind)
#: as the remake computes the kept summary, after every revision has run.
CRASH = '''
import os, signal, sys
from orchestrator.store import cell_stats, db
cell_stats.summary_select = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
db.open_db(sys.argv[1])
'''


def test_a_crash_in_the_remake_leaves_the_old_revision_which_the_next_opening_upgrades(tmp_path, db_url):
    """The remake is in the revisions' transaction: a process killed in it leaves the database as
    it was (at 0016, no kept_summary), and the next opening upgrades it whole."""
    landed(db_url, tmp_path / "runs", 9)
    taken_back(db_url, "0016")
    crashed = in_copy(ROOT, CRASH, db_url)  # this orchestrator itself
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert query(db_url, "select version_num from alembic_version") == [("0016",)]
    tables = query(db_url, "select name from sqlite_master where type = 'table'" if db_url.startswith("sqlite")
                   else "select tablename from pg_tables where schemaname = current_schema()")
    assert ("kept_summary",) not in tables and ("runs",) in tables
    db.open_db(db_url).kw["bind"].dispose()
    assert len(assert_exact(db_url)) == 3


def test_each_revision_names_kept_tables_the_remake_fills():
    """`rebuilds` names tables of result_rows.FILLS only, and the upgrade from a revision remakes
    what the revisions after it name: from before 0017 both tables, from 0021 kept_summary (0022)."""
    scripts = migrations.script()
    for revision in scripts.walk_revisions():
        assert set(getattr(revision.module, "rebuilds", ())) <= set(result_rows.FILLS), revision.revision
    assert migrations.stale(scripts, None) == migrations.stale(scripts, "0016") == set(result_rows.FILLS)
    assert "kept_summary" in migrations.stale(scripts, "0021")  # 0022's new spread
    assert migrations.stale(scripts, db.SCHEMA_VERSION) == set()
