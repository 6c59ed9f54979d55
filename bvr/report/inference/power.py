"""Power of the paired (or Welch) t test from the noncentral t distribution: the smallest effect a design detects,
and the pretraining seeds an effect needs; and the argument checks every inference function shares."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from scipy import integrate, optimize, special, stats

MIN_UNITS = 3  # fewest units (pretraining seeds) per arm for a test: below it a comparison says "too few units"
DEFAULT_POWER = 0.8  # at which detectable effects and needed units are quoted
UNITS_CAP = 10_000  # the most units :func:`units_needed` searches; beyond it the answer is "more than" this


def check_finite(values: Mapping, name: str) -> None:
    """Refuse NaN and infinite values: a broken run must be left out before statistics, and visibly."""
    bad = [key for key, value in values.items() if not math.isfinite(value)]
    if bad:
        raise ValueError(f"{name} must be finite; {sorted(bad)} are not")


def check_level(level: float, name: str) -> None:
    """Refuse a level (alpha, confidence, power) outside (0, 1); ``name`` names it in the error."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {level}")


def check_power(alpha: float, power: float) -> None:
    """Refuse an ``alpha`` outside (0, 1) or a ``power`` outside (alpha, 1)."""
    check_level(alpha, "alpha")
    if not alpha < power < 1.0:
        raise ValueError(f"power must be in (alpha, 1) = ({alpha}, 1), got {power}")


@dataclass(frozen=True)
class UnitsNeeded:
    """How many units (pairs, or units per arm) a design needs for a given power."""

    n: int | None  # the smallest sufficient number, or the cap when more are needed; None when unknown (NaN inputs)
    more_than_cap: bool = False  # even :attr:`n` units (the cap) do not reach the power

    def __str__(self) -> str:
        if self.n is None:
            return "unknown"
        return f"more than {self.n:,}" if self.more_than_cap else str(self.n)


def power(effect: float, sd_diff: float, n: int, alpha: float, *, paired: bool = True) -> float:
    """Chance that the two-sided t test at level ``alpha`` rejects when the true difference is ``effect``, from the
    noncentral t: paired, ``n`` pairs of differences of SD ``sd_diff`` (``df = n - 1``); unpaired, ``n`` units per
    arm of common SD ``sd_diff`` (``df = n - 1``, as :func:`~bvr.report.inference.compare.compare` tests). NaN when
    ``n < 2`` or an input is NaN.

    >>> round(power(0.0, 1.0, 5, 0.05), 3)
    0.05
    """
    check_level(alpha, "alpha")
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
    """The smallest true difference the design detects with chance ``power`` (two-sided t test at ``alpha``, which
    should be the verdicts' level: ``alpha / m`` for a Holm family of ``m``), in the units of ``sd_diff`` (as for
    :func:`power`); NaN when ``n < 2`` or ``sd_diff`` is NaN. "No difference detected" means the true difference is
    probably smaller than this, not that it is 0.

    >>> round(min_detectable_effect(1.0, 10, 0.05), 3)
    0.996
    """
    check_power(alpha, power)
    if sd_diff < 0:
        raise ValueError(f"sd_diff must be at least 0, got {sd_diff}")
    if n < 2 or math.isnan(sd_diff):
        return math.nan
    df, scale = _design(n, paired)
    return _ncp_for_power(df, alpha, power) * sd_diff * scale


def detectable_for(se: float, df: float, alpha: float, power: float = DEFAULT_POWER) -> float:
    """The smallest true difference a test of standard error ``se`` with ``df`` degrees of freedom detects with
    chance ``power`` at ``alpha``: :func:`min_detectable_effect` for a design it cannot describe by one ``n``
    (Welch's test of arms of unequal sizes); NaN when either is NaN.

    >>> round(detectable_for(1.0 / math.sqrt(10), 9.0, 0.05), 3) == round(min_detectable_effect(1.0, 10, 0.05), 3)
    True
    """
    check_power(alpha, power)
    if math.isnan(se) or math.isnan(df):
        return math.nan
    return _ncp_for_power(df, alpha, power) * se


def units_needed(effect: float, sd_diff: float, alpha: float, power: float = DEFAULT_POWER, *,
                 paired: bool = True, cap: int = UNITS_CAP) -> UnitsNeeded:
    """The fewest units whose test detects ``effect`` with chance ``power`` at level ``alpha``.

    Never fewer than :data:`MIN_UNITS`, the fewest :func:`compare` tests; ``sd_diff`` as for
    :func:`min_detectable_effect`.

    >>> str(units_needed(1.0, 1.0, 0.05)), str(units_needed(0.001, 1.0, 0.05))
    ('10', 'more than 10,000')
    """
    check_power(alpha, power)
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
    return (float(n - 1), math.sqrt(1 / n)) if paired else (float(n - 1), math.sqrt(2 / n))


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
