"""`compare`'s verdict on generated repeats (seeded numpy, log-normal noise at CV 3 %): the false
alarms over 200 unchanged cells stay within the stated rate, a true 10 % change in 10 of 200 cells
is found, the statistics agree with scipy's on the raw repeats, and Mann-Whitney's floor is what
docs/reports.md says it is."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from orchestrator.metric_registry import BY_NAME
from orchestrator.report import compare, query, verdict
from orchestrator.report.tables import OK, Entry

IPS = BY_NAME["images_per_sec"]
CELLS, REPEATS, CV, TRIALS = 200, 5, 0.03, 50
SIGMA = math.sqrt(math.log1p(CV ** 2))  # the log sd of a log-normal with this CV


def side(rng, factors, repeats=REPEATS):
    """One side's entries (cell i's settings differ by batch size) and its repeats by cell id."""
    entries, values = [], {}
    for i, factor in enumerate(factors):
        v = 1000.0 * factor * np.exp(rng.normal(0.0, SIGMA, repeats))
        settings = {s: None for s in compare.setting_registry.NAMES}
        settings.update(dataset="mnist", model="lenet", framework="torch", hardware="cpu12", gpus=0, batch_size=i + 1)
        s = query.Stats(repeats, float(np.median(v)), float(v.mean()), float(v.std(ddof=1)), float(v.min()),
                        float(v.max()))
        entries.append(Entry(settings, OK, cell=f"c{i}", stats=s))
        values[f"c{i}"] = [float(x) for x in v]
    return entries, values


def trial(seed, changed=0, change=1.0):
    """One comparison of 200 cells; the first `changed` cells' new side is `change` × the base."""
    rng = np.random.default_rng(seed)
    base, base_values = side(rng, [1.0] * CELLS)
    new, new_values = side(rng, [change] * changed + [1.0] * (CELLS - changed))
    return compare.compare(base, new, IPS, 5.0, (base_values, new_values))


def called(c):
    return {m.base.cell for m in c.matched if m.verdict != compare.NO_CHANGE}


def test_no_true_change_in_200_cells_keeps_false_alarms_within_the_rate():
    """Nothing changed: a trial with any call is a false alarm (the family-wise rate, which
    Benjamini-Hochberg holds at 0.05 when nothing changed). Without the correction (raw p
    < 0.05 and the 5 % effect) nearly every trial calls something: that is the test failing on a
    broken correction."""
    alarms = uncorrected = 0
    for seed in range(TRIALS):
        c = trial(seed)
        assert len(c.matched) == CELLS and c.tested == CELLS
        alarms += bool(called(c))
        uncorrected += any(m.p < verdict.ALPHA and abs(m.change) > 5.0 for m in c.matched)
    print(f"false alarms: {alarms}/{TRIALS} trials corrected, {uncorrected}/{TRIALS} uncorrected")
    assert alarms / TRIALS <= verdict.ALPHA
    assert uncorrected / TRIALS > 0.5  # what the correction is there to stop


def test_a_true_ten_percent_change_in_10_of_200_cells_is_found():
    """10 cells 10 % slower, 5 repeats at CV 3 %: found slower (a regression, exit 1) — each of
    them in at least 99 % of the trials, all 10 at once in at least 95 % — and the false
    discoveries' share of the calls (the FDR: the mean over trials) within the rate."""
    found = complete = false = 0
    shares = []
    true = {f"c{i}" for i in range(10)}
    for seed in range(TRIALS):
        c = trial(1000 + seed, changed=10, change=0.9)
        slower = {m.base.cell for m in c.regressions}
        assert slower == {m.base.cell for m in c.matched if m.verdict == "slower"}
        found += len(slower & true)
        complete += true <= slower
        false += len(called(c) - true)
        shares.append(len(called(c) - true) / max(len(called(c)), 1))
    print(f"power: {found}/{10 * TRIALS} cells found, all 10 in {complete}/{TRIALS} trials; "
          f"false discoveries {false}, FDR {np.mean(shares):.3f}")
    assert found / (10 * TRIALS) >= 0.99 and complete / TRIALS >= 0.95
    assert np.mean(shares) <= verdict.ALPHA


def test_without_a_prior_the_test_is_students_on_the_raw_logs():
    """Two cells only: no common variance to borrow, the test and its interval are scipy's
    Student t-test on the logarithms of the repeats."""
    rng = np.random.default_rng(7)
    a, b = 1000 * np.exp(rng.normal(0, 0.03, 5)), 950 * np.exp(rng.normal(0, 0.04, 4))
    pair = (verdict.LogSample.of_values(list(a)), verdict.LogSample.of_values(list(b)))
    t = verdict.tests([pair, pair])[0]
    ref = stats.ttest_ind(np.log(b), np.log(a), equal_var=True)
    lo, hi = ref.confidence_interval(0.95)
    assert t.p == pytest.approx(ref.pvalue, rel=1e-9)
    assert (t.lo, t.hi) == (pytest.approx(math.exp(lo), rel=1e-9), pytest.approx(math.exp(hi), rel=1e-9))
    assert t.ratio == pytest.approx(math.exp(np.log(b).mean() - np.log(a).mean()))


def test_the_prior_recovers_the_cells_common_variance():
    """Cells that all vary alike (log sd 0.03): the fitted s0 is 0.03 within 5 % and its degrees
    of freedom far beyond a cell's own 8; cells whose spreads differ tenfold get a weak prior."""
    rng = np.random.default_rng(11)
    d = np.full(400, 8.0)
    alike = 0.03 ** 2 * rng.chisquare(8, 400) / 8
    d0, s02 = verdict.prior(alike, d)
    assert math.sqrt(s02) == pytest.approx(0.03, rel=0.05) and d0 > 50
    mixed = alike * np.repeat([0.1, 1.0, 10.0, 100.0], 100)
    assert verdict.prior(mixed, d)[0] < 4


def test_too_few_repeats_are_not_tested_nor_counted_in_the_correction():
    rng = np.random.default_rng(3)
    base, bv = side(rng, [1.0, 1.0])
    new, nv = side(rng, [0.5, 1.0], repeats=2)
    c = compare.compare(base, new, IPS, 5.0, (bv, nv))
    assert [m.verdict for m in c.matched] == [compare.TOO_FEW] * 2 and c.tested == 0 and not c.regressions
    assert c.matched[0].gain == pytest.approx(0.5, rel=0.1)  # the ratio is still shown


def test_mann_whitney_with_5_repeats_cannot_pass_a_200_cell_correction():
    """ASV's test, for contrast: 5 against 5 entirely apart gives p = 2/252, the smallest it can;
    10 such cells among 200 pass neither Holm nor Benjamini-Hochberg (BH needs 32 of them)."""
    p = stats.mannwhitneyu([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], alternative="two-sided", method="exact").pvalue
    assert p == pytest.approx(2 / 252)
    ps = [p] * 10 + [0.5] * 190
    assert not any(stats.false_discovery_control(ps, method="bh") < 0.05)
    assert sum(stats.false_discovery_control([p] * 32 + [0.5] * 168, method="bh") < 0.05) == 32
    assert p > 0.05 / 200  # Holm's first step


def test_benjamini_hochberg_is_scipys():
    """verdict.adjusted against scipy.stats.false_discovery_control: random p, ties, ones, none."""
    rng = np.random.default_rng(5)
    for ps in (rng.uniform(0, 1, 200), rng.uniform(0, 0.01, 37), [0.01, 0.01, 0.04, 1.0, 0.02, 0.01], [0.3]):
        assert verdict.adjusted(list(ps)) == pytest.approx(list(stats.false_discovery_control(ps, method="bh")),
                                                           rel=1e-12)
    assert verdict.adjusted([]) == []
