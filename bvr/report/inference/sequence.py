"""Hypotheses in a fixed order: the fixed-sequence procedure over a budget curve's budgets, one-sided.

A budget curve's budgets are ordered before any data is seen, and a larger budget is expected to help at least as
much as a smaller one. The procedure tests the largest budget at the full level ``alpha`` (one-sided H0: "this budget
is not better than the control"), then the next smaller one at ``alpha`` again, stopping at the first that does not
reject: the rejected budgets are a suffix of the list, and its smallest member is the "turn". The family-wise error
over the budgets stays at ``alpha`` with no split (closed testing; Maurer, Hothorn and Lehmacher 1995); the price is
that a budget below a non-rejection is never declared, however clear its own evidence. :func:`fixed_sequences`
splits ``alpha`` over several measures (Bonferroni) only. The one-sided p-values and bounds come from the report's
own t tests (:func:`one_sided_p`, :func:`one_sided_bound`); a bound lies above zero exactly when its own test
rejects, and the bounds hold each on its own, not simultaneously over the budgets.

>>> s = fixed_sequence([0.30, 0.01, 0.002, 0.04], 0.05)
>>> s.rejected, s.turn
((False, True, True, True), 1)
>>> fixed_sequence([0.001, 0.20, 0.01], 0.05).rejected  # stops at the middle budget: the smallest is not reached
(False, False, True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scipy import special

from bvr.report.inference.compare import Comparison
from bvr.report.inference.power import check_level


@dataclass(frozen=True)
class FixedSequence:
    """The fixed-sequence procedure's result over hypotheses in increasing order (budgets, smallest first);
    ``adjusted_p`` is, per hypothesis, the largest p-value at it and at every later one (NaN when any of those is NaN):
    it is rejected exactly when this is at most ``alpha``."""

    alpha: float  # the level each hypothesis was tested at (per measure, after any split over measures)
    pvalues: tuple[float, ...]  # the one-sided p-values given, in the input's order (NaN: not tested)
    adjusted_p: tuple[float, ...]
    rejected: tuple[bool, ...]  # the True ones are a suffix of the list

    @property
    def turn(self) -> int | None:
        """The index of the first (smallest) rejected hypothesis; None when none is rejected."""
        return next((i for i, r in enumerate(self.rejected) if r), None)


def fixed_sequence(pvalues: Sequence[float], alpha: float) -> FixedSequence:
    """Test one-sided ``pvalues`` (budgets smallest first) from the last to the first, each at ``alpha`` (the
    family-wise error over the sequence), stopping at the first that does not reject; NaN (untested) stops it too.

    >>> fixed_sequence([0.5, 0.03, math.nan, 0.001], 0.05).adjusted_p
    (nan, nan, nan, 0.001)
    """
    check_level(alpha, "alpha")
    p = tuple(float(v) for v in pvalues)
    if any(not 0.0 <= v <= 1.0 for v in p if not math.isnan(v)):
        raise ValueError(f"p-values must lie in [0, 1], got {list(p)}")
    adjusted, worst = [], 0.0
    for v in reversed(p):
        worst = max(worst, v) if not math.isnan(worst) and not math.isnan(v) else math.nan
        adjusted.append(worst)
    adjusted.reverse()
    return FixedSequence(alpha, p, tuple(adjusted), tuple(not math.isnan(q) and q <= alpha for q in adjusted))


def fixed_sequences(pvalues: Mapping[str, Sequence[float]], alpha: float) -> dict[str, FixedSequence]:
    """:func:`fixed_sequence` per measure, ``alpha`` split over the measures only: each at ``alpha / k``.

    ``k`` counts the measures with at least one tested p-value (as :func:`holm` counts only tested comparisons).

    >>> {key: s.turn for key, s in fixed_sequences({"blimp": [0.04, 0.001], "probe": [0.001, 0.04]}, 0.05).items()}
    {'blimp': 1, 'probe': None}
    """
    check_level(alpha, "alpha")
    k = sum(any(not math.isnan(v) for v in p) for p in pvalues.values())
    return {key: fixed_sequence(p, alpha / max(k, 1)) for key, p in pvalues.items()}


def one_sided_p(c: Comparison) -> float:
    """The one-sided p-value of ``c``'s t test for H0 "``a`` (a budget) is not better than ``b``" (the control), by
    ``c.higher_is_better``: half the two-sided p when the estimate lies on ``a``'s side, one minus that half otherwise
    (the t distribution is symmetric; an estimate of 0 gives 0.5). NaN when ``c`` is not tested.

    >>> from bvr.report.inference.compare import compare
    >>> round(one_sided_p(compare({0: 81.0, 1: 82.0, 2: 83.0}, {0: 80.0, 1: 80.0, 2: 80.0})), 4)
    0.0371
    """
    if not c.tested:
        return math.nan
    favoured = c.estimate > 0 if c.higher_is_better else c.estimate < 0
    return c.p_value / 2 if favoured else 1 - c.p_value / 2


def one_sided_bound(c: Comparison, confidence: float) -> float:
    """The one-sided bound on ``a - b`` at ``confidence`` on the side that would show ``a`` better (a lower bound,
    ``estimate - t_{df, confidence} se``, when higher is better): it excludes 0 exactly when :func:`one_sided_p` is
    below ``1 - confidence``. NaN when ``c`` is not tested.

    >>> from bvr.report.inference.compare import compare
    >>> round(one_sided_bound(compare({0: 81.0, 1: 82.0, 2: 83.0}, {0: 80.0, 1: 80.0, 2: 80.0}), 0.95), 3)
    0.314
    """
    check_level(confidence, "confidence")
    if not c.tested:
        return math.nan
    half = float(special.stdtrit(c.df, confidence)) * c.se
    return c.estimate - half if c.higher_is_better else c.estimate + half
