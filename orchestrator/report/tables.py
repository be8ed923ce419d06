"""One table per metric: rows dataset × network × framework, columns hardware configurations.

A table's entry is one cell: the median over its repeats, with n and the coefficient of
variation, marked noisy over the threshold; or, where the cell produced no number, `n/a` and
why: refused at expansion (the refusal's reason), failed (its class: out_of_memory,
unsupported, timeout ...), lost, cancelled, not yet run, or done without this metric (no GPU
on a CPU cell). Never 0, never blank without a reason.

The metrics are metric_registry's (unit, view column's scale, description); `params` (the
trainer's parameter count, a column of runs, not a metric) is declared here beside them.

Its files (`<metric>.csv`, `<metric>.md`) and a CSV read back for `compare`: table_files.py.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Sequence

from orchestrator import runstate
from orchestrator import setting_registry
from orchestrator.setting_registry import NAMES as SETTINGS
from orchestrator.metric_registry import BY_NAME, MetricDef
from orchestrator.job import latency
from orchestrator.report import query
from orchestrator.report.families import ORDER, TOKENS, Family, family_of
from orchestrator.report.labels import DATASETS, MODELS, hardware_label, hardware_order, order_of
from trainers.common import failure_classes

#: The trainer's parameter count: a column of runs, tabled like a metric.
PARAMS = MetricDef("params", "parameters", None, "trainable parameters, as the trainer counts them", "params")


@dataclass(frozen=True)
class Spec:
    """One table: the metric it shows and its title; `families`: the network families it is for
    (families.py; None: every one), so that a metric only some networks have (tokens/s) is no column of n/a."""

    metric: MetricDef
    title: str
    families: Optional[tuple[str, ...]] = None

    @property
    def unit(self) -> str:
        return self.metric.column_unit


#: The report's tables, in the order they are shown.
SPECS = (
    Spec(BY_NAME["images_per_sec"], "Training speed"),
    Spec(BY_NAME["tokens_per_sec"], "Training speed in tokens", TOKENS),
    Spec(BY_NAME["mfu"], "Model FLOPs utilisation (of the hardware's declared peak)"),
    Spec(BY_NAME["latency_p50_s"], "Inference: median batch latency"),
    Spec(BY_NAME["latency_p99_s"], "Inference: 99th percentile batch latency (n/a below 100 batches)"),
    Spec(BY_NAME["first_batch_s"], "Inference: the first batch alone (compilation, autotuning)"),
    Spec(BY_NAME["gpu_proc_mem_peak_bytes"], "GPU memory: the trainer's own, peak"),
    Spec(BY_NAME["gpu_mem_peak_bytes"], "GPU memory: the device's, peak"),
    Spec(BY_NAME["gpu_power_avg_w"], "GPU power: mean, summed over the job's GPUs"),
    Spec(BY_NAME["energy_per_image_j"], "Energy per image, gross"),
    Spec(BY_NAME["energy_net_per_image_j"], "Energy per image, net of idle"),
    Spec(BY_NAME["cpu_percent_avg"], "CPU: the trainer's process tree, mean (100 = one core)"),
    Spec(BY_NAME["rss_peak_bytes"], "Host memory: the trainer's peak RSS"),
    Spec(PARAMS, "Parameters"),
)
SPEC_BY_NAME = {s.metric.name: s for s in SPECS}

#: The settings that make a table's columns (the hardware configuration); the others its rows.
COLUMN_SETTINGS = ("hardware", "gpus", "threads")
ROW_SETTINGS = tuple(k for k in SETTINGS if k not in COLUMN_SETTINGS)
#: Row settings always shown; the others only where a table's cells differ in them.
ROW_SHOWN = ("dataset", "model", "framework")

#: An entry's status; only OK carries a number.
OK, REFUSED, NOT_YET_RUN, NOT_MEASURED = "ok", "refused", "not yet run", "not measured"

#: The CSV's columns, the same for every sweep and metric.
CSV_COLUMNS = (*SETTINGS, "config", "metric", "unit", "median", "n", "cv", "min", "max", "noisy",
               "status", "reason", "detail", "cell")


@dataclass(frozen=True)
class Entry:
    """One cell in one table: its number, or n/a and why."""

    settings: dict[str, Any]
    status: str
    reason: str = ""  # short, shown in the cell: "failed: out_of_memory", "refused", "no GPU (gpus=0)"
    detail: str = ""  # the whole reason (a refusal's message, a failure's message)
    cell: Optional[str] = None
    stats: Optional[query.Stats] = None
    noisy: Optional[bool] = None

    @property
    def median(self) -> Optional[float]:
        return self.stats.median if self.stats else None

    @property
    def row(self) -> tuple:
        return tuple(self.settings.get(k) for k in ROW_SETTINGS)

    @property
    def column(self) -> tuple:
        return tuple(self.settings.get(k) for k in COLUMN_SETTINGS)


@dataclass
class Table:
    """A metric's entries laid out: rows and columns in order, with their labels."""

    spec: Spec
    entries: list[Entry]
    noisy_cv: float
    rows: list[tuple] = field(default_factory=list)
    columns: list[tuple] = field(default_factory=list)
    row_fields: tuple[str, ...] = ROW_SHOWN
    threaded: set[tuple] = field(default_factory=set)  # (hardware, gpus) whose label shows threads

    def __post_init__(self) -> None:
        self.rows = sorted({e.row for e in self.entries}, key=_row_order)
        self.columns = sorted({e.column for e in self.entries}, key=lambda c: hardware_order(*c))
        groups: dict[tuple, set[tuple]] = {}
        for e in self.entries:  # a setting is shown where it tells rows of one dataset, network, framework apart
            groups.setdefault(tuple(e.settings.get(k) for k in ROW_SHOWN), set()).add(e.row)
        self.row_fields = ROW_SHOWN + tuple(
            k for i, k in enumerate(ROW_SETTINGS) if k not in ROW_SHOWN
            and any(len({row[i] for row in rows} - {None}) > 1 for rows in groups.values()))
        threads = Counter(c[:2] for c in self.columns)
        self.threaded = {hw for hw, n in threads.items() if n > 1}
        self._at = {(e.row, e.column): e for e in self.entries}

    def at(self, row: tuple, column: tuple) -> Optional[Entry]:
        return self._at.get((row, column))

    def column_label(self, column: tuple) -> str:
        hardware, gpus, threads = column
        return hardware_label(hardware, gpus, threads if (hardware, gpus) in self.threaded else None)

    def row_values(self, row: tuple) -> list[str]:
        """The row's labels; the network's says "ran at 224x224" where it was fed the data at
        another size (setting_registry.input_note: an ImageNet network on CIFAR-10)."""
        settings = dict(zip(ROW_SETTINGS, row))
        note = setting_registry.input_note(settings)
        return [_shown(k, settings.get(k)) + (f" ({note})" if k == "model" and note else "")
                for k in self.row_fields]

    def row_headers(self) -> list[str]:
        return [{"model": "network", "batch_size": "batch"}.get(k, k) for k in self.row_fields]


def _shown(key: str, value: Any) -> str:
    if value is None:  # a setting at its default stores None (nodes=1, input=memory): the default
        default = setting_registry.BY_NAME[key].default if key in setting_registry.BY_NAME else None
        return "?" if default is None else str(default)
    return f"{value}" if key in ROW_SHOWN else f"{key}={value}" if key in ("iterations", "warmup", "seed") else str(value)


def _row_order(row: tuple) -> tuple:
    settings = dict(zip(ROW_SETTINGS, row))
    return (order_of(settings["dataset"], DATASETS), order_of(settings["model"], MODELS), str(settings["framework"]),
            *(str(settings.get(k)) for k in ROW_SETTINGS if k not in ROW_SHOWN))


# --- from the database --------------------------------------------------------------------------

def _gpu_metric(metric: MetricDef) -> bool:
    return metric.name.startswith(("gpu_", "energy"))


def _no_number(metric: MetricDef, settings: dict[str, Any], attempts: list[query.Attempts]) -> tuple[str, str, str]:
    """(status, reason, detail) of a cell with no value for `metric`, from its latest attempts."""
    by_state = Counter()
    for a in attempts:
        by_state[a.state] += a.n
    if by_state[runstate.DONE]:
        if _gpu_metric(metric) and settings.get("gpus") == 0:
            return NOT_MEASURED, "no GPU: gpus=0", ""
        if metric.name == "mfu":
            return NOT_MEASURED, "no peak declared", (
                f"conf/hardware/{settings.get('hardware')}.yaml declares no peak_tflops for "
                f"{settings.get('precision')} (or its runs were measured before mfu existed)")
        return NOT_MEASURED, "not measured", f"its runs recorded no {metric.name}"
    failed = [a for a in attempts if a.state == runstate.FAILED]
    if failed:
        top = max(failed, key=lambda a: a.n)
        way_out = failure_classes.way_out(top.error_class)
        return (runstate.FAILED, f"failed: {top.error_class or failure_classes.NO_CLASS}",
                _first_line(top.message) + (f" (way out: {way_out})" if way_out else ""))
    for state in (runstate.LOST, runstate.CANCELLED):
        if by_state[state]:
            top = next(a for a in attempts if a.state == state)
            return state, state, _first_line(top.message) or state
    open_states = ", ".join(f"{by_state[s]} {s}" for s in runstate.OPEN if by_state[s])
    return NOT_YET_RUN, NOT_YET_RUN, open_states or "no run recorded"


def _first_line(message: Optional[str], width: int = 300) -> str:
    line = " ".join((message or "").split())
    return line if len(line) <= width else line[:width - 1] + "…"


#: An inference run's flag: it measured fewer batches or seconds than the validity rule.
BELOW_RULE = BY_NAME["below_rule"]


def _below_rule(flag: Any) -> str:
    """The note an inference cell's figures carry where any repeat was below the validity rule."""
    if flag is None or not flag.hi:
        return ""
    return (f"below the validity rule in {'all' if flag.lo else 'some'} of its {flag.n} repeats (fewer than "
            f"{latency.RULE['batches']} batches or {latency.RULE['seconds']:g} s measured): indicative only")


def from_db(session: Any, sweep_ids: Sequence[str], noisy_cv: float,
            specs: Sequence[Spec] = SPECS) -> list[Table]:
    """The sweeps' tables, one per spec: every cell they named, and every cell they refused
    (unless another of the sweeps measured the same settings)."""
    cells = query.cells(session, sweep_ids)
    stats = query.stats(session, sweep_ids, [*(s.metric for s in specs), BELOW_RULE])
    attempts = query.attempts(session, sweep_ids)
    placed = {tuple(s[k] for k in SETTINGS) for s in cells.values()}
    refused = [(settings, reason) for settings, reason in query.refusals(session, sweep_ids)
               if tuple(settings[k] for k in SETTINGS) not in placed]
    tables = []
    for spec in specs:
        entries = []
        for cell, settings in cells.items():
            if not _shows(spec, settings):
                continue
            found = stats.get((cell, spec.metric.name))
            if found is not None:
                noisy = None if found.cv is None else found.cv > noisy_cv
                others = [f"{a.n} {a.state}" + (f" ({a.error_class})" if a.error_class else "")
                          for a in attempts.get(cell, []) if a.state != runstate.DONE]
                detail = "; ".join(filter(None, (f"other repeats without a number: {', '.join(others)}" if others else "",
                                                 _below_rule(stats.get((cell, BELOW_RULE.name))))))
                entries.append(Entry(settings, OK, detail=detail, cell=cell, stats=found, noisy=noisy))
            else:
                status, reason, detail = _no_number(spec.metric, settings, attempts.get(cell, []))
                entries.append(Entry(settings, status, reason, detail, cell=cell))
        entries += [Entry(settings, REFUSED, "refused", reason) for settings, reason in refused if _shows(spec, settings)]
        tables.append(Table(spec, _one_per_position(entries), noisy_cv))
    return tables


def _shows(spec: Spec, settings: dict[str, Any]) -> bool:
    """Whether the table of `spec` has a place for this cell: its network's family is one it is for."""
    return spec.families is None or family_of(settings.get("model")).name in spec.families


def by_family(tables: Sequence[Table]) -> list[tuple[Family, list[Table]]]:
    """The tables split by network family (families.ORDER): each family present with its own tables
    of its cells only, a table without a cell of the family left out; where the family's samples are
    sequences, its speed table says so (seq/s), beside its tokens/s."""
    present = {family_of(e.settings.get("model")) for t in tables for e in t.entries}
    split = []
    for family in (f for f in ORDER if f in present):
        mine = []
        for table in tables:
            entries = [e for e in table.entries if family_of(e.settings.get("model")) == family]
            if entries:
                spec = table.spec
                if spec.metric.name == "images_per_sec" and spec.metric.unit != family.unit:
                    spec = replace(spec, metric=replace(spec.metric, unit=family.unit))
                mine.append(Table(spec, entries, table.noisy_cv))
        split.append((family, mine))
    return split


def _one_per_position(entries: list[Entry]) -> list[Entry]:
    """Where two refusals land on one position (two spellings of one cell), the first."""
    seen, out = set(), []
    for e in entries:
        key = (e.row, e.column)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


# --- formatting ---------------------------------------------------------------------------------

def number(value: Optional[float], metric: MetricDef) -> str:
    """A value as the tables print it: three significant figures or more, thousands separated."""
    if value is None:
        return ""
    if metric.name == "params":
        return f"{value:,.0f}"
    size = abs(value)
    digits = 0 if size >= 100 else 1 if size >= 10 else 2 if size >= 1 else 3 if size >= 0.01 else 5
    return f"{value:,.{digits}f}"


def spread(entry: Entry) -> str:
    """`n=3`, with the CV where repeats differ (and `noisy` over the threshold)."""
    if entry.stats is None:
        return ""
    text = f"n={entry.stats.n}"
    if entry.stats.cv is not None:
        text += f", CV {entry.stats.cv * 100:.1f}%"
    return text + (", noisy" if entry.noisy else "")


class Notes:
    """Numbered notes under a table: each distinct reason once."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def ref(self, text: str) -> int:
        if text not in self.texts:
            self.texts.append(text)
        return self.texts.index(text) + 1


@dataclass(frozen=True)
class Shown:
    """One position of a table as a page or Markdown shows it: a number and its spread, or n/a and why."""

    value: Optional[str]          # the median, formatted; None: n/a
    spread: str = ""              # "n=3, CV 1.2%[, noisy]" (nothing for parameters)
    reason: str = ""              # why n/a
    note: Optional[int] = None    # its note's number
    status: Optional[str] = None  # the entry's status; None: no cell of the sweeps is there
    noisy: bool = False


def grid(table: Table) -> tuple[list[tuple[list[str], list[Shown]]], list[str]]:
    """The table's rows (their settings shown, then a Shown per column) and the notes they cite."""
    notes, rows = Notes(), []
    for row in table.rows:
        shown = []
        for column in table.columns:
            e = table.at(row, column)
            note = notes.ref(e.detail) if e is not None and e.detail else None
            if e is None:
                shown.append(Shown(None, reason="not in these sweeps"))
            elif e.status == OK:
                shown.append(Shown(number(e.median, table.spec.metric), "" if table.spec.metric is PARAMS else spread(e),
                                   note=note, status=OK, noisy=bool(e.noisy)))
            else:
                shown.append(Shown(None, reason=e.reason, note=note, status=e.status))
        rows.append((table.row_values(row), shown))
    return rows, notes.texts
