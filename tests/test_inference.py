"""bvr.report.inference holds its claims: hand-checked values, and simulations that it holds its nominal level.

Calibration. Each scenario draws ``SIMS`` null (or effect) ablations at once and tests them with scipy's
vectorised t test, an implementation independent of ours; the first ``REAL`` of the same draws also go through
the real :func:`compare` and :func:`holm`, and the report's decision on them (``Comparison.outcome`` of
:mod:`bvr.report.analysis`), which must give scipy's p-values and the verdict those p-values imply. So the rates
asserted on ``SIMS`` draws are the real code's rates, and the real code's own rate on its ``REAL`` draws is
asserted too. Rates must lie within 3 Monte Carlo standard errors of the claim:
``0.05 + 3 * sqrt(0.05 * 0.95 / 20_000) = 0.0546``. Everything is seeded, so the file gives the same answer
every run.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from bvr.report.analysis import ABLATION_FAMILY, Outcome
from bvr.report.analysis import Comparison as Decided
from bvr.report.inference import (
    MIN_UNITS,
    Comparison,
    adjusted_confidence,
    compare,
    detectable_for,
    holm,
    min_detectable_effect,
    power,
    sign_flip_p,
    simultaneous,
    unit_values,
    units_needed,
    variance_components,
    with_confidence,
)
from bvr.report.measures import Measure

ALPHA = 0.05
SIMS = 20_000
"""Vectorised draws per scenario."""
REAL = 800
"""Draws per scenario also run through the real compare and the report's decision (0.1 to 0.25 ms each)."""
FAMILY = 10
"""Comparisons in a simulated report."""
FAMILIES = 20_000
REAL_FAMILIES = 150


def _mc_se(rate: float, sims: int) -> float:
    return math.sqrt(rate * (1 - rate) / sims)


def _normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape)


def _student_t3(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_t(3, shape)


def _contaminated(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    # Tukey's contaminated normal: one difference in ten comes from a run five times as noisy (a bad seed).
    z = rng.standard_normal(shape)
    return np.where(rng.random(shape) < 0.1, 5.0 * z, z)


DISTRIBUTIONS = {"normal": _normal, "student-t3": _student_t3, "contaminated": _contaminated}


def _arms(differences: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two arms whose per-unit differences are ``differences``, sharing a large per-pretraining-seed effect that
    pairing must cancel (as arms pretrained from the same seed share it)."""
    shared = 80.0 + 5.0 * rng.standard_normal(differences.shape)
    return shared + differences, shared


def _decide(c: Comparison, adjusted_p: float, first: str = "a", second: str = "b", m: int = 1) -> Decided:
    """The report's comparison of ``first`` against ``second`` from ``c = compare(first's, second's)``: as the report
    holds it, ``arm_b - arm_a`` with ``arm_b = first``."""
    measure = Measure("finetune/x", "x", "dev/accuracy", None, c.higher_is_better, {})
    return Decided(ABLATION_FAMILY, measure, second, first, c, c, adjusted_p, m, math.nan)


def _run_real(a: np.ndarray, b: np.ndarray, *, m: int = 1) -> tuple[np.ndarray, list[Decided]]:
    """The real compare and the report's decision on each row: raw p-values and decided comparisons. ``m``: the row is
    the smallest p of a family of ``m``, whose Holm-adjusted p is ``m * p``, so it is tested at ``alpha / m``."""
    p, decided = np.empty(len(a)), []
    for i, (row_a, row_b) in enumerate(zip(a, b, strict=True)):
        c = compare(dict(enumerate(row_a)), dict(enumerate(row_b)))
        p[i] = c.p_value
        decided.append(_decide(c, min(1.0, m * holm([c.p_value])[0]), m=m))
    return p, decided


def _better(decided: list[Decided]) -> np.ndarray:
    return np.array([d.outcome in (Outcome.A_BETTER, Outcome.B_BETTER) for d in decided])


# ---------------------------------------------------------------------------------------------- calibration


@pytest.mark.parametrize("n", [3, 5, 10])
@pytest.mark.parametrize("dist", list(DISTRIBUTIONS))
def test_false_better_rate_holds_alpha_under_the_null(dist, n):
    rng = np.random.default_rng([1, n, list(DISTRIBUTIONS).index(dist)])
    a, b = _arms(DISTRIBUTIONS[dist](rng, (SIMS, n)), rng)
    p = stats.ttest_1samp(a - b, 0.0, axis=1).pvalue
    rate = float((p <= ALPHA).mean())
    assert rate <= ALPHA + 3 * _mc_se(ALPHA, SIMS), f"{dist}, n={n}: false 'better' in {rate:.4f} of nulls"

    real_p, decided = _run_real(a[:REAL], b[:REAL])
    np.testing.assert_allclose(real_p, p[:REAL], rtol=1e-9)
    better = _better(decided)
    assert (better == (p[:REAL] <= ALPHA)).all()
    assert better.mean() <= ALPHA + 3 * _mc_se(ALPHA, REAL)


@pytest.mark.parametrize("dist", list(DISTRIBUTIONS))
def test_holm_holds_the_family_wise_rate_over_ten_null_comparisons(dist):
    n = 5
    rng = np.random.default_rng([2, list(DISTRIBUTIONS).index(dist)])
    a, b = _arms(DISTRIBUTIONS[dist](rng, (FAMILIES, FAMILY, n)), rng)
    p = stats.ttest_1samp(a - b, 0.0, axis=2).pvalue
    # Holm rejects anything in a family exactly when its first step does: the smallest p at most alpha / m.
    any_false = (p.min(axis=1) <= ALPHA / FAMILY)
    rate = float(any_false.mean())
    assert rate <= ALPHA + 3 * _mc_se(ALPHA, FAMILIES), f"{dist}: some false verdict in {rate:.4f} of reports"
    assert (p.min(axis=1) <= ALPHA).mean() > 0.25  # the same reports unadjusted: a false verdict in about a third

    real_any = np.empty(REAL_FAMILIES, dtype=bool)
    for f in range(REAL_FAMILIES):
        family = [compare(dict(enumerate(a[f, j])), dict(enumerate(b[f, j]))) for j in range(FAMILY)]
        adjusted = holm([c.p_value for c in family])
        family = simultaneous(family)
        decided = [_decide(c, q, m=FAMILY) for c, q in zip(family, adjusted, strict=True)]
        real_any[f] = _better(decided).any()
    assert (real_any == any_false[:REAL_FAMILIES]).all()
    assert real_any.mean() <= ALPHA + 3 * _mc_se(ALPHA, REAL_FAMILIES)


@pytest.mark.parametrize(("n", "level"), [(5, ALPHA), (10, ALPHA / FAMILY)])
def test_power_at_the_minimum_detectable_effect_is_eighty_percent(n, level):
    effect = min_detectable_effect(1.0, n, level)
    rng = np.random.default_rng([3, n])
    a, b = _arms(effect + rng.standard_normal((SIMS, n)), rng)
    d = a - b
    p = stats.ttest_1samp(d, 0.0, axis=1).pvalue
    detected = (p <= level) & (d.mean(axis=1) > 0)
    rate = float(detected.mean())
    assert abs(rate - 0.8) <= 3 * _mc_se(0.8, SIMS), f"n={n}, alpha={level}: power {rate:.4f}"

    _, decided = _run_real(a[:REAL], b[:REAL], m=round(ALPHA / level))
    real = np.array([d.winner == "a" for d in decided])
    assert (real == detected[:REAL]).all()
    assert abs(real.mean() - 0.8) <= 3 * _mc_se(0.8, REAL)


def _hsu_p(xa: np.ndarray, xb: np.ndarray) -> np.ndarray:
    """Two-sided p of Welch's statistic on min(n) - 1 degrees of freedom, per row, from scipy's statistic."""
    t = stats.ttest_ind(xa, xb, axis=1, equal_var=False).statistic
    return 2 * stats.t.sf(np.abs(t), min(xa.shape[1], xb.shape[1]) - 1)


@pytest.mark.parametrize(("n_a", "n_b", "sd_b"), [(3, 3, 1.0), (5, 5, 3.0), (3, 6, 3.0), (3, 3, 10.0), (4, 12, 15.0),
                                            (4, 12, 0.5), (3, 16, 1.0)])
def test_unpaired_test_holds_alpha_under_the_null_whatever_the_spreads(n_a, n_b, sd_b):
    # The unpaired test holds its level at 5% and at a report's Holm level (0.5%), with one arm ten times as spread
    # as the other, and in the designs of a control with initialisations of its own (control_seeds): 4 pretraining
    # seeds against 12 random encoders 15 times as spread (BLiMP at tiny: 0.15 against 2.6) or half as spread (the
    # SST-2 probe), 3 against 16. Welch-Satterthwaite's df failed the last three at 5% (6.0 to 7.3%) and most at
    # 0.5% (up to 1.3%); Hsu's min(n) - 1 is what compare uses.
    rng = np.random.default_rng([4, n_a, n_b, int(sd_b * 10)])
    xa, xb = rng.standard_normal((SIMS, n_a)), sd_b * rng.standard_normal((SIMS, n_b))
    p = _hsu_p(xa, xb)
    for level in (ALPHA, ALPHA / FAMILY):
        assert (p <= level).mean() <= level + 3 * _mc_se(level, SIMS), f"level {level}: {(p <= level).mean():.5f}"
    # Arm b's units carry other keys, so compare has nothing to pair and must fall back to the unpaired test.
    real = [compare(dict(enumerate(x)), {10 + i: v for i, v in enumerate(y)})
            for x, y in zip(xa[:300], xb[:300], strict=True)]
    assert not any(c.paired for c in real) and {c.df for c in real} == {min(n_a, n_b) - 1}
    np.testing.assert_allclose([c.p_value for c in real], p[:300], rtol=1e-9)


@pytest.mark.parametrize(("n_a", "n_b", "sd_b"), [(4, 4, 1.0), (4, 12, 0.5), (4, 12, 15.0)])
def test_unpaired_power_at_its_detectable_effect_is_at_least_eighty_percent(n_a, n_b, sd_b):
    # Comparison.mde of an unpaired comparison comes from its standard error (one n and SD cannot describe arms
    # of unequal sizes) on min(n) - 1 degrees of freedom: the difference found at least 80% of the time at the
    # family's level. Where the smaller arm sets the spread it is about 80%; where the larger one does, Hsu's df
    # is conservative and the design finds smaller differences than it claims.
    level = ALPHA / FAMILY
    se = math.sqrt(1.0 / n_a + sd_b**2 / n_b)
    effect = detectable_for(se, float(min(n_a, n_b) - 1), level)
    exact = compare(dict(enumerate([0.0, 1.0, 2.0, 3.0][:n_a])), {10 + i: float(i) for i in range(n_b)}, paired=False)
    assert exact.mde(level) == pytest.approx(detectable_for(exact.se, exact.df, level))
    if n_a == n_b:
        assert exact.mde(level) == pytest.approx(min_detectable_effect(exact.sd, n_a, level, paired=False))
    rng = np.random.default_rng([5, n_b, int(sd_b * 10)])
    xa, xb = effect + rng.standard_normal((SIMS, n_a)), sd_b * rng.standard_normal((SIMS, n_b))
    rate = float(((_hsu_p(xa, xb) <= level) & (xa.mean(axis=1) > xb.mean(axis=1))).mean())
    assert rate >= 0.8 - 3 * _mc_se(0.8, SIMS), f"n={n_a} vs {n_b}, sd_b={sd_b}: power {rate:.4f} at {effect:.3f}"
    if sd_b <= 1:
        assert rate <= 0.8 + 0.05, f"n={n_a} vs {n_b}, sd_b={sd_b}: power {rate:.4f}, far above the claim"


# ---------------------------------------------------------------------------------------------- paired t by hand


def test_paired_t_by_hand_and_against_scipy():
    a = {0: 1.0, 1: 2.0, 2: 4.0, 3: 7.0, 9: 3.0}
    b = {0: 0.5, 1: 2.5, 2: 1.0, 3: 4.0}
    c = compare(a, b)
    # Differences 0.5, -0.5, 3, 3: mean 1.5, squared deviations 1, 4, 2.25, 2.25 sum to 9.5 over 3 df.
    sd = math.sqrt(9.5 / 3)
    se = sd / 2
    assert (c.paired, c.n, c.units, c.only_a, c.only_b) == (True, 4, (0, 1, 2, 3), (9,), ())
    assert c.differences == (0.5, -0.5, 3.0, 3.0)
    assert c.estimate == 1.5 and c.df == 3
    assert c.sd == pytest.approx(sd) and c.se == pytest.approx(se) and c.t == pytest.approx(1.5 / se)
    ref = stats.ttest_rel([1.0, 2.0, 4.0, 7.0], [0.5, 2.5, 1.0, 4.0])
    assert c.t == pytest.approx(ref.statistic) and c.p_value == pytest.approx(ref.pvalue)
    half = stats.t.ppf(0.975, 3) * se
    assert (c.ci_low, c.ci_high) == pytest.approx((1.5 - half, 1.5 + half))
    # |sum| >= 6 needs both 3s of one sign (±0.5 ± 0.5 then gives 5, 6, 6, 7): 3 patterns a sign, 6 of 16.
    assert c.permutation_p == 6 / 16 and c.permutation_min_p == 2 / 16 and c.permutation_exact
    assert c.tested and c.reason == "" and c.paired


def test_welch_against_scipy():
    a = {0: 1.0, 1: 2.0, 2: 3.5}
    b = {0: 2.0, 1: 5.0, 2: 9.0, 3: 1.0}
    c = compare(a, b, paired=False)
    ref = stats.ttest_ind([1.0, 2.0, 3.5], [2.0, 5.0, 9.0, 1.0], equal_var=False)
    assert (c.paired, c.n_a, c.n_b, c.n) == (False, 3, 4, 3)
    # Welch's statistic and standard error; the smaller arm's 2 degrees of freedom (Hsu's), not Satterthwaite's.
    se = math.sqrt(np.var([1.0, 2.0, 3.5], ddof=1) / 3 + np.var([2.0, 5.0, 9.0, 1.0], ddof=1) / 4)
    assert c.se == pytest.approx(se) and c.t == pytest.approx(ref.statistic) and c.df == 2
    assert c.p_value == pytest.approx(2 * stats.t.sf(abs(ref.statistic), 2)) and c.p_value > ref.pvalue
    half = stats.t.ppf(0.975, 2) * se
    assert (c.ci_low, c.ci_high) == pytest.approx((c.estimate - half, c.estimate + half))
    assert c.estimate == pytest.approx(6.5 / 3 - 17 / 4)


def test_arms_without_a_common_unit_fall_back_to_welch_and_say_so():
    c = compare({0: 1.0, 1: 2.0, 2: 3.0}, {5: 4.0, 6: 5.0, 7: 6.0})
    assert not c.paired and c.tested and "no unit in common" in c.note
    # Relabelling 6 units into two arms of 3: only the observed split and its mirror reach |difference| 3.
    assert c.permutation_p == pytest.approx(2 / 20) and c.permutation_min_p == pytest.approx(2 / 20)


def test_sign_flip_worked_by_hand_and_by_brute_force():
    assert sign_flip_p([1.0, 2.0, 3.0]) == 0.25  # |sum| >= 6 only for all + and all -: 2 of 8
    d = np.random.default_rng(5).standard_normal(8)
    sums = np.array([abs(np.dot(s, d)) for s in itertools.product([-1, 1], repeat=8)])
    assert sign_flip_p(d) == pytest.approx((sums >= abs(d.sum()) - 1e-12).mean())


def test_sign_flip_beyond_sixteen_pairs_draws_patterns_near_the_exact_value():
    d = np.random.default_rng(6).standard_normal(18) + 0.4
    signs = 1 - 2 * ((np.arange(2**18)[:, None] >> np.arange(18)) & 1)
    exact = float((np.abs(signs @ d) >= abs(d.sum()) - 1e-9).mean())
    c = compare(dict(enumerate(d)), dict.fromkeys(range(18), 0.0))
    assert not c.permutation_exact
    assert abs(c.permutation_p - exact) <= 4 * math.sqrt(exact * (1 - exact) / 100_000)
    assert compare(dict(enumerate(d)), dict.fromkeys(range(18), 0.0)) == c  # seeded: the same every time


def test_equal_differences_are_certain_and_zero_differences_show_nothing():
    same = compare({0: 2.0, 1: 3.0, 2: 4.0}, {0: 1.0, 1: 2.0, 2: 3.0})
    assert same.p_value == 0.0 and same.t == math.inf and (same.ci_low, same.ci_high) == (1.0, 1.0)
    none = compare({0: 2.0, 1: 3.0, 2: 4.0}, {0: 2.0, 1: 3.0, 2: 4.0})
    assert none.p_value == 1.0 and none.permutation_p == 1.0


# ---------------------------------------------------------------------------------------------- too few units


def test_fewer_than_three_pairs_are_not_tested():
    c = compare({0: 0.8, 1: 0.9, 2: 0.7}, {0: 0.7, 1: 0.8})
    assert (c.n, c.tested, c.reason, c.only_a) == (2, False, "too few units", (2,))
    assert c.estimate == pytest.approx(0.1)  # described, not tested
    assert all(math.isnan(v) for v in (c.p_value, c.ci_low, c.ci_high, c.t, c.permutation_p))
    assert _decide(c, math.nan).outcome == Outcome.TOO_FEW_UNITS and c.n < MIN_UNITS
    welch = compare({0: 1.0, 1: 2.0}, {4: 1.0, 5: 2.0, 6: 3.0, 7: 4.0})
    assert (welch.paired, welch.n_a, welch.n_b, welch.tested) == (False, 2, 4, False)
    assert _decide(welch, math.nan).outcome == Outcome.TOO_FEW_UNITS


def test_an_untested_comparison_does_not_count_toward_holm():
    tested = compare({0: 1.0, 1: 2.0, 2: 3.5}, {0: 0.0, 1: 0.0, 2: 0.0})
    untested = compare({0: 1.0}, {0: 0.0})
    adjusted = holm([tested.p_value, untested.p_value])
    assert adjusted[0] == pytest.approx(tested.p_value) and math.isnan(adjusted[1])
    assert simultaneous([tested, untested])[0].confidence == 0.95


# ---------------------------------------------------------------------------------------------- multiplicity


def test_holm_worked_by_hand():
    # Sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 -> monotone 0.02, 0.03, 0.06, 0.06.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)


def test_holm_passes_nan_through_caps_at_one_and_keeps_order():
    adjusted = holm([0.01, math.nan, 0.04])
    assert adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.04)
    assert holm([0.5, 0.6]) == [1.0, 1.0]
    assert holm([]) == []
    assert holm([1e-20, 0.5]) == pytest.approx([2e-20, 0.5], rel=1e-12)  # tiny p-values are not rounded away
    p = np.random.default_rng(7).random(30)
    q = np.array(holm(p))
    assert (q >= p).all() and (q <= 1).all()
    order = np.argsort(p)
    assert (np.diff(q[order]) >= 0).all()
    with pytest.raises(ValueError, match="0, 1"):
        holm([0.5, 1.5])


def test_bonferroni_intervals_agree_with_holm_in_one_direction_only():
    rng = np.random.default_rng(8)
    excluded_implies_rejected, converse_fails = True, 0
    for _ in range(200):
        effects = rng.choice([0.0, 1.5], size=6)
        family = [compare(dict(enumerate(e + rng.standard_normal(5))), dict.fromkeys(range(5), 0.0))
                  for e in effects]
        adjusted = holm([c.p_value for c in family])
        for c, q in zip(simultaneous(family), adjusted, strict=True):
            excludes = c.ci_low > 0 or c.ci_high < 0
            excluded_implies_rejected &= (not excludes) or q <= ALPHA
            converse_fails += (q <= ALPHA) and not excludes
    assert excluded_implies_rejected
    assert converse_fails > 0  # Holm rejected some whose Bonferroni interval still covers 0


def test_adjusted_confidence_and_recomputed_interval():
    assert adjusted_confidence(0.95, 10) == pytest.approx(0.995)
    assert adjusted_confidence(0.95, 0) == adjusted_confidence(0.95, 1) == 0.95
    c = compare({0: 81.0, 1: 82.0, 2: 83.0}, {0: 80.0, 1: 80.0, 2: 80.0})
    wide = with_confidence(c, 0.995)
    half = stats.t.ppf(0.9975, 2) * (1 / math.sqrt(3))
    assert (wide.ci_low, wide.ci_high, wide.confidence) == pytest.approx((2 - half, 2 + half, 0.995))
    assert wide.p_value == c.p_value


# ---------------------------------------------------------------------------------------------- the decision


def _clear_gain() -> Comparison:
    return compare({0: 81.0, 1: 82.5, 2: 83.0, 3: 82.0, 4: 81.0},
                   {0: 80.0, 1: 80.0, 2: 80.5, 3: 80.5, 4: 80.0, 7: 79.0})


def test_the_decision_names_the_better_arm_by_holm():
    c = simultaneous([_clear_gain()] * 2)[0]  # a family of two: 97.5% intervals
    decided = _decide(c, 0.012, "dynamic", "static", m=2)
    assert (decided.outcome, decided.winner, decided.loser) == (Outcome.B_BETTER, "dynamic", "static")
    assert c.confidence == pytest.approx(0.975) and c.ci_low > 0
    flipped = compare({0: 80.0, 1: 80.0, 2: 80.5}, {0: 81.0, 1: 82.5, 2: 83.0})
    assert _decide(flipped, 0.0004, "static", "dynamic").winner == "dynamic"
    assert _decide(flipped, 0.06, "static", "dynamic").outcome == Outcome.NO_DIFFERENCE  # Holm p above 0.05


def test_the_decision_respects_lower_is_better():
    ppl = compare({0: 3.99, 1: 4.01, 2: 4.00}, {0: 3.70, 1: 3.66, 2: 3.68}, higher_is_better=False)
    decided = _decide(ppl, ppl.p_value, "256", "2k")
    assert (decided.winner, decided.loser) == ("2k", "256") and ppl.estimate > 0


def test_no_difference_comes_with_the_detectable_effect_at_the_family_level():
    c = compare({0: 1.0, 1: -1.0, 2: 0.5, 3: -0.5}, dict.fromkeys(range(4), 0.0))
    assert _decide(c, 1.0, m=10).outcome == Outcome.NO_DIFFERENCE
    assert c.mde(ALPHA / 10) == pytest.approx(min_detectable_effect(c.sd, 4, ALPHA / 10))


# ---------------------------------------------------------------------------------------------- power


def test_power_at_the_detectable_effect_is_the_power_asked_for():
    for n, alpha, paired in [(3, 0.05, True), (5, 0.005, True), (10, 0.05, False), (3, 0.05 / 70, True)]:
        mde = min_detectable_effect(2.0, n, alpha, paired=paired)
        assert power(mde, 2.0, n, alpha, paired=paired) == pytest.approx(0.8, abs=1e-8)
    assert power(0.0, 1.0, 5, 0.05) == pytest.approx(0.05)


def test_detectable_effect_approaches_the_normal_formula():
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)  # 2.8016: the large-sample MDE in standard errors
    assert min_detectable_effect(1.0, 10_000, 0.05) * 100 == pytest.approx(z, rel=1e-3)
    assert min_detectable_effect(1.0, 10_000, 0.05, paired=False) * 100 == pytest.approx(z * math.sqrt(2), rel=1e-3)


def test_detectable_effect_edge_cases():
    assert math.isnan(min_detectable_effect(1.0, 1, 0.05))
    assert math.isnan(min_detectable_effect(math.nan, 5, 0.05))
    assert min_detectable_effect(0.0, 5, 0.05) == 0.0
    with pytest.raises(ValueError, match="power"):
        min_detectable_effect(1.0, 5, 0.05, power=0.01)


def test_units_needed_inverts_the_detectable_effect():
    for n in (3, 4, 7, 25):
        effect = min_detectable_effect(1.5, n, 0.01) * 1.0001
        assert units_needed(effect, 1.5, 0.01).n == n
    assert units_needed(10.0, 1.0, 0.05).n == MIN_UNITS  # never fewer than compare tests
    capped = units_needed(0.001, 1.0, 0.05)
    assert capped.more_than_cap and str(capped) == "more than 10,000"
    assert str(units_needed(math.nan, 1.0, 0.05)) == "unknown"


# ---------------------------------------------------------------------------------------------- nested seeds


def test_unit_values_average_inner_seeds():
    assert unit_values({(1, 0): 0.8, (0, 0): 0.5, (0, 1): 0.7, (1, 2): 0.6}) == {0: pytest.approx(0.6), 1: 0.7}
    with pytest.raises(ValueError, match="finite"):
        unit_values({(0, 0): math.nan})


def test_variance_components_balanced_by_hand():
    # Three pretraining seeds x two fine-tuning seeds. Unit means 2, 5, 8 around 5:
    # SSB = 2 * (9 + 0 + 9) = 36 on 2 df (MSB 18); SSW = 3 * (0.25 + 0.25) = 1.5 on 3 df (MSW 0.5).
    values = {(0, 0): 1.5, (0, 1): 2.5, (1, 0): 4.5, (1, 1): 5.5, (2, 0): 7.5, (2, 1): 8.5}
    vc = variance_components(values)
    assert (vc.ms_between, vc.ms_within, vc.df_between, vc.df_within) == (18.0, 0.5, 2, 3)
    assert vc.n0 == 2.0 and vc.between_var == pytest.approx((18 - 0.5) / 2) and vc.within_var == 0.5
    assert vc.between_sd == pytest.approx(math.sqrt(8.75)) and vc.within_sd == pytest.approx(math.sqrt(0.5))
    assert (vc.n_units, vc.n_inner) == (3, (2, 2, 2))


def test_variance_components_unbalanced_from_the_definitions():
    groups = {0: [1.0, 2.0, 4.0], 1: [6.0], 2: [3.0, 5.0]}
    vc = variance_components({(u, i): v for u, g in groups.items() for i, v in enumerate(g)})
    allv = np.concatenate(list(groups.values()))
    ssw = sum(((np.array(g) - np.mean(g)) ** 2).sum() for g in groups.values())
    ssb = sum(len(g) * (np.mean(g) - allv.mean()) ** 2 for g in groups.values())
    n0 = (6 - (9 + 1 + 4) / 6) / 2
    assert vc.ms_within == pytest.approx(ssw / 3) and vc.ms_between == pytest.approx(ssb / 2)
    assert vc.n0 == pytest.approx(n0) and vc.n_inner == (3, 1, 2)
    assert vc.between_var == pytest.approx(max(0.0, (ssb / 2 - ssw / 3) / n0))


def test_variance_components_truncate_and_say_what_they_cannot_estimate():
    # Unit means equal, inner noise large: the between estimate would be negative, so it is 0.
    noisy = variance_components({(0, 0): 0.0, (0, 1): 2.0, (1, 0): 2.0, (1, 1): 0.0})
    assert noisy.between_var == 0.0 and noisy.within_var == 2.0
    single = variance_components({(0, 0): 1.0, (1, 0): 2.0, (2, 0): 4.0})
    assert math.isnan(single.within_var) and single.df_within == 0
    assert single.between_var == pytest.approx(np.var([1.0, 2.0, 4.0], ddof=1))  # contains the within variance
    one_unit = variance_components({(0, 0): 1.0, (0, 1): 3.0})
    assert math.isnan(one_unit.between_var) and one_unit.within_var == 2.0
    assert math.isnan(variance_components({}).between_var)


# ---------------------------------------------------------------------------------------------- contracts


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="finite"):
        compare({0: 1.0, 1: math.inf, 2: 0.0}, {0: 1.0, 1: 1.0, 2: 1.0})
    with pytest.raises(ValueError, match="confidence"):
        compare({0: 1.0}, {0: 1.0}, confidence=1.0)


def test_comparison_numbers_are_plain_floats():
    # Reports write these to YAML and DataFrames: numpy scalars would leak into both.
    c = _clear_gain()
    fields = (c.estimate, c.ci_low, c.ci_high, c.se, c.df, c.t, c.p_value, c.sd, c.permutation_p, c.permutation_min_p)
    assert all(type(v) is float for v in fields)
    assert all(type(v) is float for v in c.differences)
    assert all(type(v) is float for v in holm([0.01, 0.2]))

