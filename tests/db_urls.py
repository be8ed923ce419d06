"""The results database under test, SQLite or PostgreSQL: a fresh one per test (conftest `db_url`)
and dialect-neutral ways to read it (SQL text through SQLAlchemy, or the plain driver).

The PostgreSQL server is the private one of scripts/postgres.sh, found through
ORCHESTRATOR_TEST_POSTGRES (its URL; scripts/test.sh exports it) or, where that is unset,
`scripts/postgres.sh url`. Each test gets a database of its own on it (CREATE DATABASE t_<random>),
dropped afterwards WITH (FORCE), so that connections a test left open do not keep it.
"""
from __future__ import annotations

import os
import secrets
import sqlite3
import subprocess
from pathlib import Path
from typing import Any, Mapping, Optional

REPO = Path(__file__).resolve().parent.parent
#: The variable naming the test server's URL (a role that may CREATE DATABASE).
POSTGRES_ENV = "ORCHESTRATOR_TEST_POSTGRES"
HOW = ("start it as root with `scripts/postgres.sh start` and export "
       f"{POSTGRES_ENV}=\"$(scripts/postgres.sh url)\" (scripts/test.sh does both when run as root)")


def postgres_server() -> tuple[Optional[str], str]:
    """(the test server's URL, '') where one answers; (None, why not) elsewhere."""
    url = os.environ.get(POSTGRES_ENV, "").strip()
    where = f"${POSTGRES_ENV}"
    if not url:
        try:
            done = subprocess.run(["bash", str(REPO / "scripts" / "postgres.sh"), "url"], capture_output=True,
                                  text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"{POSTGRES_ENV} is unset and scripts/postgres.sh url failed ({exc})"
        if done.returncode != 0 or not done.stdout.strip():
            return None, f"{POSTGRES_ENV} is unset and no server answers (scripts/postgres.sh url: " \
                         f"{' '.join(done.stderr.split())[-200:] or done.returncode})"
        url, where = done.stdout.strip().splitlines()[-1], "scripts/postgres.sh url"
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        return None, f"the driver is missing ({exc}): pip install 'psycopg[binary]' (the `test` extra has it)"
    try:
        engine = _admin(url)
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        engine.dispose()
    except Exception as exc:  # noqa: BLE001 - said in the skip
        return None, f"{url} (from {where}) does not answer: {' '.join(str(exc).split())[:300]}"
    return url, ""


def _admin(server_url: str) -> Any:
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    return create_engine(server_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)


def create_database(server_url: str, prefix: str = "t_") -> str:
    """A new, empty database on the server; its URL (the server's, another database name)."""
    from sqlalchemy.engine import make_url

    name = f"{prefix}{secrets.token_hex(6)}"
    engine = _admin(server_url)
    with engine.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    engine.dispose()
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


def drop_database(server_url: str, url: str) -> None:
    """Drops the database of `url`, ending whatever connections are still open to it."""
    from sqlalchemy.engine import make_url

    name = make_url(url).database
    engine = _admin(server_url)
    with engine.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    engine.dispose()


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def sqlite_file(url: str) -> Path:
    """The file of a sqlite:/// URL."""
    assert is_sqlite(url), url
    return Path(url.split("///", 1)[1])


def query(url: str, sql: str, params: Optional[Mapping[str, Any]] = None) -> list[tuple]:
    """The rows (tuples) of SQL text with :name parameters, on a connection of its own."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql), dict(params or {}))]
    finally:
        engine.dispose()


def execute(url: str, *statements: str) -> None:
    """Runs SQL statements (text, no parameters) in one transaction, committed."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            for sql in statements:
                conn.exec_driver_sql(sql)
    finally:
        engine.dispose()


def plain(url: str) -> Any:
    """A connection of the plain driver, no SQLAlchemy (what `sqlite3 results.db` or `psql` use),
    whose rows read as mappings too: sqlite3 with sqlite3.Row, psycopg with dict rows."""
    if is_sqlite(url):
        con = sqlite3.connect(sqlite_file(url))
        con.row_factory = sqlite3.Row
        return con
    import psycopg
    from psycopg.rows import dict_row
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return psycopg.connect(host=u.host, port=u.port, user=u.username, password=u.password, dbname=u.database,
                           row_factory=dict_row, autocommit=True)


def plain_rows(url: str, sql: str) -> list[dict[str, Any]]:
    """Rows (dicts in column order) of SQL without parameters, through the plain driver."""
    con = plain(url)
    try:
        return [dict(r) for r in con.execute(sql).fetchall()]
    finally:
        con.close()
