"""The SQLite connection to a file on a network file system, which takes the file's writer lease
(sqlite_lease.py) when it first prepares a statement and gives it back at commit, rollback or
close; and the connect arguments that choose it where the file's policy takes a lease
(sqlite_sharing.py). Only the standard library.
"""
from __future__ import annotations

import sqlite3
from typing import Any, Optional

from orchestrator.store.sqlite_lease import LeaseLost, LeaseRefused, _Lease, lease_of
from orchestrator.store.sqlite_sharing import path_of, policy_for

#: The authorizer's actions that write the file (what a second host must not do where locks are local).
WRITES = frozenset(getattr(sqlite3, name) for name in dir(sqlite3) if (name.startswith(
    ("SQLITE_CREATE_", "SQLITE_DROP_")) and "TEMP" not in name) or name in (
        "SQLITE_INSERT", "SQLITE_UPDATE", "SQLITE_DELETE", "SQLITE_ALTER_TABLE", "SQLITE_REINDEX"))


class LeasedConnection(sqlite3.Connection):
    """A connection to a file on a network file system: takes the lease when it first prepares a
    statement (SQLite's authorizer is asked at every prepare; connect_args turns the statement
    cache off, so that none is skipped), gives it back after its commit, rollback or close."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lease: Optional[_Lease] = None
        self._holds = False
        self._refused: Optional[LeaseRefused] = None
        path = path_of(self)
        self._one_host = self._may_write = False
        if path:
            self._lease, self._one_host = lease_of(path), policy_for(path).one_host
            self.set_authorizer(self._authorize)

    def _authorize(self, action: int, arg1: Any, arg2: Any, dbname: Any, source: Any) -> int:
        try:
            if not self._holds and self._lease is not None:
                self._lease.acquire()
                self._holds, self._may_write = True, not self._one_host
            if not self._may_write and action in WRITES and self._lease is not None:
                self._lease.check_one_host()
                self._may_write = True
        except LeaseRefused as exc:  # an authorizer cannot raise: said by execute instead
            self._refused = exc
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def _give_back(self) -> None:
        if self._holds and self._lease is not None:
            self._holds = False
            self._lease.release()

    def commit(self) -> None:
        if self._holds and self.in_transaction and self._lease is not None:
            try:
                self._lease.fence()  # a lost lease: another host may write; this commit must not land
            except LeaseLost:
                self.rollback()
                raise
        try:
            super().commit()
        finally:
            if not self.in_transaction:
                self._give_back()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self._give_back()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._give_back()

    def cursor(self, factory: Any = None) -> sqlite3.Cursor:
        return super().cursor(factory or LeasedCursor)

    def execute(self, *args: Any) -> sqlite3.Cursor:
        return self.cursor().execute(*args)

    def executemany(self, *args: Any) -> sqlite3.Cursor:
        return self.cursor().executemany(*args)

    def refused(self, exc: sqlite3.DatabaseError) -> BaseException:
        """What a statement's failure means: the lease's refusal where that denied it."""
        refused, self._refused = self._refused, None
        return refused if refused is not None else exc


class LeasedCursor(sqlite3.Cursor):
    """Says a refused lease as itself, not as SQLite's 'not authorized'."""

    def execute(self, *args: Any) -> "LeasedCursor":
        return self._said(super().execute, args)

    def executemany(self, *args: Any) -> "LeasedCursor":
        return self._said(super().executemany, args)

    def _said(self, run: Any, args: tuple[Any, ...]) -> "LeasedCursor":
        try:
            return run(*args)
        except sqlite3.DatabaseError as exc:
            said = self.connection.refused(exc)
            if said is exc:
                raise
            raise said from None


def connect_args(path: str) -> dict[str, Any]:
    """sqlite3.connect's extra arguments for the file at `path`: the leased connection where
    the policy takes a lease."""
    return {"factory": LeasedConnection, "cached_statements": 0} if policy_for(path).lease else {}
