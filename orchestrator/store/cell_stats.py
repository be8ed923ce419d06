"""The read layer in SQLAlchemy Core: every question the commands (`results`, `compare`), the
report and the views ask of the database, each a named function over the tables of schema.py.

queries.py holds the other half, `status`'s questions, as SQL text: `status` must answer without
importing SQLAlchemy (sql_adapters.py says why). Here:

- the two views' selects (`results`: a run per row, its metrics pivoted; `cell_summary`: a cell
  per row over its repeats), compiled into CREATE VIEW by the migrations and db.py, and run with
  filters by `results` (results_rows);
- `stats`, the per-group median (row_number over the values), mean, standard deviation, min and
  max that both the `cell_summary` view and the report's statistics (metric_stats) read;
- the report's per-cell numbers (metric_stats, attempt_counts).

run_history.py holds the rest of the Core reads: what past sweeps and runs recorded (the report's
cells, refusals, provenance and jobs; the history a learned time limit comes from).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from sqlalchemy import Float, Select, and_, case, cast, func, join, literal, select, union_all
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.orm import Session, aliased

from orchestrator import metric_registry, runstate, setting_registry
from orchestrator.store import csv_lines, kept_lines
from orchestrator.store.schema import (
    NOISY_CV,
    RESULTS_COLUMNS,
    RESULTS_HEAD,
    RESULTS_TAIL,
    SUMMARY_CELL,
    Cell,
    KeptMetrics,
    Metric,
    Refusal,
    Run,
    Sweep,
    SweepCell,
    latest_runs,
    setting_value,
)


def results_select(kept: bool = False) -> Select:
    """The `results` view: one row per run, its cell's settings (defaults filled in), its metrics
    pivoted into the columns metric_registry gives them (divided by their divisor), and its details.
    `kept`: the same rows with each run's pivot read from kept_metrics (what `results --csv` and a
    filter on a metric read), not computed from the metrics rows."""
    pivot = KeptMetrics.__table__ if kept else metric_pivot().subquery("m")
    return (select(*(setting_value(attr).label(name) for name, attr in RESULTS_HEAD.items()),
                   _mode(pivot.c.top1).label("mode"), *(pivot.c[m.column] for m in metric_registry.VIEW_METRICS),
                   *(attr.label(name) for name, attr in RESULTS_TAIL.items()))
            .select_from(join(Run, Cell, Cell.id == Run.cell_id).outerjoin(pivot, pivot.c.run_id == Run.id)))


def _mode(top1: Any) -> Any:
    """throughput or accuracy: the cell's setting where it records one, else what the run measured."""
    return kept_lines.shown_mode(top1, Cell.mode)



#: The `results` columns read from runs and cells as they are, and the metric columns by name.
_STORED = {**RESULTS_HEAD, **RESULTS_TAIL}
_METRIC_COLUMNS = {m.column: m for m in metric_registry.VIEW_METRICS}


def results_columns(names: Sequence[str], runs: Any = None) -> Select:
    """The `results` view's columns `names` only, for the runs of `runs` (a subquery of `runs`
    rows, such as latest_runs(); every run by default): each metric column joined from its own
    rows by (run_id, name), the primary key, instead of pivoting every metric of every run.
    The same values as the view's (one row per run and metric name: max() of one is that one)."""
    run = runs.c if runs is not None else Run.__table__.c
    source = runs if runs is not None else Run.__table__
    metrics = _METRIC_COLUMNS
    # cells only where a cell's column is asked for (every run has its cell: the rows are the same);
    # `mode` is one (the cell's, else what the run measured): without the join it crossed every cell
    by_cell = any(name == "mode" or name not in metrics and (name not in _STORED or _STORED[name].class_ is Cell)
                  for name in names)
    joined = join(source, Cell, Cell.id == run.cell_id) if by_cell else source
    picked = {}
    needed = set(names) | ({"top1"} if "mode" in names else set())
    for name, metric in metrics.items():  # in the registry's order: one SQL text for one question
        if name in needed:
            m = aliased(Metric, name=f"m_{name}")
            joined = joined.outerjoin(m, and_(m.run_id == run.id, m.name == metric.name))
            picked[name] = m.value / metric.divisor if metric.divisor != 1 else m.value
    for name in names:
        if name in _STORED:  # a run's column from `runs`, a cell's from cells
            attr = _STORED[name]
            picked[name] = run[attr.key] if attr.class_ is Run else setting_value(attr)
        elif name == "mode":
            picked[name] = _mode(picked["top1"])
        elif name not in metrics:
            picked[name] = setting_value(getattr(Cell, name))
    return select(*(picked[name].label(name) for name in names)).select_from(joined)


def _stored(name: str) -> Any:
    """The runs or cells column behind a `results` column, a setting's default filled in (None for a
    metric, or `mode`)."""
    if name in _STORED:
        return setting_value(_STORED[name])
    return None if name == "mode" or name in _METRIC_COLUMNS else setting_value(getattr(Cell, name))


def results_page(filters: Mapping[str, Sequence[Any]], order: Sequence[str],
                 limit: Optional[int]) -> Optional[tuple[Select, Select]]:
    """The `results` view's first `limit` rows in `order` and how many rows there are in all, as
    two selects that never pivot the metrics of runs not shown: the page's runs are picked from
    runs and cells first, their columns read after (results_columns). None where a filter or the
    order needs a metric or `mode` (then the view itself, which computes them for every run)."""
    if limit is None or any(_stored(name) is None for name in (*filters, *order)):
        return None
    conditions = [_stored(name).in_(values) for name, values in filters.items()]
    base = select(Run).join(Cell, Cell.id == Run.cell_id).where(*conditions)
    page = base.order_by(*(_stored(name) for name in order)).limit(limit).subquery("page")
    rows = results_columns(RESULTS_COLUMNS, page).subquery("shown")
    total = select(func.count()).select_from(Run).join(Cell, Cell.id == Run.cell_id).where(*conditions)
    return select(rows).order_by(*(rows.c[name] for name in order)), total


def results_rows(filters: Mapping[str, Sequence[Any]], order: Sequence[str], limit: Optional[int],
                 noisy_cv: Optional[float] = None, totals: bool = True) -> Select:
    """What `results` lists where results_page cannot: the `results` view's rows (`noisy_cv` given:
    the `cell_summary` select's, with that threshold) that match `filters` ({column: values}),
    the first `limit` (None: all) in `order`; with `totals`, each row also carries how many rows
    match in all (`total`) and, in a summary, how many cells are noisy (`noisy_total`), from the
    same pass."""
    if noisy_cv is not None:
        rows = summary_select(filters, noisy_cv).subquery("cells")
    else:  # the view's rows, each run's metrics from kept_metrics: one look-up per run, no pivot
        kept = results_select(kept=True).subquery("results")
        rows = select(kept).where(*(kept.c[key].in_(values) for key, values in filters.items())).subquery("runs")
    counted = (func.count().over().label("total"),
               *((func.sum(rows.c.noisy).over().label("noisy_total"),) if noisy_cv is not None else ()))
    return select(rows, *(counted if totals else ())).order_by(*(rows.c[c] for c in order)).limit(limit)


def results_lines(filters: Mapping[str, Sequence[Any]], order: Sequence[str], limit: Optional[int]) -> Select:
    """`results --csv`: results_rows' rows (every column of the view) as the CSV's lines, text the
    database writes (csv_lines.csv_select), in two halves merged in `order`. The runs with a
    kept_lines row (every landed run) from kept_lines' covering index in its order (the CSV's: no
    sort), with the texts kept there (the fields that never change, and those that change only
    as metrics land), and the rest of each run from runs, by its id; kept_metrics is read only for
    a filter on a metric or `mode`. The runs without one (launched, not landed: found through
    kept_lines_due, not by a look-up of every run) from runs and cells as the view shows them
    (their float settings as Python writes them: csv_lines.line_pieces), sorted."""
    kept, runs, metrics = kept_lines.KeptLines.c, Run.__table__.c, KeptMetrics.__table__.c
    shown = {**{name: kept[name] for name in kept_lines.KEPT}, "mode": kept_lines.shown_mode(metrics.top1, kept.cell_mode),
             **{m.column: metrics[m.column] for m in metric_registry.VIEW_METRICS},
             **{name: runs[attr.key] for name, attr in _STORED.items() if name not in kept_lines.KEPT}}
    rows = (select(*(shown[name].label(name) for name in RESULTS_COLUMNS))
            .select_from(join(kept_lines.KeptLines, Run, Run.id == kept.run_id)
                         .outerjoin(KeptMetrics, metrics.run_id == kept.run_id)))
    texts = {name: (kept[text] if j == 0 else None)
             for text, segment in zip(kept_lines.TEXTS, kept_lines.SEGMENTS) for j, name in enumerate(segment)}
    unkept = results_select(kept=True).where(Run.id.in_(kept_lines.due_runs()), ~kept_lines.kept(Run.id))
    metric_text = func.coalesce(metrics.csv_text, literal(csv_lines.NO_METRICS, literal_execute=True))
    metric_texts = {name: (metric_text if j == 0 else None) for j, name in enumerate(csv_lines.METRIC_COLUMNS)}
    return csv_lines.csv_select([(rows, texts), (unkept, metric_texts)], filters, order, limit)


def metric_pivot() -> Select:
    """Each run's metrics rows as one row: its id and the `results` view's metric columns (the
    largest value of each name: there is one per run and name), in the primary key's order, so
    that a run's rows are read together. The view's pivot, and what kept_metrics keeps."""
    return select(Metric.run_id, *(_pivoted(m) for m in metric_registry.VIEW_METRICS)).group_by(Metric.run_id)


def _pivoted(metric: metric_registry.MetricDef) -> Any:
    value = func.max(case((Metric.name == metric.name, Metric.value)))
    return (value / metric.divisor if metric.divisor != 1 else value).label(metric.column)



def summary_select(filters: Mapping[str, Sequence[Any]] | None = None, noisy_cv: float = NOISY_CV) -> Select:
    """The `cell_summary` view: per cell, over the latest attempt of each repeat (latest_runs)
    where that attempt is done and measured images/s: n, median (window functions), mean,
    standard deviation (n-1, stats() says how), CV, min and max of images/s, `noisy` (1 when
    the CV exceeds `noisy_cv`, 0 when not, null for one repeat), mean GPU power and energy per
    image, peak GPU memory.

    `filters` ({`results` column: values}) pick the runs first (what `results --summary --where
    ... --sweep ...` asks); the view has none and NOISY_CV. Only the columns used are read
    (results_columns), so a summary never pivots every metric of every run; and the runs are
    aggregated per cell before the cell's own columns are joined, once per cell (at 100,000
    runs, 1.1 s instead of 1.5 s carrying them through the window and the grouping).
    """
    filters = dict(filters or {})
    used = ("cell", "images_per_sec", "gpu_power_avg_w", "energy_per_image_j", "gpu_mem_peak_mb")
    picked = results_columns(list(dict.fromkeys(("state", *used, *filters))), latest_runs()).subquery("picked")
    runs = (select(*(picked.c[name] for name in used))
            .where(picked.c.state == runstate.DONE, picked.c.images_per_sec.is_not(None),
                   *(picked.c[key].in_(values) for key, values in filters.items()))
            .subquery("measured"))
    spread = stats(runs, ("cell",), "images_per_sec", lambda x: (
        func.avg(x.gpu_power_avg_w).label("power"), func.avg(x.energy_per_image_j).label("epi"),
        func.max(x.gpu_mem_peak_mb).label("mem")))
    s = spread.c
    cv, noisy = spread_flags(s.sd, s.mean, noisy_cv)
    return (select(s.cell, *(setting_value(getattr(Cell, c)).label(c) for c in SUMMARY_CELL), s.n,
                   s.median.label("images_per_sec_median"), s.mean.label("images_per_sec_mean"), s.sd.label("images_per_sec_std"),
                   cv.label("images_per_sec_cv"), s.lo.label("images_per_sec_min"), s.hi.label("images_per_sec_max"),
                   noisy.label("noisy"),
                   s.power.label("gpu_power_avg_w"), s.epi.label("energy_per_image_j"), s.mem.label("gpu_mem_peak_mb"))
            .join_from(spread, Cell, Cell.id == s.cell))


def spread_flags(sd: Any, mean: Any, noisy_cv: float) -> tuple[Any, Any]:
    """A cell's coefficient of variation (sd/mean; null for one repeat) and `noisy` (1 when it
    exceeds `noisy_cv`, 0 when not, null for one repeat): one rule for the view and the kept
    summary (the cell_stats table), whose threshold is the reader's."""
    cv = case((mean > 0, sd / mean))
    return cv, noisy_flag(cv, noisy_cv)


def noisy_flag(cv: Any, noisy_cv: float) -> Any:
    """`noisy` of a coefficient of variation: 1 above `noisy_cv`, 0 not, null for one repeat."""
    return case((cv.is_(None), None), (cv > noisy_cv, 1), else_=0)


#: Below this a distance's square is taken as 0: PostgreSQL refuses a product that underflows to
#: zero ("value out of range: underflow"), which a run's 1e-300 images/s made of every collect
#: that refreshed its cell; a square under 1e-300 changes no spread a float can tell apart.
TINY = 1e-150


def _squared(x: Any) -> Any:
    return case((func.abs(x) < TINY, 0.0), else_=x * x)


def stats(values: Any, per: Sequence[str], value: str,
          extra: Callable[[Any], Iterable[Any]] = lambda x: ()) -> Any:
    """Per group of the rows of `values` (a subquery; `per`: the names of its columns to group
    by): `n`, `median` (the middle value, or the mean of the two middle ones, by row_number),
    `mean`, `sd` (n-1; null for one value), `lo` and `hi` of its column
    `value`, and the `extra` aggregates of the ranked rows' columns, as a subquery. The one
    definition of a group's statistics: the `cell_summary` view's per cell, the report's per
    cell and metric (metric_stats).

    The spread comes from sums of squares in one pass, of each value's distance from the group's
    lowest (the shifted-data method: Chan, Golub and LeVeque, "Algorithms for computing the sample
    variance", 1983): sums of the values themselves cancel catastrophically where the mean dwarfs the
    spread (1e9 + 1, 2, 3 gave an sd of 0, not 1)."""
    groups = [values.c[name] for name in per]
    ranked = select(values, func.row_number().over(partition_by=groups, order_by=values.c[value])
                    .label("rn"), func.count().over(partition_by=groups).label("cnt"),
                    func.min(values.c[value]).over(partition_by=groups).label("lowest")).subquery("ranked")
    x, v = ranked.c, ranked.c[value]
    d = v - x.lowest  # each value's distance from the group's lowest: the sums of squares are shifted
    summed = select(
        *(x[name] for name in per), func.count().label("n"),
        func.avg(case((x.rn.in_([(x.cnt + 1) // 2, (x.cnt + 2) // 2]), v))).label("median"),
        func.avg(v).label("mean"), func.min(v).label("lo"), func.max(v).label("hi"),
        func.sum(_squared(d)).label("ss"), func.sum(d).label("s"), *extra(x),
    ).group_by(*(x[name] for name in per)).subquery("stats")
    variance = (summed.c.ss - _squared(summed.c.s) / summed.c.n) / (summed.c.n - 1)
    return select(summed, case((summed.c.n > 1, func.sqrt(case((variance > 0, variance), else_=0.0))))
                  .label("sd")).subquery("spread")


#: Every view, in the order they are created (cell_summary reads results), and its select.
VIEWS = {"results": results_select, "cell_summary": summary_select}


def view_sql(name: str, dialect: Dialect) -> str:
    """A view's SELECT as `dialect` writes it, its values inlined (a view takes no parameters)."""
    return str(VIEWS[name]().compile(dialect=dialect, compile_kwargs={"literal_binds": True}))


def drop_views(conn: Connection) -> None:
    """Drops the views (those that exist), dependents first."""
    for name in reversed(VIEWS):
        conn.exec_driver_sql(f"DROP VIEW IF EXISTS {conn.dialect.identifier_preparer.quote(name)}")


def create_views(conn: Connection) -> None:
    """Creates the views from the definitions above."""
    for name in VIEWS:
        conn.exec_driver_sql(f"CREATE VIEW {conn.dialect.identifier_preparer.quote(name)} AS\n"
                             + view_sql(name, conn.dialect))


# --- the report's per-cell numbers ---------------------------------------------------------------
# A sweep's cells are those it named (sweep_cells); a cell's numbers are over the latest attempt of
# each of its repeats (latest_runs, as the cell_summary view takes them): so a cell measured by an
# earlier sweep, or rerun by a later one, shows its current numbers. The database computes every
# statistic: a report over 100,000 runs moves a few thousand rows, not the runs.

def named_cells(sweep_ids: Sequence[str]) -> Select:
    """The ids of the cells the sweeps named, as a select to match against (`IN`)."""
    return select(SweepCell.cell_id).where(SweepCell.sweep_id.in_(sweep_ids))


def metric_stats(session: Session, sweep_ids: Sequence[str], metrics: Sequence[metric_registry.MetricDef]) -> Any:
    """Per cell and metric (a metric named `params` is the runs' parameter count, not a metrics
    row): rows of `cell`, `name` and their `stats` (n, median, mean, sd, lo, hi) over the values
    of the latest attempts that are done, each divided by its metric's divisor as the `results`
    view shows it. One query."""
    x = stats(_metric_values(sweep_ids, metrics), ("cell", "name"), "value").c
    return session.execute(select(x.cell, x.name, x.n, x.median, x.mean, x.sd, x.lo, x.hi))


def metric_values(session: Session, sweep_ids: Sequence[str], metrics: Sequence[metric_registry.MetricDef]) -> Any:
    """Rows of `cell`, `name`, `value`: the repeats themselves behind metric_stats' numbers (the
    same runs and divisors), for `compare`'s test on the repeats."""
    v = _metric_values(sweep_ids, metrics).c
    return session.execute(select(v.cell, v.name, v.value))


def _metric_values(sweep_ids: Sequence[str], metrics: Sequence[metric_registry.MetricDef]) -> Any:
    """The subquery of (cell, name, value) over the latest attempts that are done."""
    latest = latest_runs()
    mine = (latest.c.state == runstate.DONE, latest.c.cell_id.in_(named_cells(sweep_ids)))
    named = [m.name for m in metrics if m.name != "params"]
    divisors = {m.name: m.divisor for m in metrics if m.divisor != 1}
    value = Metric.value / case(divisors, value=Metric.name, else_=1.0) if divisors else Metric.value
    parts = [select(latest.c.cell_id.label("cell"), Metric.name.label("name"), value.label("value"))
             .join(Metric, Metric.run_id == latest.c.id).where(*mine, Metric.name.in_(named))]
    if len(named) < len(metrics):
        parts.append(select(latest.c.cell_id, literal("params"), cast(latest.c.params, Float))
                     .where(*mine, latest.c.params.is_not(None)))
    return (union_all(*parts) if len(parts) > 1 else parts[0]).subquery("v")


def named_values(session: Session, sweep_ids: Sequence[str], prefix: str) -> Any:
    """Rows of `cell`, `name`, `value` of the metrics whose names begin with `prefix` (batch_size=auto's
    points, `auto.b<batch>.<metric>`), over the latest attempts that are done, as stored."""
    latest = latest_runs()
    return session.execute(select(latest.c.cell_id, Metric.name, Metric.value).join(Metric, Metric.run_id == latest.c.id)
                           .where(latest.c.state == runstate.DONE, latest.c.cell_id.in_(named_cells(sweep_ids)),
                                  Metric.name.startswith(prefix, autoescape=True)))


def attempt_counts(session: Session, sweep_ids: Sequence[str]) -> Any:
    """Rows of cell id, state, error class, how many of its repeats' latest attempts are in them
    and one error message."""
    latest = latest_runs()
    return session.execute(
        select(latest.c.cell_id, latest.c.state, latest.c.error_class, func.count(), func.min(latest.c.error_message))
        .where(latest.c.cell_id.in_(named_cells(sweep_ids)))
        .group_by(latest.c.cell_id, latest.c.state, latest.c.error_class))
