"""Many comparisons at once: Holm's step-down adjustment and Bonferroni-simultaneous intervals. What a report
decides from them is :attr:`bvr.report.analysis.Comparison.outcome`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from bvr.report.inference.checks import check_level
from bvr.report.inference.compare import Comparison, t_interval


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
    """Bonferroni intervals for a family: each at ``1 - (1 - confidence) / m``, ``m`` the tested comparisons.

    They cover all at once with chance at least ``confidence``; conservative, and when one excludes 0 Holm
    rejects that comparison too (not the converse: see the module docstring).
    """
    level = adjusted_confidence(confidence, sum(c.tested for c in comparisons))
    return [with_confidence(c, level) for c in comparisons]
