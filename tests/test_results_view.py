"""The `results` view and `results` tables hold every setting, defaults filled in: each setting
that varies among the rows shown gets a column (the summary's too), rows that differ in one setting
alone come out in its order, and a filled column compares as its type on SQLite as on PostgreSQL."""
import csv
import io

import pytest

from orchestrator.cli import main
from db_urls import is_sqlite, query
from result_factory import make_result, write_result


def _collect(tmp_path, db_url, monkeypatch, results):
    """The results collected into db_url from tmp_path/runs, as a user in tmp_path would."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setenv("ORCHESTRATOR_DB", db_url)
    for result in results:
        write_result(tmp_path / "runs", result)
    assert main(["collect"]) == 0


def _table(capsys, args, first):
    """`results ARGS` drawn: (its header, its rows), each split into words; `first` is the table's
    first column after the settings."""
    capsys.readouterr()
    assert main(["results", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line.split() for line in lines if line.split()[:1] == ["framework/model/dataset"])
    assert first in header, lines
    return header, [line.split() for line in lines if line.split()[:1] == ["torch/lenet/mnist"]]


def test_results_show_each_setting_that_varies_and_the_view_holds_its_default(tmp_path, db_url, monkeypatch,
                                                                             capsys):
    """After `nodes=1,2` the two runs differ in `nodes` alone: `results` and its summary show a `nodes`
    column (and none for a setting every row shares), and the view holds 1 for the one-node run, its
    declared default, not NULL: `--where nodes=1` and SQL `where nodes = 1` find it."""
    _collect(tmp_path, db_url, monkeypatch, [
        make_result(sweep="s", metrics={"images_per_sec": 1000.0}),  # one node: None in cells
        make_result(sweep="s", nodes=2, metrics={"images_per_sec": 1900.0})])
    assert query(db_url, "select count(*) from cells where nodes is null") == [(1,)]  # cell ids as they were
    assert query(db_url, "select nodes, input, iterations from results order by nodes") == [
        (1, "memory", 20), (2, "memory", 20)]
    assert query(db_url, "select images_per_sec from results where nodes = 1") == [(1000.0,)]
    capsys.readouterr()
    assert main(["results", "--csv", "--where", "nodes=1"]) == 0
    assert [(r["nodes"], r["images_per_sec"]) for r in csv.DictReader(io.StringIO(capsys.readouterr().out))] == [
        ("1", "1000.0")]
    for summary, first in (([], "rep"), (["--summary"], "n")):
        assert main(["results", *summary]) == 0
        lines = capsys.readouterr().out.splitlines()
        header = next(line.split() for line in lines if line.split()[:1] == ["framework/model/dataset"])
        assert header[:7] == ["framework/model/dataset", "hardware", "gpus", "batch", "prec", "nodes", first], lines
        assert "threads" not in header and "iterations" not in header, header  # the same in every row
        shown = [line.split()[:6] for line in lines if line.split()[:1] == ["torch/lenet/mnist"]]
        assert shown == [["torch/lenet/mnist", "local", "0", "64", "fp32", "1"],
                         ["torch/lenet/mnist", "local", "0", "64", "fp32", "2"]], lines


def test_two_cells_that_differ_in_one_setting_alone_show_it_in_its_order(tmp_path, db_url, monkeypatch, capsys):
    """Cells differing in `iterations` (listed from the larger down) or in `input` alone: `results`
    and its summary show that setting's column, the rows in its order, so no two rows look alike."""
    _collect(tmp_path, db_url, monkeypatch, [
        make_result(sweep="s", iterations=5000, metrics={"images_per_sec": 900.0}),
        make_result(sweep="s", iterations=5, metrics={"images_per_sec": 100.0}),
        make_result(sweep="t", input="pipeline", metrics={"images_per_sec": 300.0}),
        make_result(sweep="t", metrics={"images_per_sec": 200.0})])
    for sweep, name, values in (("s", "iterations", ["5", "5000"]), ("t", "input", ["memory", "pipeline"])):
        for args, first in ((["--sweep", sweep], "rep"), (["--summary", "--sweep", sweep], "n")):
            header, rows = _table(capsys, args, first)
            at = header.index(name)
            assert header.index(first) == at + 1 and [row[at] for row in rows] == values, (header, rows)
    assert query(db_url, "select iterations, input from cell_summary order by images_per_sec_median") == [
        (5, "memory"), (20, "memory"), (20, "pipeline"), (5000, "memory")]


def test_a_filled_in_setting_compares_as_its_type_on_every_database(tmp_path, db_url, monkeypatch):
    """`nodes` filled in (1 where the cell stores None) stays an integer column: SQL's `nodes = '2'`
    and `nodes = '1'` find the runs on SQLite as on PostgreSQL."""
    _collect(tmp_path, db_url, monkeypatch, [make_result(sweep="s", metrics={"images_per_sec": 1000.0}),
                                             make_result(sweep="s", nodes=2, metrics={"images_per_sec": 1900.0})])
    assert query(db_url, "select images_per_sec from results where nodes = '2'") == [(1900.0,)]
    assert query(db_url, "select images_per_sec from results where nodes = '1'") == [(1000.0,)]
    assert query(db_url, "select n from cell_summary where nodes = '1'") == [(1,)]


def test_like_is_quoted_in_sql_as_the_docs_say(tmp_path, db_url, monkeypatch):
    """`like` is a word SQL keeps for itself: docs/protocol.md §5 and the README quote it, which works on
    every database; unquoted, PostgreSQL refuses it (SQLite lets it pass)."""
    import sqlalchemy

    _collect(tmp_path, db_url, monkeypatch, [make_result(sweep="s", dataset="synthetic", like="mnist")])
    assert query(db_url, """select "like" from results where "like" = 'mnist'""") == [("mnist",)]
    if not is_sqlite(db_url):
        with pytest.raises(sqlalchemy.exc.ProgrammingError, match="syntax error"):
            query(db_url, "select like from results")
