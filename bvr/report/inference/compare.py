"""Comparing two arms over their units: a paired t test (Welch's when unpaired) with its t interval, and an exact or
Monte Carlo permutation p-value beside it; and many comparisons at once: Holm's step-down adjustment and
Bonferroni-simultaneous intervals (a report's verdict from them is :attr:`bvr.report.analysis.Comparison.outcome`).
The units themselves: inner (fine-tuning or probe) seeds averaged to one value per pretraining seed
(:func:`unit_values`), and the spread split between the two kinds of seed (:func:`variance_components`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from scipy import special

from bvr.report.inference.power import (
    DEFAULT_POWER,
    MIN_UNITS,
    check_finite,
    check_level,
    detectable_for,
)

EXACT_PERMUTATION_LIMIT = 2**16  # permutation tests enumerate up to this many arrangements (sign flips of 16 pairs)
PERMUTATION_DRAWS = 100_000  # random arrangements beyond it: a Monte Carlo error of about 0.0007 at p = 0.05
PERMUTATION_SEED = 0  # of those draws, so a report's permutation p-values are the same every time
TOO_FEW_UNITS = "too few units"  # :attr:`Comparison.reason` when a side has fewer than :data:`MIN_UNITS` units


@dataclass(frozen=True)
class Comparison:
    """The difference ``a - b`` between two arms over units (pretraining seeds), with its test; the inferential
    fields (``se``, ``df``, ``t``, the p-values, the interval) are NaN when it is not tested (:attr:`reason`)."""

    estimate: float  # mean of the paired differences ``a - b``, or ``mean(a) - mean(b)`` (Welch); NaN with no unit
    ci_low: float  # the t interval of :attr:`estimate` at :attr:`confidence`
    ci_high: float
    confidence: float  # the level asked for, or the Bonferroni level after :func:`simultaneous`
    se: float
    df: float  # ``n - 1``: pairs (paired) or the smaller arm's units (Welch's statistic, Hsu's df)
    t: float  # ``estimate / se`` (infinite when every difference is the same non-zero number)
    p_value: float  # two-sided, of the t test, before any multiplicity adjustment
    sd: float  # what sets the power: SD of the paired differences, or the root mean square of the two arms' SDs
    n: int  # pairs (paired), or the smaller arm's units (Welch): the ``n`` of :func:`min_detectable_effect`
    n_a: int
    n_b: int
    paired: bool  # paired t test (True) or Welch's (False)
    higher_is_better: bool
    units: tuple[int, ...]  # the paired units, ascending (empty when unpaired)
    only_a: tuple[int, ...]  # units of arm a without a partner in b, left out of a paired test (empty when unpaired)
    only_b: tuple[int, ...]  # units of arm b without a partner in a, left out of a paired test
    differences: tuple[float, ...]  # ``a - b`` per paired unit, in the order of :attr:`units` (empty when unpaired)
    permutation_p: float  # two-sided: sign flips of the differences (paired) or relabellings of units (Welch)
    permutation_min_p: float  # the smallest this design can give (``2 / 2**n`` paired): above alpha, no rejection
    permutation_exact: bool  # every arrangement was enumerated (else :data:`PERMUTATION_DRAWS` random ones, seeded)
    reason: str = ""  # why no test was made ("too few units"), or "" when tested
    note: str = ""  # anything else the reader must know, e.g. that pairing was asked for but no unit was in common

    @property
    def tested(self) -> bool:
        """A t test was made, so the comparison can carry a verdict."""
        return not self.reason

    def mde(self, alpha: float = 0.05, power: float = DEFAULT_POWER) -> float:
        """The smallest true ``|a - b|`` this comparison would detect with ``power`` at level ``alpha``, from its own
        standard error and degrees of freedom: paired, :func:`~bvr.report.inference.power.min_detectable_effect` of
        its SD and ``n``; unpaired, also arms of unequal sizes, which one ``n`` cannot describe. NaN untested."""
        return detectable_for(self.se, self.df, alpha, power)


def compare(a: Mapping[int, float], b: Mapping[int, float], *, confidence: float = 0.95, higher_is_better: bool = True,
            paired: bool = True) -> Comparison:
    """Test the difference ``a - b`` between two arms, one value per unit (pretraining seed), two-sided.

    Paired on the units both arms have (those of one arm only are left out and counted); Welch's t test when
    ``paired`` is False or no unit is in common; not tested below :data:`MIN_UNITS` units per arm.
    ``higher_is_better`` is carried for the report's decision.
    """
    check_level(confidence, "confidence")
    check_finite(a, "a")
    check_finite(b, "b")
    common = sorted(set(a) & set(b))
    if paired and common:
        return _paired(a, b, common, confidence, higher_is_better)
    note = "no unit in common: compared unpaired (Welch)" if paired and a and b else ""
    return _welch(a, b, confidence, higher_is_better, note)


def sign_flip_p(differences: Sequence[float] | np.ndarray) -> float:
    """Two-sided sign-flip permutation p-value of the mean of paired differences; NaN with none.

    Under the null that each difference is symmetric about 0, all ``2**n`` sign patterns are equally likely; the
    p-value is the share whose ``|sum|`` is at least the observed one, every pattern enumerated up to 16 differences,
    :data:`PERMUTATION_DRAWS` seeded random ones beyond (:func:`_monte_carlo_p`).

    >>> sign_flip_p([1.0, 2.0, 3.0])
    0.25
    """
    d = np.asarray(differences, dtype=float)
    if d.size == 0:
        return math.nan
    observed, tol = abs(d.sum()), _tolerance(d)
    if _flips_enumerable(d.size):
        return int(np.count_nonzero(np.abs(_sign_patterns(d.size) @ d) >= observed - tol)) / 2**d.size
    return _monte_carlo_p(lambda rng, size: np.abs((rng.integers(0, 2, size=(size, d.size)) * 2 - 1) @ d),
                          observed - tol)


def _flips_enumerable(n: int) -> bool:
    """Whether the ``2**n`` sign patterns of ``n`` paired differences are few enough to enumerate."""
    return 2**n <= EXACT_PERMUTATION_LIMIT


def _paired(a: Mapping[int, float], b: Mapping[int, float], units: list[int], confidence: float,
            higher_is_better: bool) -> Comparison:
    d = [float(a[u] - b[u]) for u in units]
    n = len(d)
    estimate, var = _mean_var(d)
    sd = math.sqrt(var)
    base = {"estimate": estimate, "sd": sd, "n": n, "n_a": n, "n_b": n, "paired": True, "confidence": confidence,
            "higher_is_better": higher_is_better, "units": tuple(units), "only_a": tuple(sorted(set(a) - set(b))),
            "only_b": tuple(sorted(set(b) - set(a))), "differences": tuple(d)}
    if n < MIN_UNITS:
        return Comparison(**base, **_untested())
    se, df = sd / math.sqrt(n), float(n - 1)
    t, p = _t_test(estimate, se, df)
    low, high = t_interval(estimate, se, df, confidence)
    return Comparison(**base, ci_low=low, ci_high=high, se=se, df=df, t=t, p_value=p,
                      permutation_p=sign_flip_p(np.array(d)), permutation_min_p=2.0 / 2**n,
                      permutation_exact=_flips_enumerable(n))


def _welch(a: Mapping[int, float], b: Mapping[int, float], confidence: float, higher_is_better: bool,
           note: str) -> Comparison:
    xa, xb = [float(a[u]) for u in sorted(a)], [float(b[u]) for u in sorted(b)]
    na, nb = len(xa), len(xb)
    (mean_a, va), (mean_b, vb) = _mean_var(xa), _mean_var(xb)
    estimate = mean_a - mean_b
    base = {"estimate": estimate, "sd": math.sqrt((va + vb) / 2), "n": min(na, nb), "n_a": na, "n_b": nb,
            "paired": False, "confidence": confidence, "higher_is_better": higher_is_better, "units": (),
            "only_a": (), "only_b": (), "differences": (), "note": note}
    if min(na, nb) < MIN_UNITS:
        return Comparison(**base, **_untested())
    wa, wb = va / na, vb / nb
    se = math.sqrt(wa + wb)
    # Welch's statistic on the smaller arm's n - 1 degrees of freedom (Hsu's), not Welch-Satterthwaite's: at a few
    # units per arm Satterthwaite's df is liberal at a report's levels (at 0.005, 4 units against 12 with the
    # smaller arm the noisier: 1.3%, and 3 against 3, one arm ten times as spread: 1.0%), while min(n) - 1 holds the
    # level whatever the two spreads (tests/test_inference.py). The price is power where the larger arm is the
    # noisier, which a control with many initialisations and few pretraining seeds has.
    df = float(min(na, nb) - 1)
    t, p = _t_test(estimate, se, df)
    low, high = t_interval(estimate, se, df, confidence)
    perm_p, exact = _relabel_p(np.array(xa), np.array(xb))
    min_p = (2.0 if na == nb else 1.0) / math.comb(na + nb, na)  # equal sizes: a labelling and its swap tie
    return Comparison(**base, ci_low=low, ci_high=high, se=se, df=df, t=t, p_value=p, permutation_p=perm_p,
                      permutation_min_p=min_p, permutation_exact=exact)


def _mean_var(x: list[float]) -> tuple[float, float]:
    """Mean and sample variance (NaN where undefined), in plain Python: for the handful of units a comparison
    has, numpy's per-call overhead is most of the cost, and reports and their calibration make thousands."""
    n = len(x)
    if n == 0:
        return math.nan, math.nan
    mean = math.fsum(x) / n
    return mean, (math.fsum((v - mean) ** 2 for v in x) / (n - 1) if n >= 2 else math.nan)


def _untested() -> dict[str, object]:
    """The inferential fields of a comparison that is not tested."""
    nan = math.nan
    return {"ci_low": nan, "ci_high": nan, "se": nan, "df": nan, "t": nan, "p_value": nan, "permutation_p": nan,
            "permutation_min_p": nan, "permutation_exact": False, "reason": TOO_FEW_UNITS}


def _t_test(estimate: float, se: float, df: float) -> tuple[float, float]:
    """t statistic and two-sided p-value; a zero standard error gives p 0 (all differences equal) or 1 (all 0)."""
    if se == 0:
        return (math.nan, 1.0) if estimate == 0 else (math.copysign(math.inf, estimate), 0.0)
    t = estimate / se
    # scipy.special.stdtr is the t CDF itself, without scipy.stats' per-call overhead (a report runs thousands).
    return t, float(2 * special.stdtr(df, -abs(t)))


def t_interval(estimate: float, se: float, df: float, confidence: float) -> tuple[float, float]:
    """The t interval ``estimate ± t_{df, (1 + confidence) / 2} se``."""
    half = float(special.stdtrit(df, (1 + confidence) / 2)) * se
    return estimate - half, estimate + half


def _relabel_p(xa: np.ndarray, xb: np.ndarray) -> tuple[float, bool]:
    """Two-sided permutation p-value of ``mean(a) - mean(b)`` over relabellings of units, and whether exact."""
    pooled = np.concatenate([xa, xb])
    na, total = xa.size, pooled.sum()

    def stat(sum_a: np.ndarray) -> np.ndarray:
        return np.abs(sum_a / na - (total - sum_a) / xb.size)

    observed, tol = float(stat(np.array(xa.sum()))), _tolerance(pooled)
    if math.comb(pooled.size, na) <= EXACT_PERMUTATION_LIMIT:
        return float((stat(pooled[_labellings(pooled.size, na)].sum(axis=1)) >= observed - tol).mean()), True

    def relabelled(rng: np.random.Generator, size: int) -> np.ndarray:  # ``size`` random choices of a's units
        return stat(pooled[rng.random((size, pooled.size)).argsort(axis=1)[:, :na]].sum(axis=1))

    return _monte_carlo_p(relabelled, observed - tol), False


@lru_cache(maxsize=32)
def _sign_patterns(n: int) -> np.ndarray:
    """All ``2**n`` patterns of ±1 over ``n`` differences, one per row."""
    bits = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
    return (1 - 2 * bits).astype(float)


@lru_cache(maxsize=32)
def _labellings(size: int, na: int) -> np.ndarray:
    """Every choice of ``na`` of ``size`` units for arm a, one per row."""
    return np.array(list(itertools.combinations(range(size), na)), dtype=np.intp)


def _tolerance(x: np.ndarray) -> float:
    """Slack for ties between a permuted statistic and the observed one: sums in another order differ in the
    last bits, and a tie must count as at least as extreme."""
    return 1e-9 * float(np.abs(x).sum())


def _monte_carlo_p(draw: Callable[[np.random.Generator, int], np.ndarray], threshold: float) -> float:
    """``(1 + hits) / (1 + draws)``: the share of :data:`PERMUTATION_DRAWS` random arrangements (seeded, drawn in
    batches of 10,000 to bound memory) whose statistic, ``draw(rng, batch)``, reaches ``threshold``."""
    rng, hits = np.random.default_rng(PERMUTATION_SEED), 0
    for start in range(0, PERMUTATION_DRAWS, 10_000):
        hits += int((draw(rng, min(10_000, PERMUTATION_DRAWS - start)) >= threshold).sum())
    return (1 + hits) / (1 + PERMUTATION_DRAWS)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values: family-wise error control under any dependence.

    The ``i``-th smallest of ``m`` p-values becomes ``max_{j <= i} min(1, (m - j + 1) p_(j))``, so adjusted
    p-values keep the order of the raw ones and never exceed 1. NaN entries (untested comparisons) stay NaN and
    do not count toward ``m``. Reject where the adjusted p-value is at most ``alpha``.

    >>> [round(q, 6) for q in holm([0.01, 0.04, 0.03, 0.005])]
    [0.03, 0.06, 0.06, 0.02]
    """
    p = np.asarray(pvalues, dtype=float)
    if ((p < 0) | (p > 1)).any():
        raise ValueError(f"p-values must lie in [0, 1], got {p.tolist()}")
    tested = np.flatnonzero(~np.isnan(p))
    m = tested.size
    order = tested[np.argsort(p[tested], kind="stable")]
    steps = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    adjusted = p.copy()
    adjusted[order] = steps
    return [float(v) for v in adjusted]


def adjusted_confidence(confidence: float, m: int) -> float:
    """Bonferroni level at which ``m`` intervals hold simultaneously: ``1 - (1 - confidence) / m`` (0 or 1 tested
    comparisons leave the level as it is).

    >>> adjusted_confidence(0.95, 10)
    0.995
    """
    check_level(confidence, "confidence")
    if m < 0:
        raise ValueError(f"m must be at least 0, got {m}")
    return 1 - (1 - confidence) / max(m, 1)


def with_confidence(comparison: Comparison, confidence: float) -> Comparison:
    """The same comparison with its t interval recomputed at ``confidence``."""
    check_level(confidence, "confidence")
    if not comparison.tested:
        return replace(comparison, confidence=confidence)
    low, high = t_interval(comparison.estimate, comparison.se, comparison.df, confidence)
    return replace(comparison, ci_low=low, ci_high=high, confidence=confidence)


def simultaneous(comparisons: Sequence[Comparison], confidence: float = 0.95) -> list[Comparison]:
    """Bonferroni intervals for a family, each at ``1 - (1 - confidence) / m`` (``m`` the tested comparisons): they
    cover all at once with chance at least ``confidence`` (see :mod:`bvr.report.inference` for how they meet Holm)."""
    level = adjusted_confidence(confidence, sum(c.tested for c in comparisons))
    return [with_confidence(c, level) for c in comparisons]


@dataclass(frozen=True)
class VarianceComponents:
    """One-way random-effects split of a metric's variance (value = mean + u_unit + e_unit,inner, u ~ (0, between_var),
    e ~ (0, within_var)), by ANOVA method of moments, valid unbalanced: ``within_var`` is the within-unit mean square,
    ``between_var = (ms_between - ms_within) / n0`` truncated at 0 (units that agree more than the inner noise
    predicts). With no unit of two inner replicates (``within_var`` NaN), ``between_var`` is the plain variance of the
    unit values, which holds the within variance too: the two cannot be separated.
    """

    between_var: float  # between pretraining seeds; NaN with fewer than two units
    within_var: float  # between inner (fine-tuning or probe) seeds of one model; NaN when no unit has two
    n_units: int
    n_inner: tuple[int, ...]  # inner replicates of each unit, in ascending order of unit
    n0: float  # effective inner replicates per unit (``(N - sum n_i^2 / N) / (k - 1)``); NaN with fewer than 2 units
    ms_between: float  # ``sum n_i (mean_i - mean)^2 / (k - 1)``
    ms_within: float  # ``sum (y - mean_i)^2 / (N - k)``
    df_between: int
    df_within: int

    @property
    def between_sd(self) -> float:
        return math.sqrt(self.between_var)

    @property
    def within_sd(self) -> float:
        return math.sqrt(self.within_var)


def unit_values(values: Mapping[tuple[int, int], float]) -> dict[int, float]:
    """One value per pretraining seed: the mean over its inner (fine-tuning or probe) seeds, ``values`` being keyed
    ``(pretraining_seed, inner_seed)``. Each unit counts once: the pretraining seed replicates the ablated factor.

    >>> unit_values({(0, 0): 1.0, (0, 1): 3.0, (1, 0): 5.0})
    {0: 2.0, 1: 5.0}
    """
    return {unit: float(group.mean()) for unit, group in _groups(values).items()}


def variance_components(values: Mapping[tuple[int, int], float]) -> VarianceComponents:
    """Between-pretraining-seed and within (inner-seed) variance (:class:`VarianceComponents`); NaN where the design
    cannot estimate a component.

    >>> vc = variance_components({(0, 0): 1.0, (0, 1): 2.0, (0, 2): 3.0, (1, 0): 4.0, (1, 1): 5.0, (1, 2): 6.0})
    >>> vc.ms_between, vc.ms_within, round(vc.between_var, 4), vc.within_var, vc.n_inner
    (13.5, 1.0, 4.1667, 1.0, (3, 3))
    """
    groups = list(_groups(values).values())
    sizes = np.array([g.size for g in groups], dtype=float)
    k, total = len(groups), float(sizes.sum())
    df_between, df_within = max(k - 1, 0), int(total) - k
    if k == 0:
        return VarianceComponents(math.nan, math.nan, 0, (), math.nan, math.nan, math.nan, 0, 0)
    means = np.array([g.mean() for g in groups])
    grand = float(np.concatenate(groups).mean())
    ss_within = float(sum(((g - g.mean()) ** 2).sum() for g in groups))
    ss_between = float((sizes * (means - grand) ** 2).sum())
    ms_within = ss_within / df_within if df_within > 0 else math.nan
    ms_between = ss_between / df_between if df_between > 0 else math.nan
    n0 = (total - float((sizes**2).sum()) / total) / df_between if df_between > 0 else math.nan
    if df_between == 0:
        between = math.nan
    elif df_within == 0:
        between = ms_between  # one value per unit: E[ms_between] = between + within, not separable
    else:
        between = max(0.0, (ms_between - ms_within) / n0)
    return VarianceComponents(between_var=between, within_var=ms_within, n_units=k,
                              n_inner=tuple(int(s) for s in sizes), n0=n0, ms_between=ms_between,
                              ms_within=ms_within, df_between=df_between, df_within=df_within)


def _groups(values: Mapping[tuple[int, int], float]) -> dict[int, np.ndarray]:
    """Values per pretraining seed (ascending), refusing NaN and infinities."""
    check_finite(values, "values")
    grouped: dict[int, list[float]] = {}
    for (unit, _inner), value in sorted(values.items()):
        grouped.setdefault(unit, []).append(float(value))
    return {unit: np.array(group) for unit, group in grouped.items()}
