"""SQL text over one connection to the results database, with or without SQLAlchemy.

`status` is the command typed most often, while a sweep runs, and it must answer in half a
second over 100,000 runs (docs/scale.md); importing SQLAlchemy alone takes 0.25–0.3 s of that
on a 2-core login node. So what `status` runs — the reconciliation of open runs
(tracking.reconcile) and its counts and examples — is SQL text with `:name` parameters, run
through one of two small adapters with the same three methods:

- `connect(url)`: Python's own sqlite3, on a SQLite file already at SCHEMA_VERSION, or psycopg
  itself on a `postgresql+psycopg://` database at SCHEMA_VERSION (the URL read as SQLAlchemy
  reads it, its `:name` parameters written as psycopg's `%(name)s`);
- `Rows.of(session)`: a SQLAlchemy session, for every other case (another database, a file
  that must be made or upgraded first) and for the commands that hold a session anyway.

db.open_db stays the one place that makes, upgrades and explains a database: `connect` answers
None wherever it would have to (no such file or database, another revision, a URL with options
SQLite's path does not read), and the caller opens the database through db.open_db instead. A
PostgreSQL server that does not answer or refuses the login is not asked twice: its error is raised. This
module imports only the standard library (psycopg where the URL names it), and db.py takes its
connection settings, schema revision and password masking from here.
"""
from __future__ import annotations

import math
import os
import re
import sqlite3
from collections import namedtuple
from functools import lru_cache
from typing import Any, Iterator, Mapping, Optional, Sequence
from urllib.parse import parse_qsl, quote, unquote

from orchestrator.store.sqlite_connection import connect_args
from orchestrator.store.sqlite_lease import LeaseLost, LeaseRefused
from orchestrator.store.sqlite_sharing import BUSY_TIMEOUT_S, apply_pragmas

#: The Alembic revision the tables and views of schema.py are: the head of orchestrator/store/migrations/versions,
#: read from its files' names (`<revision>_<what>.py`, each revision the one before plus one: test_db
#: checks that this is Alembic's own head), so that a new revision is that file alone. A listing, not
#: an import: `status` reads it without Alembic.
SCHEMA_VERSION = max(name.split("_", 1)[0] for name in os.listdir(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations", "versions"))
    if name.endswith(".py") and name[:1].isdigit())
#: How a plain SQLite file URL begins (`sqlite:///results.db`, `sqlite:////abs/results.db`).
SQLITE_FILE = "sqlite:///"
#: How a PostgreSQL URL read through psycopg (version 3) begins, the driver SQLAlchemy names so.
POSTGRES_PSYCOPG = "postgresql+psycopg://"
#: SQLAlchemy's own reading of a URL (sqlalchemy.engine.url._parse_url), so that `status` connects
#: where db.open_db would: user, password, host ([IPv6] too), port, database, query options.
_URL = re.compile(r"(?P<name>[\w+]+)://(?:(?P<username>[^:/]*)(?::(?P<password>[^@]*))?@)?"
                  r"(?:(?:\[(?P<ipv6host>[^/?]+)\]|(?P<ipv4host>[^/:?]+))?(?::(?P<port>[^/?]*))?)?"
                  r"(?:/(?P<database>[^?]*))?(?:\?(?P<query>.*))?")
#: A `:name` parameter of SQL text (not a PostgreSQL `::type` cast).
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
#: The `user:password@` part of a URL inside a word (`+cluster.setup=[export DB=postgresql://alice:secret@db/b]`),
#: Hydra's escaped spelling (`postgresql\\://alice\\:secret@db`) included: scheme and user kept, the password masked.
_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*\\?://[^:/@\s]*:)[^@\s]*@")
#: A URL inside a word, up to the next blank: where _QUERY_PASSWORD is looked for.
_URL_WORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*\\?://\S*")
#: Every password option of a URL's query, in any case (`?password=pw`: libpq takes it as it takes the
#: user's part; `&sslpassword=pw`: the client key's passphrase; SQLAlchemy's own rendering shows both;
#: the review found the second printed, and a second option left shown): each value masked.
_QUERY_PASSWORD = re.compile(r"((?:\\?\?|&)(?i:(?:ssl)?password)=)[^&\s\]]*")
#: Query options create_engine itself takes out of a URL (plugins it loads): not libpq's.
SQLALCHEMY_OPTIONS = ("plugin",)


def hide_passwords(text: str) -> str:
    """`text` with the password of every URL in it masked (`***`), the rest byte for byte: what is
    kept in the shared database of a command line or printed. A pattern, not a URL parser: a word
    that is no URL (`docker://ubuntu:22.04]`, `file:///x/conf]`) is left as it is, never refused.
    Here, not in db.py: `status` prints a PostgreSQL URL without importing SQLAlchemy. A word
    without `://` holds no URL: returned at once (each cell's overrides pass here)."""
    if "://" not in text:
        return text
    masked = _PASSWORD.sub(r"\1***@", text)
    return _URL_WORD.sub(lambda url: _QUERY_PASSWORD.sub(r"\1***", url.group()), masked)


def default_url() -> str:
    """The database the orchestrator uses unless told otherwise (`ORCHESTRATOR_DB`)."""
    return os.environ.get("ORCHESTRATOR_DB", "sqlite:///results.db")


def sqlite_pragmas(conn: Any) -> None:
    """Per connection (sqlite3's, or the one under SQLAlchemy's): the file's journal mode, waits and
    durability (sqlite_sharing.apply_pragmas: WAL on a local disk, the rollback journal on a network
    file system), and sqrt() where SQLite lacks it."""
    apply_pragmas(conn)
    try:  # cell_summary needs sqrt(); SQLite builds without its math functions get Python's
        conn.execute("SELECT sqrt(4)")
    except Exception:
        conn.create_function("sqrt", 1, _sqrt)
    conn.commit()  # no transaction is open: a connection on a network file system ends its lease's turn


def _sqrt(x: Any) -> Optional[float]:
    return None if x is None or x < 0 else math.sqrt(x)


def sqlite_file(url: str) -> Optional[str]:
    """The file of a plain SQLite file URL, as SQLAlchemy reads it; None for anything else (another
    database, in-memory SQLite, a driver or options in the URL, an escaped character)."""
    if not url.startswith(SQLITE_FILE):
        return None
    path = url[len(SQLITE_FILE):]
    if not path or path == ":memory:" or any(c in path for c in "?%#"):
        return None
    return path


def in_list(name: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """An IN list of parameters for SQL text: `(:name_0, :name_1, ...)` and their values (never
    empty: callers with nothing to match ask nothing)."""
    if not values:
        raise ValueError(f"in_list({name!r}): no values")
    keys = [f"{name}_{i}" for i in range(len(values))]
    return "(" + ", ".join(f":{k}" for k in keys) + ")", dict(zip(keys, values))


@lru_cache(maxsize=64)
def _row_type(names: tuple[str, ...]) -> Any:
    return namedtuple("Row", names)  # type: ignore[misc]


class Rows:
    """SQL text with `:name` parameters over one connection: `rows` (an iterator of rows whose
    columns read as attributes), `all`, `many` (one statement per set of parameters) and `commit`.
    `url` is the database's URL, for messages; `dialect` its SQLAlchemy dialect's name (what a
    query that differs by database asks, as queries.latest_counts does)."""

    url: str
    dialect = "sqlite"

    @staticmethod
    def of(session: Any) -> "Rows":
        """The adapter over a SQLAlchemy session (which the caller keeps and closes)."""
        return SessionRows(session)

    def rows(self, sql: str, params: Optional[Mapping[str, Any]] = None) -> Iterator[Any]:
        raise NotImplementedError

    def all(self, sql: str, params: Optional[Mapping[str, Any]] = None) -> list[Any]:
        return list(self.rows(sql, params))

    def many(self, sql: str, params: Sequence[Mapping[str, Any]]) -> int:
        """Runs `sql` once per set of parameters; how many rows they changed in all."""
        raise NotImplementedError

    def commit(self) -> None:
        raise NotImplementedError


class SqliteRows(Rows):
    """Rows over Python's sqlite3 (and its C speed, without SQLAlchemy's import)."""

    def __init__(self, conn: sqlite3.Connection, url: str) -> None:
        self.conn, self.url = conn, url

    def rows(self, sql: str, params: Optional[Mapping[str, Any]] = None) -> Iterator[Any]:
        cursor = self.conn.execute(sql, dict(params or {}))
        make = _row_type(tuple(d[0] for d in cursor.description))._make
        return (make(r) for r in cursor)

    def many(self, sql: str, params: Sequence[Mapping[str, Any]]) -> int:
        return self.conn.executemany(sql, params).rowcount if params else 0

    def commit(self) -> None:
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "SqliteRows":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SessionRows(Rows):
    """Rows over a SQLAlchemy session (imported by whoever made the session)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.url = str(session.get_bind().url)
        self.dialect = session.get_bind().dialect.name

    def rows(self, sql: Any, params: Optional[Mapping[str, Any]] = None) -> Iterator[Any]:
        """SQL text, or a SQLAlchemy statement (the read layer's Core: run_history's, which only a
        holder of a session asks)."""
        # lazy: status reads through sqlite3 without SQLAlchemy; only a session's rows need it
        from sqlalchemy import text

        statement = text(sql) if isinstance(sql, str) else sql
        return iter(self.session.execute(statement, dict(params or {}), execution_options={"yield_per": 500}))

    def many(self, sql: str, params: Sequence[Mapping[str, Any]]) -> int:
        # lazy: status reads through sqlite3 without SQLAlchemy; only a session's rows need it
        from sqlalchemy import text

        return self.session.execute(text(sql), list(params)).rowcount if params else 0

    def commit(self) -> None:
        self.session.commit()


class PostgresRows(SqliteRows):
    """Rows over psycopg itself (what SQLAlchemy's engine runs on, without its 0.3 s import): the
    `:name` parameters of SQL text written as psycopg's `%(name)s`; close and `with` as sqlite3's."""

    dialect = "postgresql"

    def rows(self, sql: str, params: Optional[Mapping[str, Any]] = None) -> Iterator[Any]:
        return iter(self.conn.execute(_pyformat(sql), dict(params or {})))

    def many(self, sql: str, params: Sequence[Mapping[str, Any]]) -> int:
        if not params:
            return 0
        with self.conn.cursor() as cursor:
            cursor.executemany(_pyformat(sql), [dict(p) for p in params])
            return cursor.rowcount


@lru_cache(maxsize=256)
def _pyformat(sql: str) -> str:
    """SQL text's `:name` parameters as psycopg's `%(name)s` (a literal `%` doubled)."""
    return _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))


def postgres_params(url: str) -> Optional[dict[str, Any]]:
    """psycopg's connection keywords for a `postgresql+psycopg://` URL, read as SQLAlchemy's psycopg
    dialect reads it (user, password and database unescaped, host and port as written, blank query
    options dropped, the others passed on to libpq over the URL's own parts); None for any other URL
    or one only SQLAlchemy reads (an option given twice, several hosts or ports, an escape or other
    than digits in the host or port, an option create_engine takes itself: SQLALCHEMY_OPTIONS)."""
    found = _URL.match(url) if url.startswith(POSTGRES_PSYCOPG) else None
    if found is None:
        return None
    query = parse_qsl(found["query"] or "")  # as sqlalchemy.engine.url._parse_url: blank values dropped
    options = dict(query)
    host, port = found["ipv6host"] or found["ipv4host"], found["port"]
    if (len(options) != len(query) or any(k in options for k in SQLALCHEMY_OPTIONS) or "%" in (host or "") + (port or "") or not (port or "0").isdigit()
            or any(c in options.get("host", "") for c in ",:") or not options.get("port", "0").isdigit()):
        return None
    words = {"user": found["username"], "password": found["password"], "dbname": found["database"]}
    params = {k: unquote(v) for k, v in words.items() if v}
    params.update((k, v) for k, v in (("host", host), ("port", port and str(int(port)))) if v and v != "0")
    params.update(options)
    return params


def masked_url(url: str) -> str:
    """`url` fit to print: the password SQLAlchemy would read in it (the part of _URL's match, so
    a user name with `@` or a password with spaces too) replaced by `***`, as str(sqlalchemy URL)
    shows it; any other URL's password within (hide_passwords) masked as well. A password with an
    unescaped `@` (`u:p@ss@host`) ends at its first `@` for SQLAlchemy, which takes `ss@host` for
    the host: masked up to the host's last `@`, so that no part of it is shown."""
    found = _URL.match(url)
    if found is None or found["password"] is None:
        return hide_passwords(url)
    host, end = found["ipv4host"] or "", found.end("password")
    if "@" in host:
        end = found.start("ipv4host") + host.rindex("@")
    return hide_passwords(url[:found.start("password")] + "***" + url[end:])


def connect(url: str) -> Optional[SqliteRows]:
    """Rows over sqlite3 when `url` is a SQLite file at SCHEMA_VERSION, over psycopg when it is a
    `postgresql+psycopg://` database at SCHEMA_VERSION; otherwise None, and the caller opens the
    database through db.open_db (which makes, upgrades or explains it)."""
    if postgres_params(url) is not None:
        return _connect_postgres(url)
    path = sqlite_file(url)
    if path is None or not os.path.isfile(path):
        return None
    try:
        # mode=rw: never make a file here (a missing one is db.open_db's to explain)
        conn = sqlite3.connect(f"file:{_quote(os.path.abspath(path))}?mode=rw", uri=True,
                               timeout=BUSY_TIMEOUT_S, **connect_args(path))
    except sqlite3.Error:
        return None
    try:
        version = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        if version != [(SCHEMA_VERSION,)]:
            conn.close()
            return None
        sqlite_pragmas(conn)
    except (LeaseRefused, LeaseLost):  # waited its one wait already: said as it is, never waited again
        conn.close()
        raise
    except sqlite3.Error:  # not a database, no version table, a lock held too long: db.open_db's to say
        conn.close()
        return None
    return SqliteRows(conn, url)


def _connect_postgres(url: str) -> Optional[PostgresRows]:
    """Rows over psycopg on a database at SCHEMA_VERSION; None where db.open_db has more to say or
    do: no such database, no orchestrator tables, another revision, no psycopg installed (a read
    never makes a database here). Any other failure to connect (nothing answers, a wrong password) is raised as it is,
    said once in one line (commands.common.database_error), never tried again through SQLAlchemy."""
    try:
        # lazy: psycopg (~0.05 s) only for a PostgreSQL URL: SQLite's `status` and --help start without it
        import psycopg
        from psycopg.rows import namedtuple_row
    except ImportError:  # an optional extra (`postgres`): db.open_db says it is missing, and the way out
        return None

    params = postgres_params(url) or {}
    try:
        conn = psycopg.connect(**params, row_factory=namedtuple_row)
    except psycopg.OperationalError as exc:  # libpq's message: no SQLSTATE on a failed connection
        if f'database "{params.get("dbname", "")}' in str(exc) and "does not exist" in str(exc):
            return None
        raise
    try:
        version = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    except psycopg.Error:  # no version table: no orchestrator tables, or made before migrations
        version = []
    if [tuple(v) for v in version] != [(SCHEMA_VERSION,)]:
        conn.close()
        return None
    return PostgresRows(conn, masked_url(url))


def _quote(path: str) -> str:
    """A path fit for a `file:` URI (sqlite3 reads `?` and `#` and `%XX` there)."""
    return quote(path, safe="/")
