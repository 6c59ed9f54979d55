"""The budget curve's turn: the fixed-sequence procedure (bvr.report.inference.sequence), by hand and simulated.

Calibration follows ``tests/test_inference.py``: each scenario draws ``SIMS`` budget curves at once and tests them
with scipy's vectorised one-sided t test and a numpy fixed sequence, implementations independent of ours; the first
``REAL`` of the same draws also go through the real :func:`compare`, :func:`one_sided_p` and
:func:`fixed_sequences`, which must give scipy's p-values and the same rejections. A simulated curve has the shipped
shape (``experiments/budget.yaml``): 3 budgets and the control, 5 pretraining seeds, 3 measures. Per measure, each
model's value is a per-pretraining-seed effect shared by the control and every budget (``80 + 5 z``, which pairing
must cancel, as in ``test_inference``'s ``_arms``) plus its own noise of SD ``1 / sqrt(2)``, so each budget's paired
difference with the control has SD 1 and the budgets' differences are correlated (0.5: they share the control).
Rates must lie within 3 Monte Carlo standard errors of the claim: ``0.05 + 3 * sqrt(0.05 * 0.95 / 20_000) =
0.0546``. Everything is seeded.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from bvr.report.inference import compare, fixed_sequence, fixed_sequences, one_sided_bound, one_sided_p

ALPHA = 0.05
SIMS = 20_000
"""Simulated budget curves per scenario."""
REAL = 500
"""Curves per scenario also run through the real compare and fixed sequences (12 comparisons each)."""
SEEDS = 5
BUDGETS = 3
MEASURES = 3
EFFECT = 2.75
"""The planted effect, in SDs of a budget's paired difference with the control: one-sided at 0.05 / 3 with 5 seeds
it is detected about 98 % of the time; the report's Bonferroni intervals over 17 tests detect it about 53 %."""
REPORT_TESTS = 17
"""Tests in the shipped budget curve's Holm family (3 budgets against the control and each budget against the next,
on 3 measures, and the next on MLM loss): its simultaneous intervals are at ``1 - 0.05 / 17``."""


def _mc_se(rate: float, sims: int) -> float:
    return math.sqrt(rate * (1 - rate) / sims)


def _curves(rng: np.random.Generator, effects: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``SIMS`` simulated curves: the control (sims, measures, seeds) and the budgets (sims, measures, budgets,
    seeds), smallest budget first, each budget ``effects[k]`` above the control on every measure."""
    shared = 80.0 + 5.0 * rng.standard_normal((SIMS, MEASURES, 1, SEEDS))
    noise = math.sqrt(0.5) * rng.standard_normal((SIMS, MEASURES, BUDGETS + 1, SEEDS))
    models = shared + noise
    return models[:, :, 0], models[:, :, 1:] + effects[:, None]


def _one_sided(control: np.ndarray, budgets: np.ndarray) -> np.ndarray:
    """scipy's one-sided paired t p-values, (sims, measures, budgets)."""
    return stats.ttest_1samp(budgets - control[:, :, None], 0.0, axis=-1, alternative="greater").pvalue


def _rejected(p: np.ndarray, alpha: float) -> np.ndarray:
    """The fixed sequence in numpy: a budget rejects when it and every larger budget have p at most ``alpha``."""
    return np.flip(np.logical_and.accumulate(np.flip(p <= alpha, axis=-1), axis=-1), axis=-1)


def _check_real(control: np.ndarray, budgets: np.ndarray, p: np.ndarray, rejected: np.ndarray) -> None:
    """The first ``REAL`` curves through the real code: the same p-values and the same rejections."""
    for s in range(REAL):
        pvalues = {}
        for m in range(MEASURES):
            tests = [compare(dict(enumerate(budgets[s, m, k])), dict(enumerate(control[s, m])))
                     for k in range(BUDGETS)]
            pvalues[f"m{m}"] = [one_sided_p(c) for c in tests]
        np.testing.assert_allclose(list(pvalues.values()), p[s], rtol=1e-9)
        found = fixed_sequences(pvalues, ALPHA)
        assert [list(found[f"m{m}"].rejected) for m in range(MEASURES)] == rejected[s].tolist()


def _turns(rejected: np.ndarray) -> np.ndarray:
    """The turn per (sim, measure): the first rejected budget, or ``BUDGETS`` where none is."""
    return np.where(rejected.any(axis=-1), rejected.argmax(axis=-1), BUDGETS)


# ---------------------------------------------------------------------------------------------- simulated


def test_the_family_wise_rate_over_budgets_and_measures_holds_alpha_under_the_null() -> None:
    rng = np.random.default_rng([11, 0])
    control, budgets = _curves(rng, np.zeros(BUDGETS))
    p = _one_sided(control, budgets)
    rejected = _rejected(p, ALPHA / MEASURES)
    rate = float(rejected.any(axis=(1, 2)).mean())  # some budget declared helpful on some measure
    assert rate <= ALPHA + 3 * _mc_se(ALPHA, SIMS), f"a false turn in {rate:.4f} of null curves"
    # Under the null only the largest budget's test matters, each measure at alpha / 3: 1 - (1 - 0.05/3)^3 = 0.0492.
    exact = 1 - (1 - ALPHA / MEASURES) ** MEASURES
    assert abs(rate - exact) <= 3 * _mc_se(exact, SIMS)
    assert (p <= ALPHA).any(axis=(1, 2)).mean() > 0.3  # each budget on its own at 5 %: a false turn in ~40 %
    _check_real(control, budgets, p, rejected)


def test_an_effect_at_the_largest_budgets_is_found_and_no_turn_comes_below_it() -> None:
    rng = np.random.default_rng([11, 1])
    effects = np.array([0.0, EFFECT, EFFECT])
    first = 1  # the smallest budget with an effect
    control, budgets = _curves(rng, effects)
    p = _one_sided(control, budgets)
    rejected = _rejected(p, ALPHA / MEASURES)
    turns = _turns(rejected)
    largest = float(rejected[..., -1].mean())
    at_first = float((turns == first).mean())
    assert largest >= 0.95, f"the largest budget helps in only {largest:.4f} of (curve, measure)"
    assert at_first >= 0.9, f"the turn is the first budget with an effect in only {at_first:.4f}"
    below = float((turns < first).any(axis=1).mean())  # a turn below the effect on some measure
    assert below <= ALPHA + 3 * _mc_se(ALPHA, SIMS), f"a turn below the effect in {below:.4f} of curves"
    # The report's simultaneous intervals (two-sided, at 1 - 0.05/24) see the same effect at the largest budget
    # far less often.
    d = budgets - control[:, :, None]
    two_sided = stats.ttest_1samp(d, 0.0, axis=-1).pvalue
    interval = float(((two_sided <= ALPHA / REPORT_TESTS) & (d.mean(axis=-1) > 0))[..., -1].mean())
    assert interval < 0.6 and largest - interval > 0.4
    _check_real(control, budgets, p, rejected)


# ---------------------------------------------------------------------------------------------- by hand


def test_the_sequence_stops_at_the_first_budget_that_does_not_reject() -> None:
    s = fixed_sequence([0.001, 0.20, 0.01, 0.03], 0.05)
    assert s.rejected == (False, False, True, True) and s.turn == 2
    assert s.adjusted_p == (0.2, 0.2, 0.03, 0.03)  # the largest p at a budget and every larger one
    assert fixed_sequence([0.01, 0.02, 0.06], 0.05).turn is None  # the largest does not reject: nothing does
    assert fixed_sequence([0.05, 0.05], 0.05).rejected == (True, True)  # at most alpha rejects, as Holm's
    assert fixed_sequence([], 0.05).turn is None


def test_an_untested_budget_stops_the_sequence() -> None:
    s = fixed_sequence([0.001, math.nan, 0.001], 0.05)
    assert s.rejected == (False, False, True) and s.turn == 2
    assert math.isnan(s.adjusted_p[0]) and math.isnan(s.adjusted_p[1])


def test_alpha_is_split_over_the_measures_only() -> None:
    found = fixed_sequences({"blimp": [0.02, 0.02, 0.02], "probe": [0.5, 0.02, 0.001],
                             "untested": [math.nan, math.nan, math.nan]}, 0.05)
    # Two measures have a tested budget: each sequence runs at 0.025, every budget in it at that level.
    assert {key: s.alpha for key, s in found.items()} == dict.fromkeys(found, 0.025)
    assert found["blimp"].turn == 0 and found["probe"].turn == 1 and found["untested"].turn is None


def test_bad_levels_and_p_values_are_refused() -> None:
    with pytest.raises(ValueError, match="alpha"):
        fixed_sequence([0.01], 0.0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fixed_sequence([1.5], 0.05)


def test_one_sided_p_and_bound_are_scipy_s_one_sided_t_test() -> None:
    arm, control = [61.0, 63.5, 60.0, 64.0], [60.0, 61.0, 60.5, 61.5]
    c = compare(dict(enumerate(arm)), dict(enumerate(control)))
    test = stats.ttest_1samp(np.subtract(arm, control), 0.0, alternative="greater")
    assert one_sided_p(c) == pytest.approx(test.pvalue, rel=1e-9)
    low = test.confidence_interval(0.975).low
    assert one_sided_bound(c, 0.975) == pytest.approx(low, rel=1e-9)
    # The bound lies above zero exactly when the one-sided test rejects at that level.
    for confidence in (0.9, 0.95, 0.975, 0.99, 0.999):
        assert (one_sided_bound(c, confidence) > 0) == (one_sided_p(c) < 1 - confidence)
    # Lower is better: the arm "helps" when it is below the control, and the bound is an upper one.
    lower = compare(dict(enumerate(arm)), dict(enumerate(control)), higher_is_better=False)
    assert one_sided_p(lower) == pytest.approx(1 - test.pvalue, rel=1e-9)
    less = stats.ttest_1samp(np.subtract(arm, control), 0.0, alternative="less")
    assert one_sided_bound(lower, 0.975) == pytest.approx(less.confidence_interval(0.975).high, rel=1e-9)


def test_one_sided_p_of_welch_and_of_untested_comparisons() -> None:
    a, b = {0: 3.0, 1: 5.0, 2: 4.0}, {10: 1.0, 11: 2.5, 12: 0.5, 13: 2.0}  # no unit in common: Welch
    welch = stats.ttest_ind(list(a.values()), list(b.values()), equal_var=False)  # its statistic, on min(n) - 1 df
    assert one_sided_p(compare(a, b)) == pytest.approx(stats.t.sf(welch.statistic, 2), rel=1e-9)
    two = compare({0: 1.0, 1: 2.0}, {0: 0.0, 1: 0.0})  # two pairs: not tested
    assert math.isnan(one_sided_p(two)) and math.isnan(one_sided_bound(two, 0.95))
    same = compare({0: 1.0, 1: 1.0, 2: 1.0}, {0: 1.0, 1: 1.0, 2: 1.0})
    assert one_sided_p(same) == 0.5 and one_sided_bound(same, 0.95) == 0.0
