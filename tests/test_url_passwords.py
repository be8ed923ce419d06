"""Database URLs as commands take them (the hostile review of cand6): passwords never printed nor
recorded, every password option of a URL's query masked (`?sslpassword=` was shown, and a second
option left); a PostgreSQL URL without its optional driver said in one line, not a traceback."""
from orchestrator.cli import main


def test_every_password_option_of_a_database_urls_query_is_masked():
    """The hostile review of cand6: `?sslpassword=` (libpq's passphrase of the client key) was printed
    as typed, a URL's second password option was left shown (the pattern masked only the last), and
    so was `PASSWORD=`; in a recorded word too (hide_passwords)."""
    from orchestrator.commands.common import shown
    from orchestrator.store.sql_adapters import hide_passwords

    for url, expected in (("postgresql+psycopg://u@h/db?sslpassword=S3cret", "postgresql+psycopg://u@h/db?sslpassword=***"),
                          ("postgresql+psycopg://u@h/db?password=S3cret&sslmode=require&sslpassword=S3cretToo",
                           "postgresql+psycopg://u@h/db?password=***&sslmode=require&sslpassword=***"),
                          ("postgresql+psycopg://u@h/db?PASSWORD=S3cret", "postgresql+psycopg://u@h/db?PASSWORD=***"),
                          # given twice (SQLAlchemy passes both on): cand6 masked the last one only
                          ("postgresql+psycopg://u@h/db?password=S3cret&password=S3cretToo",
                           "postgresql+psycopg://u@h/db?password=***&password=***"),
                          ("postgresql+psycopg://u@h/db?passwordless=1&sslpasswordx=1",
                           "postgresql+psycopg://u@h/db?passwordless=1&sslpasswordx=1")):
        assert shown(url) == expected, url
    word = "+cluster.setup=[export DB=postgresql://a@db/b?password=pw&sslpassword=pw2] x?password=kept"
    assert hide_passwords(word) == "+cluster.setup=[export DB=postgresql://a@db/b?password=***&sslpassword=***] x?password=kept"


def test_status_on_a_refusing_server_never_prints_an_ssl_password(capsys):
    """The review's reproduction: `status --db 'postgresql+psycopg://u@127.0.0.1:1/db?sslpassword=...'`
    (nothing listens on port 1) printed the passphrase in its one line."""
    assert main(["--db", "postgresql+psycopg://u@127.0.0.1:1/db?sslpassword=S3cret", "status"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "S3cret" not in err and "sslpassword=***" in err, err


def test_status_without_psycopg_installed_says_so_in_one_line(monkeypatch, capsys):
    """psycopg is an optional extra (`postgres`): without it, `status` on a `postgresql+psycopg://` URL
    ended in a traceback (the review of cand6); it says, as every other command does, that the driver
    is missing and how to install it, the password masked."""
    import sys

    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` raises ImportError
    assert main(["--db", "postgresql+psycopg://u:S3cret@127.0.0.1:1/db", "status"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "driver is not installed" in err and "pip install psycopg" in err, err
    assert "S3cret" not in err and "Traceback" not in err


def test_an_upgrade_of_a_server_database_logs_its_url_without_a_query_password(postgres_server, caplog):
    """db.open_db logs the URL of a database it upgrades in place; SQLAlchemy's rendering masks the
    user's part only, so a `?password=` (or `sslpassword=`) option was logged as typed."""
    import logging

    from db_urls import create_database, drop_database
    from orchestrator.store import db
    from test_db import taken_back

    url = create_database(postgres_server)
    try:
        db.open_db(url).kw["bind"].dispose()  # made at the head, then taken back to 0021 by the
        # revisions' own downgrades (stamping 0021 alone left the later revisions' columns there)
        taken_back(url, "0021")
        given = url + ("&" if "?" in url else "?") + "password=S3cretToo&sslpassword=S3cretKey"  # loopback is trusted
        with caplog.at_level(logging.WARNING):
            db.open_db(given).kw["bind"].dispose()
        assert "upgraded" in caplog.text and "from schema 0021" in caplog.text, caplog.text
        assert "S3cret" not in caplog.text and "password=***" in caplog.text, caplog.text
    finally:
        drop_database(postgres_server, url)


def test_a_port_that_is_no_number_is_said_in_one_line(capsys):
    """`host:x` made SQLAlchemy's URL parser raise int()'s ValueError, which no command caught: a
    traceback (`status` goes on to db.open_db for it, as every other command does)."""
    for command in ("status", "results"):
        assert main(["--db", "postgresql+psycopg://u:S3cret@h:x/db?password=S3cretToo", command]) == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "port is not a number" in err, err
        assert "S3cret" not in err and "Traceback" not in err and "u:***@h:x/db" in err
