"""`results --csv` as lines the database writes (store/csv_lines.py), on real databases (`db_url`:
SQLite files and PostgreSQL databases): byte for byte what csv.writer writes of the `results`
view's rows (view_csv, independent of the lines' code), with hostile text, integers, booleans,
NULLs and floats in every kind of column, and after a run's state changes under it."""
import csv
import io
import math

import pytest
from sqlalchemy import Integer, create_engine, select, update
from sqlalchemy.pool import NullPool

from orchestrator import setting_registry
from orchestrator.cli import main
from orchestrator.commands.results import RESULTS_ORDER
from orchestrator.results.collector import collect
from orchestrator.store import cell_stats, csv_lines, db, kept_lines, result_rows, schema
from db_urls import is_sqlite
from result_factory import make_result, write_result
from test_results_kept_metrics import view_csv
from test_results_summary import MODELS

#: Text csv must quote, or must not: its delimiter, quote, line ends, spaces, unicode, empty, long.
HOSTILE = ("a,b", 'say "hi"', "two\nlines", "cr\rhere", "crlf\r\n", " lead", "trail ", "", "é ü 漢字 🚀", ",",
           '"', "\n", "x" * 5000, "tab\there", "semi;colon", "'single'", "back\\slash", None, "plain")
#: Floats whose text only Python's repr gives (SQLite prints 15 digits).
FLOATS = (0.1, 1e-300, 1e16, 12345.0, -0.0, 1 / 3, 5e-324, 1.7976931348623157e308, 123456789.12345679, 0.1 + 0.2)
#: What SQLite keeps as NULL (NaN) and what it keeps as itself (inf): the view's rows tell either way.
ODD = (math.inf, -math.inf, math.nan)


def csv_printed(capsys, *args):
    assert main(["results", "--csv", *args]) == 0
    return capsys.readouterr().out


def land(tmp_path, url, monkeypatch, n=12):
    """`n` runs over MODELS' cells and two frameworks (one failed), their metrics from FLOATS,
    collected into `url`; the command's environment set to it."""
    runs = tmp_path / "runs"
    for i in range(n):
        # (the summary's metrics stay clear of 1e-300: PostgreSQL refuses its square's underflow)
        metrics = {"images_per_sec": 1000.0 + i / 10, "gpu_power_avg_w": 100 + 1 / 3, "mfu": FLOATS[i % len(FLOATS)],
                   "cpu_percent_avg": FLOATS[(i + 3) % len(FLOATS)], "rss_peak_bytes": 2.0 ** 20 * (i + 1),
                   **({"top1_final": FLOATS[(i + 5) % len(FLOATS)]} if i % 3 == 0 else {})}
        write_result(runs, make_result(sweep="s", framework=("torch", "tensorflow")[i % 2], model=MODELS[i % 3],
                                       repeat=i // 6, metrics=metrics, state="failed" if i == 4 else "done"))
    monkeypatch.setenv("ORCHESTRATOR_DB", url)
    monkeypatch.setenv("ORCHESTRATOR_RUNS", str(runs))
    Session = db.open_db(url)
    assert collect(Session, runs).added == n
    Session.kw["bind"].dispose()


def make_hostile(url):
    """Every text, integer, boolean and float column of runs and cells given hostile values, each
    run and cell its own (the metrics as landed: a metric's text is written as it lands)."""
    runs, cells = schema.Run.__table__, schema.Cell.__table__
    texts = ("node", "error_class", "error_message", "log_path", "energy_method", "gpu_name", "framework_version",
             "git_revision", "submit_user", "submit_host")
    engine = create_engine(url, poolclass=NullPool)
    with engine.begin() as conn:
        for i, run_id in enumerate(conn.scalars(select(runs.c.id).order_by(runs.c.id))):
            values = {name: HOSTILE[(i * 3 + k) % len(HOSTILE)] for k, name in enumerate(texts)}
            conn.execute(update(runs).where(runs.c.id == run_id).values(
                **values, git_dirty=(True, False, None)[i % 3], params=(None, 0, 2 ** 31 - 1, -7)[i % 4]))
        for i, cell_id in enumerate(conn.scalars(select(cells.c.id).order_by(cells.c.id))):
            conn.execute(update(cells).where(cells.c.id == cell_id).values(
                like=HOSTILE[i % len(HOSTILE)], hardware=HOSTILE[(i + 7) % len(HOSTILE)],
                precision=HOSTILE[(i + 2) % len(HOSTILE)], input=(None, "a,b")[i % 2], nodes=(None, 2)[i % 2],
                target_accuracy=(FLOATS + ODD + (None,))[i % (len(FLOATS) + 4)], threads=(1, 3)[i % 2],
                min_seconds=(FLOATS + ODD + (None,))[(i * 5 + 2) % (len(FLOATS) + 4)]))
        # a cell is never updated where it is used: its runs' kept fields are written as the runs
        # land (kept_lines.keep_landed), from the cell as it is then; here, from the cells made hostile
        kept_lines.rebuild(conn)
    engine.dispose()


def view_csv_where(url, column, value):
    """csv.writer's text of the `results` view's rows whose `column` is `value`, in RESULTS_ORDER."""
    view = schema.results_view
    value = int(value) if isinstance(view.c[column].type, Integer) else value
    engine = create_engine(url, poolclass=NullPool)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(schema.RESULTS_COLUMNS)
    with engine.connect() as conn:
        writer.writerows(conn.execute(select(view).where(view.c[column] == value)
                                      .order_by(*(view.c[c] for c in RESULTS_ORDER))))
    engine.dispose()
    return out.getvalue()


def test_the_csv_of_hostile_values_is_the_views_bytes(tmp_path, db_url, monkeypatch, capsys):
    """Commas, quotes, line ends, spaces, unicode, empty text, NULLs, long text, integers at the
    edges, booleans and floats csv writes by repr: the lines are what csv.writer writes of the
    view's rows, every byte, whole and filtered and cut."""
    land(tmp_path, db_url, monkeypatch)
    make_hostile(db_url)
    printed = csv_printed(capsys)
    assert printed == view_csv(db_url)
    assert printed.count("\ns:") == 12  # a line per run (csv cannot read back its own unquoted \r)
    assert csv_printed(capsys, "--where", "framework=torch") == view_csv(db_url, "torch")
    for column, value in (("input", "memory"), ("mode", "accuracy"), ("nodes", "1"), ("error_class", "")):
        filtered = csv_printed(capsys, "--where", f"{column}={value}")
        assert filtered == view_csv_where(db_url, column, value) and filtered.count("\ns:") > 0, column
    cut = csv_printed(capsys, "--limit", "5")
    assert printed.startswith(cut) and cut.count("\ns:") == 5 and printed[len(cut):].startswith("s:")
    due_too(db_url)  # every other run due (launched, not landed): read from runs and cells, its floats by repr
    assert csv_printed(capsys) == printed and csv_printed(capsys, "--where", "framework=torch") == view_csv(db_url, "torch")
    assert csv_printed(capsys, "--limit", "5") == cut


def due_too(url):
    """Every other run without its kept_lines row and due, as a launch leaves its runs."""
    engine = create_engine(url, poolclass=NullPool)
    with engine.begin() as conn:
        ids = conn.scalars(select(schema.Run.id).order_by(schema.Run.id)).all()[::2]
        conn.execute(kept_lines.KeptLines.delete().where(kept_lines.KeptLines.c.run_id.in_(ids)))
        conn.execute(kept_lines.KeptLinesDue.insert(), [{"run_id": i} for i in ids])
    engine.dispose()


def test_a_run_whose_state_changes_is_written_as_it_is_now(tmp_path, db_url, monkeypatch, capsys):
    """A run's state, class and message change after its metrics landed (as `status` reconciles a
    lost run): the lines read them as they are (nothing of them is kept), its metrics as landed."""
    land(tmp_path, db_url, monkeypatch, n=6)
    runs = schema.Run.__table__
    engine = create_engine(db_url, poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(update(runs).where(runs.c.repeat == 0).values(
            state="lost", error_class="node_failure", error_message='gone, "really"\nfor good'))
    engine.dispose()
    printed = csv_printed(capsys)
    assert printed == view_csv(db_url) and 'lost,' in printed and '"gone, ""really""\nfor good"' in printed


def test_kept_metric_text_is_what_csv_writes_of_the_kept_numbers(tmp_path, db_url, monkeypatch):
    """kept_metrics.csv_text is csv.writer's line of the row's own numbers, and the CSV's select
    hands back each line as one text (the float settings' are kept: kept_lines), not 61 values; a
    run without a kept row as texts around its float settings (csv_lines.PIECES)."""
    land(tmp_path, db_url, monkeypatch)
    engine = create_engine(db_url, poolclass=NullPool)
    with engine.connect() as conn:
        kept = conn.execute(select(schema.KeptMetrics)).all()
    engine.dispose()
    for row in kept:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerow(row[1:-1])
        assert row[-1] + "\n" == out.getvalue()
    assert len(kept) == 12
    query = cell_stats.results_lines({}, RESULTS_ORDER, None)
    assert [c.key for c in query.selected_columns] == list(csv_lines.PIECES)


def test_the_quoted_characters_are_those_csv_quotes():
    """Every character up to U+2FFF, alone and inside text: csv quotes the field exactly when it
    holds one of csv_lines.QUOTED."""
    for code in range(1, 0x3000):
        c = chr(code)
        out = io.StringIO()
        csv.writer(out, **csv_lines.DIALECT).writerow([f"a{c}b", "x"])
        assert out.getvalue().startswith('"') == (c in csv_lines.QUOTED), repr(c)


def test_a_float_column_sql_would_misprint_is_refused_with_the_way_out():
    """SQL prints a float in 15 digits, not repr's: a float column that is not kept is refused,
    naming it and where its text is kept, never written wrong."""
    with pytest.raises(TypeError, match=r"'target_accuracy'.*store/kept_lines.py"):
        csv_lines.sql_field(schema.Cell.__table__.c.target_accuracy)


def test_a_run_without_kept_metrics_has_empty_metric_fields(tmp_path, db_url, monkeypatch, capsys):
    """A run no metrics row landed for (a launch's new attempt): its metric fields are empty."""
    land(tmp_path, db_url, monkeypatch, n=3)
    engine = create_engine(db_url, poolclass=NullPool)
    with engine.begin() as conn:  # every metrics row gone, as any writer of them does it (keep_metrics after)
        conn.execute(schema.Metric.__table__.delete())
        result_rows.keep_metrics(conn, conn.scalars(select(schema.Run.id)).all())
    engine.dispose()
    printed = csv_printed(capsys)
    assert printed == view_csv(db_url) and ",throughput," + csv_lines.NO_METRICS + "," in printed


def test_text_with_a_nul_is_written_whole(tmp_path, db_url, monkeypatch, capsys):
    """A run's error message with a NUL in it (a trainer's stderr tail: SQLite keeps it; PostgreSQL
    refuses it, so there the text has none): SQLite's printf stops at a NUL, the line must not."""
    land(tmp_path, db_url, monkeypatch, n=3)
    nul = "\x00" if is_sqlite(db_url) else ""
    engine = create_engine(db_url, poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(update(schema.Run.__table__).values(error_message=f"bad{nul}byte, then more", node=f"n{nul}1"))
    engine.dispose()
    printed = csv_printed(capsys)
    assert printed == view_csv(db_url) and printed.count("then more") == 3


@pytest.mark.parametrize("kinds", ["fft", "tff", "ftf", "ftft", "tftf", "ttt"])
def test_a_lines_pieces_around_its_floats_are_csvs_line(kinds):
    """csv_lines.line_pieces: the floats no kept text holds first, last, side by side or apart, or
    none: lines_of joins the pieces into csv.writer's line (a float by repr, NULL empty)."""
    from sqlalchemy import Float, String, literal
    from sqlalchemy import select as sql_select

    floats, texts = iter([1 / 3, None, 1e-05]), iter(['a,"b"', None, "x\ny", ""])
    columns = [literal(next(floats), Float) if k == "f" else literal(next(texts), String) for k in kinds]
    columns = [c.label(f"c{i}") for i, c in enumerate(columns)]
    engine = create_engine("sqlite://")
    with engine.connect() as conn:
        rows = conn.execute(sql_select(*csv_lines.line_pieces(columns, {}))).all()
    engine.dispose()
    assert [c.key for c in csv_lines.line_pieces(columns, {})] == list(csv_lines.PIECES)
    out = io.StringIO()
    csv.writer(out, **csv_lines.DIALECT).writerow([c.element.value for c in columns])
    assert csv_lines.lines_of(rows) == out.getvalue()
