"""What the commands share: the database they read, the sweeps they pick, and how a problem
is said (one line that says what to do, never a traceback)."""
from __future__ import annotations

import os
import sqlite3
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Union

from orchestrator.store import queries
from orchestrator.store.sql_adapters import Rows, connect, masked_url, sqlite_file
from orchestrator.sweep.config_checks import ConfigError
from orchestrator.store.sqlite_lease import LeaseLost, LeaseRefused
from orchestrator.store.sqlite_sharing import damaged, damaged_way_out

if TYPE_CHECKING:
    from rich.console import Console
    from sqlalchemy.orm import sessionmaker

#: A command's database: its URL, opened by the command, or the handle (db.open_db's sessionmaker)
#: of a launch that opened it once and passes it on to the commands it runs after its jobs.
Database = Union[str, "sessionmaker"]

PROG = "python -m orchestrator"
LAUNCH_HINT = f"run a sweep first: {PROG} -m framework=torch model=lenet dataset=mnist"
#: schema.NOISY_CV in percent, for the help text (which must not import the database code; a test
#: holds the two equal).
NOISY_CV_PERCENT = 5.0


class CliError(Exception):
    """A problem with what the user asked for; its message says what to do instead."""


def default_runs() -> str:
    return os.environ.get("ORCHESTRATOR_RUNS", "runs")


def answer(command: Callable[[], int], url: str) -> int:
    """Runs a command; returns its exit status, or 1 with its problem said on stderr in one line
    (a CliError, a recorded config today's checks refuse, any database's error)."""
    try:
        return command()
    except CliError as exc:
        message = str(exc)
    except BrokenPipeError:  # `status --failed | head` stopped reading: nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (nor at exit)
        return 1
    except ConfigError as exc:  # a recorded config `rerun` resubmits, refused by today's checks
        message = str(exc)
    except Exception as exc:  # noqa: BLE001 - the database's errors; anything else is re-raised
        said = database_error(exc, url)
        if said is None:
            raise
        message = said
    print(message, file=sys.stderr)
    return 1


def database_error(exc: Exception, url: str) -> Optional[str]:
    """What to say of a database error (None: it is not one). SQLAlchemy's and db's errors are
    looked for only where the command imported them (`status` on a current SQLite file reads it
    with sqlite3 alone: orchestrator.store.sql_adapters)."""
    if isinstance(exc, (LeaseRefused, LeaseLost)):
        return str(exc)  # its one line names the holder or the loss, and the way out
    psycopg = sys.modules.get("psycopg")  # status's own driver on PostgreSQL, where it read one
    drivers = (sqlite3.Error, psycopg.Error) if psycopg else (sqlite3.Error,)
    said = exc if isinstance(exc, drivers) else None  # the driver's error, said as it is
    if "orchestrator.store.db" in sys.modules:
        # lazy: SQLAlchemy (~0.3 s) only in the commands that need it: `status` and --help start without it
        from sqlalchemy.exc import ArgumentError, SQLAlchemyError

        # lazy: SQLAlchemy (~0.3 s) only in the commands that need it: `status` and --help start without it
        from orchestrator.store import db, schema

        if isinstance(exc, db.NoDatabase):
            return f"{exc}; {LAUNCH_HINT} (or point --db / ORCHESTRATOR_DB at an existing database)"
        if isinstance(exc, schema.SchemaError):
            return str(exc)
        if isinstance(exc, (ArgumentError, ImportError)):
            return f"cannot use database URL {shown(url)!r}: {exc}"
        if isinstance(exc, SQLAlchemyError):  # any driver's (sqlite3, psycopg ...) under SQLAlchemy's
            said = getattr(exc, "orig", None) or exc
    if said is None:
        return None
    path = sqlite_file(url)
    if path is not None and damaged(str(said)):
        return damaged_way_out(path)
    return f"database error ({shown(url)}): {' '.join(str(said).split())}"  # one line (psycopg's have several)


def shown(url: str) -> str:
    """A database URL fit to print: its password, if any, masked."""
    return masked_url(url)


def opened(database: Database, create: bool = False) -> "sessionmaker":
    """The database's handle: the one passed on (a launch opens its database once, not once per
    step), else its URL opened here through db.open_db, which upgrades an old one and explains a
    missing or unusable one (never created where `create` is False: a read makes nothing)."""
    if not isinstance(database, str):
        return database
    # lazy: SQLAlchemy (~0.3 s) only in the commands that need it: `status` and --help start without it
    from orchestrator.store import db

    return db.open_db(database, create=create)


@contextmanager
def reading(database: Database) -> Iterator[Rows]:
    """The database, for a command that reads it with SQL text (orchestrator.store.queries): a URL of a
    SQLite file or a psycopg PostgreSQL database at the current revision through its driver alone
    (`status` without SQLAlchemy's import), else through its handle (opened)."""
    direct = connect(database) if isinstance(database, str) else None
    if direct is not None:
        with direct:
            yield direct
        return
    with opened(database)() as session:
        yield Rows.of(session)


def reconcile(rows: Rows, sweep_id: Optional[str], out: Console, runs: Optional[str] = None) -> None:
    """Brings open runs' states up to date (orchestrator.launch.tracking); says which scheduler did not
    answer, in which case its runs keep their states. `runs` (the command's --runs): only run
    directories under it are read (the database's word is no path to open anywhere)."""
    # lazy: SQLAlchemy (~0.3 s) only in the commands that need it: `status` and --help start without it
    from orchestrator.launch import tracking

    for message in tracking.reconcile(rows, sweep_id, runs=runs).messages():
        out.print(message, style="yellow", markup=False)  # it names runs and jobs the database holds


def pick_sweeps(rows: Rows, wanted: Optional[str]) -> list[Any]:
    """The sweeps a command shows, newest first: all of them, 'latest', an id or a unique prefix;
    their id, created_at and n_cells (never their override lists, which may be large)."""
    sweeps = queries.sweeps(rows)
    if not sweeps or not queries.has_runs(rows):
        raise CliError(f"the database {shown(rows.url)} holds no runs yet; {LAUNCH_HINT}")
    if wanted is None:
        return sweeps
    if wanted == "latest":
        return sweeps[:1]
    exact = [s for s in sweeps if s.id == wanted]
    matches = exact or [s for s in sweeps if s.id.startswith(wanted)]
    if len(matches) == 1:
        return matches
    known = ", ".join(s.id for s in sweeps[:5]) + (" ..." if len(sweeps) > 5 else "")
    if matches:
        raise CliError(f"--sweep {wanted}: matches {len(matches)} sweeps; give more of the id (newest: {known})")
    raise CliError(f"--sweep {wanted}: no such sweep; use 'latest' or one of {known}")


def noisy_cv(percent: Optional[float]) -> float:
    """The noise threshold as a fraction: `percent` (--noisy-cv), else $ORCHESTRATOR_NOISY_CV,
    else schema.NOISY_CV (both in %)."""
    value = percent
    if value is None and os.environ.get("ORCHESTRATOR_NOISY_CV"):
        try:
            value = float(os.environ["ORCHESTRATOR_NOISY_CV"])
        except ValueError:
            raise CliError(f"ORCHESTRATOR_NOISY_CV={os.environ['ORCHESTRATOR_NOISY_CV']!r} is not a number (percent)") from None
    if value is None:
        # lazy: SQLAlchemy (~0.3 s) only in the commands that need it: `status` and --help start without it
        from orchestrator.store import schema

        return schema.NOISY_CV
    if value < 0:
        raise CliError(f"--noisy-cv {value:g}: a CV threshold is a percentage >= 0")
    return value / 100.0


def add_sweep(parser: Any, help: str = "one sweep (an id, a unique prefix, or 'latest')", **more: Any) -> None:
    """The --sweep option, as each command that picks sweeps takes it."""
    parser.add_argument("--sweep", metavar="ID", help=help, **more)


def add_noisy_cv(parser: Any, help: str) -> None:
    """--noisy-cv PCT, as `results --summary` and `report` take it."""
    parser.add_argument("--noisy-cv", type=float, default=None, metavar="PCT",
                        help=f"{help} above this CV in %% (default $ORCHESTRATOR_NOISY_CV or {NOISY_CV_PERCENT:g})")


def add_user(parser: Any, verb: str) -> None:
    """--user NAME / --all-users: whose runs a command that acts on failed runs takes (default:
    the caller's own, by the runs' submit_user), as `rerun --failed` and `status --failed` take them."""
    whose = parser.add_mutually_exclusive_group()
    whose.add_argument("--user", metavar="NAME", help=f"{verb} the runs NAME submitted (default: your own)")
    whose.add_argument("--all-users", action="store_true", help=f"{verb} every user's runs (default: your own)")


def whose(args: Any) -> tuple[Optional[str], str]:
    """The user whose runs a command takes (None: everyone's), and how its output says so."""
    # lazy: the lease module only where a command asks whose runs it acts on
    from orchestrator.store.sqlite_lease import who

    if getattr(args, "all_users", False):
        return None, "every user's runs"
    me = who()[0]
    user = getattr(args, "user", None) or me
    return user, f"runs of user {user}" + (" (yours; --user NAME or --all-users for others')" if user == me else "")
