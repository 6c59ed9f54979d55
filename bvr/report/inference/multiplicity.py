"""Many comparisons at once: Holm's step-down adjustment, Bonferroni-simultaneous intervals, and the one-line verdict
a report prints for a comparison."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from bvr.report.inference.checks import check_level
from bvr.report.inference.compare import Comparison, t_interval
from bvr.report.inference.power import DEFAULT_POWER, MIN_UNITS


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
    check_level(alpha, "alpha")
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
