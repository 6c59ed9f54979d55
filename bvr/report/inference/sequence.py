"""Hypotheses in a fixed order: the fixed-sequence procedure over a budget curve's budgets, one-sided.

A budget curve asks, per measure, from which budget on pretraining helps. Its budgets are ordered before any data is
seen (from the smallest up), and a larger budget is expected to help at least as much as a smaller one. The
fixed-sequence procedure uses that order: test the largest budget at the full level ``alpha`` (one-sided: H0 "this
budget is not better than the control"); if it rejects, test the next smaller one at ``alpha`` again, and so on,
stopping at the first budget that does not reject. The rejected budgets are a suffix of the list (from some budget
up to the largest), and its smallest member is the "turn". The family-wise error rate over the budgets stays at
``alpha`` with no split over budgets: the first true null met on the way down is tested at ``alpha``, and nothing
below it can be rejected unless it is (the closed-testing argument; Maurer, Hothorn and Lehmacher 1995). The price
is that a budget below a non-rejection is never declared, however clear its own evidence: "helps at 900 steps but
not at 1,800" is not something this procedure can say.

Several measures (BLiMP, a probe, a fine-tuned task) are several sequences; :func:`fixed_sequences` splits
``alpha`` over the measures only (Bonferroni: each at ``alpha / k``), so the family-wise error rate over every
budget and measure stays at ``alpha`` under any dependence between measures.

The one-sided p-values come from the report's own two-sided t tests (:func:`one_sided_p`), and
:func:`one_sided_bound` gives each budget's bound at the same level. A bound lies above zero exactly when its own
one-sided test rejects at that level; the bounds hold each on its own, not simultaneously over the budgets.

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

from bvr.report.inference.checks import check_level
from bvr.report.inference.compare import Comparison


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
    """Test hypotheses from the last to the first, each at ``alpha``, stopping at the first that does not reject.

    ``pvalues`` are one-sided, budgets smallest first, so the last is tested first; NaN (an untested budget) does not
    reject and so stops the sequence there. ``alpha`` is also the family-wise error rate over the sequence.

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
    """The one-sided p-value of ``c``'s t test for H0 "``a`` is not better than ``b``" (by ``c.higher_is_better``).

    Half the two-sided p-value when the estimate lies on ``a``'s side, one minus that half otherwise: the t
    distribution is symmetric, so this is the t test's own one-sided tail (an estimate of exactly 0 gives 0.5).
    ``a`` is the arm hoped better (a budget), ``b`` the control; NaN when ``c`` is not tested.

    >>> from bvr.report.inference.compare import compare
    >>> round(one_sided_p(compare({0: 81.0, 1: 82.0, 2: 83.0}, {0: 80.0, 1: 80.0, 2: 80.0})), 4)
    0.0371
    """
    if not c.tested:
        return math.nan
    favoured = c.estimate > 0 if c.higher_is_better else c.estimate < 0
    return c.p_value / 2 if favoured else 1 - c.p_value / 2


def one_sided_bound(c: Comparison, confidence: float) -> float:
    """The one-sided confidence bound on ``a - b`` at ``confidence``, on the side that would show ``a`` better.

    A lower bound when higher is better (``estimate - t_{df, confidence} se``), an upper bound otherwise. It
    excludes 0 exactly when :func:`one_sided_p` is below ``1 - confidence`` (``1 - alpha / k`` beside
    :func:`fixed_sequences`). NaN when ``c`` is not tested.

    >>> from bvr.report.inference.compare import compare
    >>> round(one_sided_bound(compare({0: 81.0, 1: 82.0, 2: 83.0}, {0: 80.0, 1: 80.0, 2: 80.0}), 0.95), 3)
    0.314
    """
    check_level(confidence, "confidence")
    if not c.tested:
        return math.nan
    half = float(special.stdtrit(c.df, confidence)) * c.se
    return c.estimate - half if c.higher_is_better else c.estimate + half
