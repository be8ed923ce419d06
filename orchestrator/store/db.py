"""The results database: sweeps, cells, runs and their metrics, and two readable views.

Only the launcher (which records what it hands to the executor) and the collector (which lands
`result.json` files) write here; jobs never do, so a cluster's compute nodes need no database
access. The file is SQLite by default so that a sweep's results are one file to copy, query with
the `sqlite3` shell, or attach to a notebook; any SQLAlchemy URL works for a shared server.

Concurrency: a launcher, `status` and any number of collectors may open, make or upgrade the
same SQLite file at once: on a local disk each connection uses WAL journaling (readers never
block the writer) and waits up to `sqlite_sharing.BUSY_TIMEOUT_S` for the write lock, and the journal
switch and the schema's making or upgrade are done by one process at a time (sqlite_sharing.py says
why SQLite's own waiting does not cover them). On a network file system, where several login nodes
may reach one file, the file keeps the rollback journal and writers on every host take turns
through a writer lease (sqlite_sharing.py, docs/shared-results.md); a group is better served by a
database server (any SQLAlchemy URL). Jobs on compute nodes never open the database.

Schema changes are Alembic revisions (orchestrator/store/migrations), applied by `open_db`: the
database records its revision in `alembic_version`, and one older than `SCHEMA_VERSION` (or made
before migrations existed) is upgraded in place, in one transaction that holds the write lock;
a new, empty one is made at the head directly from schema.py's tables (test_db checks the two
ways give the same database).

The tables and views themselves are declared in schema.py (which the migrations also read).
"""
from __future__ import annotations

import json
import logging
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Optional, Sequence

from sqlalchemy import Column, Engine, MetaData, PrimaryKeyConstraint, String, Table, create_engine, event, inspect, select
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import sessionmaker
from sqlalchemy.sql import column, table

from orchestrator.store import kept_counts, migrations, sqlite_connection, sqlite_lease, sqlite_sharing
# the schema's revision and the connection settings, kept where status reads them without SQLAlchemy
from orchestrator.store.sql_adapters import SCHEMA_VERSION, hide_passwords, masked_url, sqlite_pragmas
# the tables and views, declared in schema.py (read from there: db.py opens, makes and upgrades)
from orchestrator.store.schema import Base
# the views, made from the read layer's selects (cell_stats.py)
from orchestrator.store.cell_stats import create_views

log = logging.getLogger(__name__)


#: The text of a JSON column's value: json.dumps's, without its check for a mapping that holds
#: itself (a config or settings never does: they come from YAML and plain values), which walked
#: every mapping of the 10,000 configs a launch records (~0.03 s of its 0.2 s of JSON).
JSON_TEXT = json.JSONEncoder(check_circular=False)


class NoDatabase(RuntimeError):
    """The database a read-only command was pointed at does not exist or holds no runs table."""


class Unusable(ArgumentError):
    """The database URL cannot be used: not a URL, its driver is missing, nothing answers there,
    or the file is not a database. The message says why and what to do; `url` is the URL as
    shown (no password). An ArgumentError, as a bad URL is, so that every caller that already
    answers a bad URL with a message answers these too."""

    WHERE = "ORCHESTRATOR_DB (paths.db=, --db)"

    def __init__(self, url: str, reason: str, way_out: str) -> None:
        super().__init__(f"{reason}; {way_out}")
        self.url = url

    @classmethod
    def of(cls, url: str, exc: BaseException) -> "Unusable":
        shown = masked_url(url)
        cause = " ".join(str(getattr(exc, "orig", None) or exc).split())[:300]
        if isinstance(exc, ImportError):
            return cls(shown, f"its driver is not installed ({cause})",
                       f"install it into this environment (pip install psycopg for postgresql), or point "
                       f"{cls.WHERE} at sqlite:///results.db")
        if isinstance(exc, ArgumentError):
            return cls(shown, f"it is not a database URL SQLAlchemy can use ({cause})",
                       f"write {cls.WHERE} as sqlite:///path/results.db or dialect://user@host/name")
        path = sqlite_path(url)
        if path is not None and sqlite_sharing.damaged(cause):
            return cls(shown, f"the SQLite file is damaged ({cause})", sqlite_sharing.damaged_way_out(str(path)))
        if "not a database" in cause:
            return cls(shown, f"the file is not a SQLite database ({cause})",
                       f"move it away (a new results database is made there), or point {cls.WHERE} at "
                       f"the orchestrator's database")
        if path is not None:
            return cls(shown, f"the SQLite file cannot be opened or written ({cause})",
                       f"check that its directory exists and is writable, or point {cls.WHERE} elsewhere")
        return cls(shown, f"the database server does not answer or refuses ({cause})",
                   f"start it or fix the URL's host, port, name and credentials, or point {cls.WHERE} at "
                   f"sqlite:///results.db")



#: What a command sets itself (`--runs`, `--db`), never a recorded override: `paths.db` is a URL with its password.
COMMANDS_OWN = {"paths.runs": "--runs DIR", "paths.db": "--db URL"}


def recordable(words: Sequence[str]) -> list[str]:
    """A command line's or a cell's overrides as the shared database keeps them (sweeps.argv,
    sweeps.overrides, refusals): less the command's own `paths.db=`/`paths.runs=` (its URL, which
    Hydra's escaping hides from any pattern), every other URL's password masked."""
    return [hide_passwords(word) for word in words if word.split("=", 1)[0].lstrip("+~") not in COMMANDS_OWN]


def sqlite_path(url: str) -> Optional[Path]:
    """The file behind a SQLite URL, or None for other databases and in-memory SQLite. A port
    that is no number (`host:x`), which SQLAlchemy's parser meets as int()'s ValueError, is a URL
    it cannot use (ArgumentError): said in one line, as every other (a traceback before)."""
    try:
        parsed = make_url(url)
    except ValueError as exc:
        raise ArgumentError(f"its port is not a number: {exc}") from None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def open_db(url: str, create: bool = True) -> sessionmaker:
    """Connects to `url`, brings its schema up to date, returns a sessionmaker.

    A database at another revision than SCHEMA_VERSION (an empty one, one made by an older
    release, with or without a version table) is upgraded in place, by every opening: a
    read-only command on an outdated file upgrades it too, as a user who installed a newer
    orchestrator expects, and says so on stderr. With `create=False` (commands that only read)
    a missing SQLite file or a database without the orchestrator's tables raises NoDatabase
    instead of leaving an empty database behind.
    """
    try:
        path = sqlite_path(url)
        if not create and path is not None and not path.exists():
            raise NoDatabase(f"no {path} here")
        engine = create_engine(url, json_serializer=JSON_TEXT.encode,
                               **({"connect_args": sqlite_connection.connect_args(str(path))} if path else {}))
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_pragmas)
        # on a network file system, what is found and what is done about it in one turn of the
        # lease: another host does not see the schema half made (sqlite_sharing.py: the one gap)
        with sqlite_lease.lease_held(str(path)) if path else nullcontext():
            has_runs, current = _layout(engine)
            if not create and not has_runs:
                engine.dispose()
                raise NoDatabase(f"{path or masked_url(url)} holds no orchestrator tables")
            if current != SCHEMA_VERSION:
                with sqlite_sharing.setup_lock(str(path)) if path else nullcontext():
                    before = _upgrade(engine)
                if has_runs and before != SCHEMA_VERSION:
                    log.warning("upgraded %s in place from schema %s to %s", path or masked_url(url),
                                before or "(none recorded: made before migrations)", SCHEMA_VERSION)
    except (ArgumentError, ImportError, DBAPIError) as exc:  # never a traceback: why, and what to do
        if isinstance(getattr(exc, "orig", None), (sqlite_lease.LeaseRefused, sqlite_lease.LeaseLost)):
            raise exc.orig from None  # the lease's own line (it waited already), not "cannot be opened"
        raise Unusable.of(url, exc) from exc
    return sessionmaker(engine, expire_on_commit=False)


def _layout(engine: Engine) -> tuple[bool, Optional[str]]:
    """Whether the database has the runs table, and the revision it records."""
    with engine.connect() as conn:
        return inspect(conn).has_table("runs"), schema_version(conn)


def schema_version(conn: Connection) -> Optional[str]:
    """The revision the database records (Alembic's `alembic_version`); None before migrations.

    Read with one query, without importing Alembic, so that opening an up-to-date database
    costs a command nothing."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(select(column("version_num")).select_from(table("alembic_version"))).scalar()


def _upgrade(engine: Engine) -> Optional[str]:
    """Upgrades the database to SCHEMA_VERSION (orchestrator/store/migrations) in one transaction that
    holds the write lock, safely when two processes open an outdated or fresh database together;
    returns the revision it was at.

    On SQLite the upgrader holds the setup lock (open_db) and takes the write lock (BEGIN
    IMMEDIATE), so the other waits (up to sqlite_sharing.BUSY_TIMEOUT_S) and then finds the
    database at the head and does nothing. On PostgreSQL the upgrader first takes a lock of
    this database (pg_advisory_xact_lock, released with the transaction), with the same effect:
    two CREATE TABLEs of one name never race (the loser's error is a unique violation in the
    catalog, an IntegrityError). Elsewhere the loser's "already exists" error is retried once.
    """
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            before = _create_or_upgrade(conn)
            conn.commit()
        return before
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            # one upgrader at a time, as BEGIN IMMEDIATE does on SQLite: the other waits for this
            # transaction, then finds the database at the head (a lock of this database only)
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_UPGRADE_LOCK})")
            return _create_or_upgrade(conn)
    try:
        with engine.begin() as conn:
            return _create_or_upgrade(conn)
    except (OperationalError, ProgrammingError, IntegrityError):  # another process created the same table first
        with engine.begin() as conn:
            return _create_or_upgrade(conn)


def _create_or_upgrade(conn: Connection) -> Optional[str]:
    """A database with no tables at all is made at the head at once: schema.py's tables and views,
    stamped SCHEMA_VERSION — Alembic's own recipe for a new database (`create_all`, then stamp
    the head), which spares a first command Alembic's import and ten revisions (~0.3 s);
    test_db checks that it is the database the revisions build. Any other is upgraded by the
    revisions (orchestrator/store/migrations). Returns the revision it was at."""
    if inspect(conn).get_table_names():
        return migrations.upgrade(conn)
    Base.metadata.create_all(conn)
    create_views(conn)
    kept_counts.create(conn.exec_driver_sql, conn.dialect.name)
    kept_counts.create_deltas(conn.exec_driver_sql, conn.dialect.name)
    _ALEMBIC_VERSION.create(conn)
    conn.execute(_ALEMBIC_VERSION.insert().values(version_num=SCHEMA_VERSION))
    return None


#: The key of the PostgreSQL advisory lock an upgrade holds (any constant: "orch" in ASCII).
_UPGRADE_LOCK = 0x6F726368

#: Alembic's version table, as Alembic makes it (`alembic.runtime.migration`).
_ALEMBIC_VERSION = Table("alembic_version", MetaData(),
                         Column("version_num", String(32), nullable=False),
                         PrimaryKeyConstraint("version_num", name="alembic_version_pkc"))


def _sqlite_pragmas(dbapi_connection: Any, connection_record: Any) -> None:
    """Per connection: sql_adapters.sqlite_pragmas (the journal mode, the busy timeout, mmap, sqrt)."""
    sqlite_pragmas(dbapi_connection)
