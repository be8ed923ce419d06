"""Schema migrations of the results database: Alembic, driven from `db.open_db`.

Nobody runs `alembic` by hand and no alembic.ini exists: `open_db` reads the revision the
database records (Alembic's `alembic_version` table) and, when it is not `sql_adapters.SCHEMA_VERSION`,
calls `upgrade` on a connection that holds the database's write lock; Alembic then applies the
revisions in versions/ (env.py is its environment). A new, empty database skips them: open_db
makes it from schema.py's tables and stamps the head (Alembic's recipe for a fresh database), which
test_db checks against what these revisions build. A database made before migrations existed
has tables but no version: the baseline revision (0001) brings it to the layout of the last
release without migrations and keeps its rows.

Views hold no data, so revisions leave them alone: every upgrade drops them first (a table
rebuilt under a view would break it) and creates them from schema.py's definitions last. A change
to a view's definition is still a revision (its `upgrade` may do nothing), so that databases
at the old head get their views rebuilt; its `views_sha256` is the views' fingerprint
(`views_sha256()`), which test_db compares with the definitions in cell_stats.py.

The kept tables (result_rows.FILLS: kept_summary, kept_metrics, kept_lines, kept_lines_due) are computed from other rows by
this orchestrator's code, which reads the head schema: every setting `cells` has now, every
metric. A revision that filled one as it ran would read columns a later revision adds (a new
setting's), and an old database's upgrade would fail there. So no revision fills or alters a kept
table after making it: a revision that changes what one holds names it in `rebuilds` (data, beside
`views_sha256`), and `upgrade` below, once Alembic has run the last revision, drops each table
named by a revision it applied, makes it again from schema.py and fills it (result_rows.remake):
once, by the head code, on the head schema. It is the same transaction as the revisions (the
caller's, which holds the write lock): a crash anywhere leaves the database at its old revision,
which the next opening upgrades again. (The counts `status` reads, kept_counts and
kept_count_deltas, are not among them: they are kept by triggers that their revisions make, and
counted there from four columns of `runs` that no setting or metric changes.)

Adding a revision: copy the newest file in versions/, give it the next `revision` id and the
previous head as `down_revision`, write `upgrade()` with `alembic.op` (on SQLite anything beyond
adding a column needs `op.batch_alter_table`), set `views_sha256`, and `rebuilds` where it changes
what a kept table holds — a setting (a `cells` column: the summary and kept_lines have every
setting), a metric (kept_metrics has every view metric; remaking it remakes kept_lines, whose
text holds its text: result_rows.MADE_FROM), how a kept figure is computed: `rebuilds =
("kept_summary", "kept_metrics", "kept_lines")`. kept_lines_due need not be named: remaking
kept_lines remakes it after (MADE_FROM), so no run is left with neither a kept nor a due row. Its `upgrade()` changes the other tables only: it never adds a kept table's
column (the remake makes it; 0020's csv_text, from before this rule, is safe only because 0019
makes its table without it), nor calls code that reads the head schema. A new kept table is made
and filled by the remake (its entry in result_rows.FILLS; schema.py's declaration), named in its
revision's `rebuilds`, whose `upgrade()` need do nothing and whose `downgrade()` drops it (0023).
A new setting's revision is `COLUMNS` and add_settings / drop_settings below (0026 is one). Name
the file `<revision>_<what>.py`:
`sql_adapters.SCHEMA_VERSION` is read from the names. A test upgrades a database made by an old
release (tests/data/) and compares the result with schema.py's tables.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Optional

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection

from orchestrator.store import cell_stats, result_rows, schema

HERE = Path(__file__).parent


def config(connection: Optional[Connection] = None) -> Any:
    """Alembic's configuration, made in code: the scripts here, and the connection to use."""
    from alembic.config import Config  # lazy: Alembic (~0.3 s) only when a database needs upgrading

    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.attributes["connection"] = connection
    return cfg


def script() -> Any:
    """The revisions (Alembic's ScriptDirectory)."""
    from alembic.script import ScriptDirectory  # lazy: Alembic (~0.3 s) only when a database needs upgrading

    return ScriptDirectory.from_config(config())


def upgrade(connection: Connection) -> Optional[str]:
    """Brings the database on `connection` to the head revision, and then remakes the kept tables
    its revisions name (`rebuilds`), within the caller's transaction; returns the revision it found
    (None: none recorded). Raises schema.SchemaError for a revision these scripts do not know."""
    # lazy: Alembic (~0.3 s) only when a database needs upgrading
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.util import CommandError

    before = MigrationContext.configure(connection).get_current_revision()
    scripts = script()
    if before == scripts.get_current_head():
        return before  # another process upgraded it while this one waited for the lock
    if before is not None:
        try:
            scripts.get_revision(before)
        except CommandError:
            raise schema.SchemaError(
                f"the database is at schema revision {before}, which this orchestrator does not know "
                f"(its newest is {scripts.get_current_head()}): a newer orchestrator wrote it; "
                f"upgrade this one, or point --db / ORCHESTRATOR_DB at another database") from None
    command.upgrade(config(connection), "head")
    result_rows.remake(connection, stale(scripts, before))
    return before


def stale(scripts: Any, before: Optional[str]) -> set[str]:
    """The kept tables named in `rebuilds` by the revisions after `before` (None: every one)."""
    names: set[str] = set()
    for revision in scripts.walk_revisions():  # the newest first
        if revision.revision == before:
            break
        names.update(getattr(revision.module, "rebuilds", ()))
    return names


def add_settings(op: Any, columns: Any) -> None:
    """A revision's new settings (`columns`: (name, SQLAlchemy type) pairs), each a nullable `cells`
    column: a cell at a setting's default stores null, so every cell keeps its id. Its kept columns
    come with the remake (`rebuilds`)."""
    for name, kind in columns:
        op.add_column("cells", sa.Column(name, kind, nullable=True))


def drop_settings(op: Any, columns: Any) -> None:
    """add_settings undone (the views first dropped by the caller); the kept tables keep their
    columns until the next upgrade remakes them."""
    for name, _ in columns:
        op.execute(f"ALTER TABLE cells DROP COLUMN {name}")


def views_sha256() -> str:
    """A fingerprint of the views' definitions (their SQL as SQLite reads it)."""
    sql = "\n".join(cell_stats.view_sql(name, sqlite.dialect()) for name in cell_stats.VIEWS)
    return hashlib.sha256(sql.encode()).hexdigest()[:16]
