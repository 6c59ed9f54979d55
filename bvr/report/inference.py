"""Comparisons of arms that hold their nominal level: paired t over pretraining seeds, Holm, and power.

Pure functions on numbers (numpy and scipy): no files, no MLflow, no pandas.

Design. Each arm (``static``, ``dynamic``, the no-pretraining ``control``) is pretrained at several pretraining
seeds, and each pretrained model is evaluated (one number, or one per probe seed) and fine-tuned over fine-tuning
seeds nested inside the pretraining seed. The pretraining seed is the unit of replication for the ablated factor:
fine-tuning seeds measure one pretrained model more precisely but are not new draws of the pretraining run, so
treating them as independent replicates would overstate the evidence. Hence:

- :func:`unit_values` averages the inner (fine-tuning or probe) seeds to one value per pretraining seed, and
  :func:`variance_components` says how the spread splits between pretraining seeds and fine-tuning seeds;
- :func:`compare` tests ``a - b`` over the units. Arms share pretraining seed ``s``'s initialisation, so units pair
  by pretraining seed and the test is a paired t test on the per-unit differences, with a t interval. Without
  pairing (asked for, or no unit in common) it is Welch's t test. An exact permutation p-value is reported beside
  it: sign flips of the paired differences (exact under symmetric differences, assuming nothing else), or
  relabelling of units between arms when unpaired. With ``n`` pairs it can never go below ``2 / 2**n``, 0.0625 at
  ``n = 5``, which is why the verdict rests on the t test and the permutation p-value is there to be read beside
  it: when the two disagree, the t verdict leans on its assumption that the differences are roughly normal.
- Fewer than :data:`MIN_UNITS` units on either side gives no test at all (``reason == "too few units"``): with two
  pairs the t test has one degree of freedom and its verdict turns on a single spread estimate.

Why not the percentile bootstrap the report used: with 2 to 5 paired seeds its "95 %" interval is far too narrow
(simulated with normal differences, a true null gave a "better" verdict 50 % of the time at 2 pairs, 25 % at 3
and 16 % at 5), whereas the t interval has its nominal coverage under normal differences at any ``n``.
``tests/test_inference.py`` simulates the claims: at 3, 5 and 10 pairs the rate of false "better" verdicts is
5 % under normal differences and 3.5 to 4.4 % under Student t with 3 df and under a contaminated normal (heavy
symmetric tails make the t test conservative).

Limits. The level holds when the paired differences are symmetric about 0, as they are under the null that the
two arms are interchangeable. Differences can be skewed with equal means only when the arms fail differently
(one arm occasionally collapsing, say); the t test is then liberal (centred exponential differences gave false
"better" verdicts 10 to 12 % of the time at 3 to 10 pairs), and the sign-flip test, which assumes symmetry too,
does not rescue it; a report should show collapsed runs beside its verdicts for that reason. Welch's test is
approximate: simulated at 3 to 10 units per arm, with one arm up to three times as noisy, its level was 3.3 to
5.3 %.

Multiplicity. One report makes about 10 to 70 comparisons, and every verdict in it is a claim a reader will act
on alone ("dynamic masking helps SST-2"). :func:`holm` therefore controls the family-wise error rate: the chance
that *any* verdict in the report is false stays at ``alpha``. Benjamini-Hochberg would control only the expected
share of false verdicts among the positive ones, which is too weak when each comparison is read as a finding on
its own. Holm rejects everything Bonferroni rejects, sometimes more, and holds under any dependence between
comparisons (they share arms and seeds). Intervals are made simultaneous with Bonferroni
(:func:`adjusted_confidence`, :func:`simultaneous`): each at ``1 - alpha / m``. Those intervals are conservative,
and agree with Holm in one direction only: a Bonferroni interval that excludes 0 implies Holm rejects (its raw p
is below ``alpha / m``), but Holm may reject a comparison whose Bonferroni interval still covers 0.

Power. :func:`min_detectable_effect` is the smallest true difference the design would declare 80 % of the time
at the level used (``alpha / m`` for a family of ``m``, Holm's first and strictest step), from the noncentral
t distribution; a "no difference detected" verdict quotes it so that "no difference" is not read as "the same".
:func:`units_needed` answers the converse: how many pretraining seeds a given effect would need.

>>> c = compare({0: 81.0, 1: 82.0, 2: 83.0}, {0: 80.0, 1: 80.0, 2: 80.0})
>>> c.estimate, c.sd, c.n, c.df, round(c.t, 3), round(c.p_value, 4), c.permutation_p
(2.0, 1.0, 3, 2.0, 3.464, 0.0742, 0.25)
>>> verdict(c, holm([c.p_value])[0], "dynamic", "static", "dev/accuracy")
'no difference detected on dev/accuracy (n=3; could have detected |d| ≥ 3.26 with 80% power)'
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from scipy import integrate, optimize, special, stats

MIN_UNITS = 3
"""Fewest units (pretraining seeds) per arm for a test: below it a comparison says "too few units"."""

EXACT_PERMUTATION_LIMIT = 2**16
"""Permutation tests enumerate every arrangement up to this many (sign flips of up to 16 pairs)."""

PERMUTATION_DRAWS = 100_000
"""Random arrangements drawn beyond that limit: the p-value's Monte Carlo error is about 0.0007 at p = 0.05."""

PERMUTATION_SEED = 0
"""Seed of those draws, so a report's permutation p-values are the same every time."""

DEFAULT_POWER = 0.8
"""Power at which detectable effects and needed units are quoted."""

UNITS_CAP = 10_000
"""Largest number of units :func:`units_needed` searches; beyond it the answer is "more than" this."""

TOO_FEW_UNITS = "too few units"
""":attr:`Comparison.reason` when a side has fewer than :data:`MIN_UNITS` units."""


# ---------------------------------------------------------------------------------------------- nested seeds


@dataclass(frozen=True)
class VarianceComponents:
    """One-way random-effects split of a metric's variance: between pretraining seeds and within them.

    Model: value = mean + u_unit + e_unit,inner with independent u ~ (0, between_var), e ~ (0, within_var).
    Estimates are ANOVA method of moments, valid for unbalanced designs: ``within_var`` is the within-unit mean
    square, ``between_var = (ms_between - ms_within) / n0`` truncated at 0, where ``n0`` is the effective number
    of inner replicates per unit (their common number when balanced). A negative untruncated value means the
    units agree more than the inner noise predicts, so 0 is the best estimate of ``between_var``.
    """

    between_var: float
    """Variance between pretraining seeds. When no unit has two inner replicates (``within_var`` is NaN) this is
    the plain variance of the unit values, which contains the within variance: the two cannot be separated.
    NaN with fewer than two units."""
    within_var: float
    """Variance between inner (fine-tuning or probe) seeds of one pretrained model; NaN when no unit has two."""
    n_units: int
    """Pretraining seeds."""
    n_inner: tuple[int, ...]
    """Inner replicates of each unit, in ascending order of unit."""
    n0: float
    """Effective inner replicates per unit (``(N - sum n_i^2 / N) / (k - 1)``); NaN with fewer than two units."""
    ms_between: float
    """Between-unit mean square, ``sum n_i (mean_i - mean)^2 / (k - 1)``."""
    ms_within: float
    """Within-unit mean square, ``sum (y - mean_i)^2 / (N - k)``."""
    df_between: int
    df_within: int

    @property
    def between_sd(self) -> float:
        """Standard deviation between pretraining seeds."""
        return math.sqrt(self.between_var)

    @property
    def within_sd(self) -> float:
        """Standard deviation between inner seeds."""
        return math.sqrt(self.within_var)

    @property
    def n_observations(self) -> int:
        """Values in all, ``N``."""
        return sum(self.n_inner)

    @property
    def balanced(self) -> bool:
        """Every unit has the same number of inner replicates."""
        return len(set(self.n_inner)) <= 1

    @property
    def within_estimable(self) -> bool:
        """Some unit has two or more inner replicates, so the two components are separated."""
        return self.df_within > 0


def unit_values(values: Mapping[tuple[int, int], float]) -> dict[int, float]:
    """One value per pretraining seed: the mean over its inner (fine-tuning or probe) seeds.

    Units with more inner seeds are measured more precisely but count once each: the pretraining seed, not the
    fine-tuning seed, is what replicates the ablated factor.

    Args:
        values: the metric per ``(pretraining_seed, inner_seed)``.

    Returns:
        The mean per pretraining seed, in ascending order of seed.

    Raises:
        ValueError: a value is NaN or infinite.

    >>> unit_values({(0, 0): 1.0, (0, 1): 3.0, (1, 0): 5.0})
    {0: 2.0, 1: 5.0}
    """
    return {unit: float(group.mean()) for unit, group in _groups(values).items()}


def variance_components(values: Mapping[tuple[int, int], float]) -> VarianceComponents:
    """Between-pretraining-seed and within (fine-tuning-seed) variance, one-way random-effects ANOVA.

    Args:
        values: the metric per ``(pretraining_seed, inner_seed)``; designs may be unbalanced.

    Returns:
        The :class:`VarianceComponents`; components that the design cannot estimate are NaN.

    Raises:
        ValueError: a value is NaN or infinite.

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


# ---------------------------------------------------------------------------------------------- comparisons


@dataclass(frozen=True)
class Comparison:
    """The difference ``a - b`` between two arms over units (pretraining seeds), with its test.

    Inferential fields (``se``, ``df``, ``t``, ``p_value``, the interval and the permutation p-values) are NaN
    when the comparison is not tested (:attr:`reason` says why).
    """

    estimate: float
    """Mean of the paired differences ``a - b`` (paired), or ``mean(a) - mean(b)`` (Welch); NaN with no unit."""
    ci_low: float
    """Lower end of the t interval of :attr:`estimate` at :attr:`confidence`."""
    ci_high: float
    """Upper end of that interval."""
    confidence: float
    """Coverage of the interval: the level asked for, or the Bonferroni level after :func:`simultaneous`."""
    se: float
    """Standard error of :attr:`estimate`."""
    df: float
    """Degrees of freedom: ``n - 1`` paired, Welch-Satterthwaite's otherwise."""
    t: float
    """``estimate / se`` (infinite when every difference is the same non-zero number)."""
    p_value: float
    """Two-sided p-value of the t test, before any multiplicity adjustment."""
    sd: float
    """Spread that sets the power: SD of the paired differences, or the root mean square of the two arms' SDs."""
    n: int
    """Pairs (paired), or the smaller arm's units (Welch): the ``n`` of :func:`min_detectable_effect`."""
    n_a: int
    """Units of arm a in the test."""
    n_b: int
    """Units of arm b in the test."""
    paired: bool
    """Paired t test (True) or Welch's (False)."""
    higher_is_better: bool
    units: tuple[int, ...]
    """The paired units, ascending (empty when unpaired)."""
    only_a: tuple[int, ...]
    """Units of arm a without a partner in b, left out of a paired test (empty when unpaired)."""
    only_b: tuple[int, ...]
    """Units of arm b without a partner in a, left out of a paired test."""
    differences: tuple[float, ...]
    """``a - b`` per paired unit, in the order of :attr:`units` (empty when unpaired)."""
    permutation_p: float
    """Two-sided permutation p-value: sign flips of the differences (paired) or relabellings of units (Welch)."""
    permutation_min_p: float
    """Smallest permutation p-value this design can give (``2 / 2**n`` paired): above ``alpha`` it cannot reject."""
    permutation_exact: bool
    """Every arrangement was enumerated (else :data:`PERMUTATION_DRAWS` random ones, seeded)."""
    reason: str = ""
    """Why no test was made ("too few units"), or "" when tested."""
    note: str = ""
    """Anything else the reader must know, e.g. that pairing was asked for but no unit was in common."""

    @property
    def tested(self) -> bool:
        """A t test was made, so the comparison can carry a verdict."""
        return not self.reason

    @property
    def n_dropped(self) -> int:
        """Units left out because the other arm has no value for them."""
        return len(self.only_a) + len(self.only_b)

    @property
    def method(self) -> str:
        """'paired t' or 'Welch t'."""
        return "paired t" if self.paired else "Welch t"

    def mde(self, alpha: float = 0.05, power: float = DEFAULT_POWER) -> float:
        """The smallest true ``|a - b|`` this comparison would detect with ``power`` at level ``alpha``."""
        return min_detectable_effect(self.sd, self.n, alpha, power=power, paired=self.paired)


def compare(
    a: Mapping[int, float],
    b: Mapping[int, float],
    *,
    confidence: float = 0.95,
    higher_is_better: bool = True,
    paired: bool = True,
) -> Comparison:
    """Test the difference ``a - b`` between two arms, one value per unit (pretraining seed).

    Paired on the units both arms have; units of one arm only are left out and counted. When ``paired`` is False,
    or when the arms have no unit in common at all, Welch's t test compares the two sets of units instead.

    Args:
        a: arm a's value per unit (e.g. from :func:`unit_values`).
        b: arm b's value per unit.
        confidence: coverage of the t interval, in (0, 1).
        higher_is_better: the metric's direction, carried for :func:`verdict`; the test is two-sided.
        paired: pair units by key.

    Returns:
        The :class:`Comparison`; with fewer than :data:`MIN_UNITS` units per arm it is not tested.

    Raises:
        ValueError: a value is NaN or infinite, or ``confidence`` is outside (0, 1).
    """
    _check_level(confidence, "confidence")
    _check_finite(a, "a")
    _check_finite(b, "b")
    common = sorted(set(a) & set(b))
    if paired and common:
        return _paired(a, b, common, confidence, higher_is_better)
    note = "no unit in common: compared unpaired (Welch)" if paired and a and b else ""
    return _welch(a, b, confidence, higher_is_better, note)


def sign_flip_p(differences: Sequence[float] | np.ndarray, *, draws: int = PERMUTATION_DRAWS,
                seed: int = PERMUTATION_SEED) -> float:
    """Two-sided sign-flip permutation p-value of the mean of paired differences.

    Under the null that each difference is symmetric about 0, every one of the ``2**n`` sign patterns is equally
    likely; the p-value is the share of patterns whose ``|sum|`` is at least the observed one. All patterns are
    enumerated up to 16 differences; beyond, ``draws`` random patterns (seeded) give ``(1 + hits) / (1 + draws)``.

    Args:
        differences: paired differences.
        draws: random patterns when there are more than 16 differences.
        seed: seed of those draws.

    Returns:
        The p-value (NaN with no difference).

    >>> sign_flip_p([1.0, 2.0, 3.0])
    0.25
    """
    d = np.asarray(differences, dtype=float)
    if d.size == 0:
        return math.nan
    observed, tol = abs(d.sum()), _tolerance(d)
    if 2**d.size <= EXACT_PERMUTATION_LIMIT:
        return int(np.count_nonzero(np.abs(_sign_patterns(d.size) @ d) >= observed - tol)) / 2**d.size
    rng, hits = np.random.default_rng(seed), 0
    for size in _chunks(draws):
        signs = rng.integers(0, 2, size=(size, d.size)) * 2 - 1
        hits += int((np.abs(signs @ d) >= observed - tol).sum())
    return (1 + hits) / (1 + draws)


def _paired(a: Mapping[int, float], b: Mapping[int, float], units: list[int], confidence: float,
            higher_is_better: bool) -> Comparison:
    """The paired t test of :func:`compare`."""
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
    low, high = _interval(estimate, se, df, confidence)
    exact = 2**n <= EXACT_PERMUTATION_LIMIT
    return Comparison(**base, ci_low=low, ci_high=high, se=se, df=df, t=t, p_value=p,
                      permutation_p=sign_flip_p(np.array(d)), permutation_min_p=2.0 / 2**n, permutation_exact=exact)


def _welch(a: Mapping[int, float], b: Mapping[int, float], confidence: float, higher_is_better: bool,
           note: str) -> Comparison:
    """Welch's t test of :func:`compare`."""
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
    # Welch-Satterthwaite; with no spread at all the interval is a point and any df gives it.
    df = (wa + wb) ** 2 / (wa**2 / (na - 1) + wb**2 / (nb - 1)) if se > 0 else float(na + nb - 2)
    t, p = _t_test(estimate, se, df)
    low, high = _interval(estimate, se, df, confidence)
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


def _interval(estimate: float, se: float, df: float, confidence: float) -> tuple[float, float]:
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
    rng, hits = np.random.default_rng(PERMUTATION_SEED), 0
    for size in _chunks(PERMUTATION_DRAWS):
        chosen = rng.random((size, pooled.size)).argsort(axis=1)[:, :na]
        hits += int((stat(pooled[chosen].sum(axis=1)) >= observed - tol).sum())
    return (1 + hits) / (1 + PERMUTATION_DRAWS), False


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


def _chunks(total: int, size: int = 10_000) -> list[int]:
    """``total`` split into batches of at most ``size``, to bound memory."""
    return [min(size, total - start) for start in range(0, total, size)]


# ---------------------------------------------------------------------------------------------- multiplicity


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values: family-wise error control under any dependence.

    The ``i``-th smallest of ``m`` p-values becomes ``max_{j <= i} min(1, (m - j + 1) p_(j))``, so adjusted
    p-values keep the order of the raw ones and never exceed 1. NaN entries (untested comparisons) stay NaN and
    do not count toward ``m``. Reject where the adjusted p-value is at most ``alpha``.

    Args:
        pvalues: raw p-values, one per comparison of the family.

    Returns:
        Adjusted p-values, in the input's order.

    Raises:
        ValueError: a p-value is outside [0, 1].

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
    """Bonferroni level at which ``m`` intervals hold simultaneously: ``1 - (1 - confidence) / m``.

    Args:
        confidence: the family's coverage (0.95: all ``m`` intervals cover with chance at least 95 %).
        m: tested comparisons in the family; 0 or 1 leaves the level as it is.

    Returns:
        The per-interval confidence.

    >>> adjusted_confidence(0.95, 10)
    0.995
    """
    _check_level(confidence, "confidence")
    if m < 0:
        raise ValueError(f"m must be at least 0, got {m}")
    return 1 - (1 - confidence) / max(m, 1)


def with_confidence(comparison: Comparison, confidence: float) -> Comparison:
    """The same comparison with its t interval recomputed at ``confidence``."""
    _check_level(confidence, "confidence")
    if not comparison.tested:
        return replace(comparison, confidence=confidence)
    low, high = _interval(comparison.estimate, comparison.se, comparison.df, confidence)
    return replace(comparison, ci_low=low, ci_high=high, confidence=confidence)


def simultaneous(comparisons: Sequence[Comparison], confidence: float = 0.95) -> list[Comparison]:
    """Bonferroni intervals for a family: each at ``1 - (1 - confidence) / m``, ``m`` the tested comparisons.

    They cover all at once with chance at least ``confidence``; conservative, and when one excludes 0 Holm
    rejects that comparison too (not the converse: see the module docstring).
    """
    level = adjusted_confidence(confidence, sum(c.tested for c in comparisons))
    return [with_confidence(c, level) for c in comparisons]


# ---------------------------------------------------------------------------------------------- verdicts


def verdict(
    comparison: Comparison,
    adjusted_p: float,
    a_name: str,
    b_name: str,
    metric: str,
    alpha: float = 0.05,
    *,
    m: int = 1,
    digits: int = 2,
) -> str:
    """A short sentence on which arm is better, from the Holm-adjusted p-value.

    The difference printed is the better arm minus the worse, with the comparison's interval (pass it through
    :func:`simultaneous` first so the interval is at the family's Bonferroni level). A "no difference" verdict
    quotes the effect the design could have detected with 80 % power at ``alpha / m``, Holm's strictest step.

    Args:
        comparison: from :func:`compare`.
        adjusted_p: its Holm-adjusted p-value (:func:`holm` over the family's ``p_value``).
        a_name: what to call arm a.
        b_name: what to call arm b.
        metric: the metric, as the sentence names it.
        alpha: family-wise error rate.
        m: tested comparisons in the family, for the detectable effect.
        digits: decimals printed.

    Returns:
        "dynamic better than static on dev/accuracy (+0.90 [+0.30, +1.50], 99.5% CI; Holm p=0.012; n=5)",
        "no difference detected on dev/accuracy (n=5; could have detected |d| ≥ 1.20 with 80% power)" or
        "not tested: too few units (n=2; at least 3 needed)".

    Raises:
        ValueError: the comparison was tested but ``adjusted_p`` is NaN.
    """
    _check_level(alpha, "alpha")
    size = _n_text(comparison)
    if not comparison.tested:
        return f"not tested: {comparison.reason} ({size}; at least {MIN_UNITS} needed)"
    if math.isnan(adjusted_p):
        raise ValueError("a tested comparison needs its adjusted p-value, got NaN")
    if adjusted_p > alpha:
        mde = comparison.mde(alpha / max(m, 1))
        could = f"; could have detected |d| ≥ {mde:.{digits}f} with {DEFAULT_POWER:.0%} power"
        could = "" if math.isnan(mde) else could
        return f"no difference detected on {metric} ({size}{could})"
    a_wins = (comparison.estimate > 0) == comparison.higher_is_better
    sign = 1 if a_wins else -1
    winner, loser = (a_name, b_name) if a_wins else (b_name, a_name)
    d, low, high = sign * comparison.estimate, *sorted((sign * comparison.ci_low, sign * comparison.ci_high))
    p = "<0.001" if adjusted_p < 0.001 else f"={adjusted_p:.3f}"
    return (f"{winner} better than {loser} on {metric} ({d:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}], "
            f"{comparison.confidence * 100:.4g}% CI; Holm p{p}; {size})")


def _n_text(comparison: Comparison) -> str:
    """'n=5' for pairs, 'n=3 vs 4' for unpaired arms, with any unpaired units left out."""
    size = f"n={comparison.n}" if comparison.paired else f"n={comparison.n_a} vs {comparison.n_b}"
    dropped = comparison.n_dropped
    return size + (f", {dropped} unpaired unit{'s' if dropped > 1 else ''} left out" if dropped else "")


# ---------------------------------------------------------------------------------------------- power


@dataclass(frozen=True)
class UnitsNeeded:
    """How many units (pairs, or units per arm) a design needs for a given power."""

    n: int | None
    """The smallest sufficient number, or the cap when more are needed; None when unknown (NaN inputs)."""
    more_than_cap: bool = False
    """Even :attr:`n` units (the cap) do not reach the power."""

    def __str__(self) -> str:
        if self.n is None:
            return "unknown"
        return f"more than {self.n:,}" if self.more_than_cap else str(self.n)


def power(effect: float, sd_diff: float, n: int, alpha: float, *, paired: bool = True) -> float:
    """Chance that the two-sided t test at level ``alpha`` rejects when the true difference is ``effect``.

    From the noncentral t distribution with ``df = n - 1`` and noncentrality ``effect / (sd / sqrt(n))`` when
    paired (``n`` pairs, ``sd`` of the differences); unpaired, ``n`` units per arm of common SD ``sd``,
    ``df = 2n - 2`` and noncentrality ``effect / (sd sqrt(2 / n))`` (Welch's test is close to this when the SDs
    and sizes are similar).

    Returns:
        The power; NaN when ``n < 2`` or an input is NaN.

    >>> round(power(0.0, 1.0, 5, 0.05), 3)
    0.05
    """
    _check_level(alpha, "alpha")
    return _power(effect, sd_diff, n, alpha, paired)


def _power(effect: float, sd_diff: float, n: int, alpha: float, paired: bool) -> float:
    """:func:`power` without the checks (``units_needed`` has an argument called ``power``)."""
    if n < 2 or math.isnan(effect) or math.isnan(sd_diff):
        return math.nan
    if sd_diff == 0:
        return 1.0 if effect != 0 else alpha
    df, scale = _design(n, paired)
    return _power_ncp(abs(effect) / (sd_diff * scale), df, alpha)


def min_detectable_effect(sd_diff: float, n: int, alpha: float, power: float = DEFAULT_POWER, *,
                          paired: bool = True) -> float:
    """The smallest true difference the design detects with chance ``power`` (two-sided t test at ``alpha``).

    A "no difference detected" verdict means the true difference is probably smaller than this, not that it
    is 0. Use the level the verdicts use: ``alpha / m`` for a Holm family of ``m`` (its first, strictest step).

    Args:
        sd_diff: SD of the paired differences (unpaired: the common SD of one arm's units).
        n: pairs (unpaired: units per arm).
        alpha: significance level of the test.
        power: chance of detection, in (alpha, 1).
        paired: paired design (``df = n - 1``) or two independent arms (``df = 2n - 2``).

    Returns:
        The effect, in the units of ``sd_diff``; NaN when ``n < 2`` or ``sd_diff`` is NaN.

    >>> round(min_detectable_effect(1.0, 10, 0.05), 3)
    0.996
    """
    _check_power(alpha, power)
    if sd_diff < 0:
        raise ValueError(f"sd_diff must be at least 0, got {sd_diff}")
    if n < 2 or math.isnan(sd_diff):
        return math.nan
    df, scale = _design(n, paired)
    return _ncp_for_power(df, alpha, power) * sd_diff * scale


def units_needed(effect: float, sd_diff: float, alpha: float, power: float = DEFAULT_POWER, *,
                 paired: bool = True, cap: int = UNITS_CAP) -> UnitsNeeded:
    """The fewest units whose test detects ``effect`` with chance ``power`` at level ``alpha``.

    Never fewer than :data:`MIN_UNITS`, the fewest :func:`compare` tests.

    Args:
        effect: the true difference to detect.
        sd_diff: SD of the paired differences (unpaired: the common SD of one arm's units).
        alpha: significance level (``alpha / m`` for a family of ``m``).
        power: chance of detection, in (alpha, 1).
        paired: pairs, or units per arm of two independent arms.
        cap: the largest number searched.

    Returns:
        The :class:`UnitsNeeded`.

    >>> str(units_needed(1.0, 1.0, 0.05)), str(units_needed(0.001, 1.0, 0.05))
    ('10', 'more than 10,000')
    """
    _check_power(alpha, power)
    if math.isnan(effect) or math.isnan(sd_diff):
        return UnitsNeeded(None)

    def enough(n: int) -> bool:
        return _power(effect, sd_diff, n, alpha, paired) >= power

    if enough(MIN_UNITS):
        return UnitsNeeded(MIN_UNITS)
    # Power rises with n. Double from the minimum, then bisect: keeps the search near the answer, where the
    # noncentral t is cheap, rather than probing thousands of units for an answer of five.
    low, high = MIN_UNITS, 2 * MIN_UNITS
    while not enough(min(high, cap)):
        if high >= cap:
            return UnitsNeeded(cap, more_than_cap=True)
        low, high = high, 2 * high
    high = min(high, cap)
    while high - low > 1:  # not enough at low, enough at high
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return UnitsNeeded(high)


def _design(n: int, paired: bool) -> tuple[float, float]:
    """Degrees of freedom and the standard error per unit SD, for ``n`` pairs or ``n`` units per arm."""
    return (float(n - 1), math.sqrt(1 / n)) if paired else (float(2 * n - 2), math.sqrt(2 / n))


def _power_ncp(ncp: float, df: float, alpha: float) -> float:
    """Two-sided power of the t test at noncentrality ``ncp``: both tails of the noncentral t."""
    critical = float(stats.t.ppf(1 - alpha / 2, df))
    upper, lower = float(stats.nct.sf(critical, df, ncp)), float(stats.nct.cdf(-critical, df, ncp))
    if math.isnan(upper) or math.isnan(lower):
        # scipy's noncentral t gives NaN where a far tail underflows (e.g. df 9999, ncp 5): integrate instead.
        upper, lower = _nct_tails(critical, df, ncp)
    return upper + lower


def _nct_tails(critical: float, df: float, ncp: float) -> tuple[float, float]:
    """``P(T > critical)`` and ``P(T < -critical)`` for noncentral t, by quadrature.

    ``T = (Z + ncp) / S`` with ``S = sqrt(V / df)``, ``V`` chi-squared, so ``P(T > c) = E[Phi(ncp - c S)]``; the
    expectation is taken over the quantiles of ``V``, a smooth integrand on (0, 1) whatever ``df``.
    """

    def s(u: float) -> float:
        return math.sqrt(float(stats.chi2.ppf(u, df)) / df)

    upper = integrate.quad(lambda u: special.ndtr(ncp - critical * s(u)), 0, 1, limit=200)[0]
    lower = integrate.quad(lambda u: special.ndtr(-ncp - critical * s(u)), 0, 1, limit=200)[0]
    return float(upper), float(lower)


@lru_cache(maxsize=1024)
def _ncp_for_power(df: float, alpha: float, power: float) -> float:
    """The noncentrality at which the two-sided test reaches ``power``; cached because verdicts ask for the
    same few designs over and over and each answer is a root search."""
    # Power rises with ncp, from alpha at 0 towards 1. Bracket the root starting from the normal approximation,
    # which the t answer exceeds: each evaluation of the noncentral t at small df costs tens of milliseconds.
    low = float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))
    if _power_ncp(low, df, alpha) >= power:  # not expected; kept so the bracket is valid whatever the inputs
        low = 0.0
    high = 2 * max(low, 1.0)
    while _power_ncp(high, df, alpha) < power:
        low, high = high, 2 * high
    return float(optimize.brentq(lambda ncp: _power_ncp(ncp, df, alpha) - power, low, high, xtol=1e-10))


# ---------------------------------------------------------------------------------------------- checks


def _groups(values: Mapping[tuple[int, int], float]) -> dict[int, np.ndarray]:
    """Values per pretraining seed (ascending), refusing NaN and infinities."""
    _check_finite(values, "values")
    grouped: dict[int, list[float]] = {}
    for (unit, _inner), value in sorted(values.items()):
        grouped.setdefault(unit, []).append(float(value))
    return {unit: np.array(group) for unit, group in grouped.items()}


def _check_finite(values: Mapping, name: str) -> None:
    """Refuse NaN and infinite values: a broken run must be left out before statistics, and visibly."""
    bad = [key for key, value in values.items() if not math.isfinite(value)]
    if bad:
        raise ValueError(f"{name} must be finite; {sorted(bad)} are not")


def _check_level(level: float, name: str) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {level}")


def _check_power(alpha: float, power: float) -> None:
    _check_level(alpha, "alpha")
    if not alpha < power < 1.0:
        raise ValueError(f"power must be in (alpha, 1) = ({alpha}, 1), got {power}")
