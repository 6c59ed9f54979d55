"""Descriptive statistics of one arm across fine-tuning seeds (:func:`summarize`): the median and quartiles RoBERTa
reports (medians of five), the mean and a bootstrap interval for it, and how many runs collapsed; and which way a
metric is better (:func:`is_higher_better`).

Pure functions on numbers: no files, no MLflow, no pandas. Whether two arms differ is
:mod:`bvr.report.inference`'s question.

Quartiles use numpy's linear interpolation (``method="linear"``, numpy's default and type 7 of Hyndman and Fan),
passed explicitly so a change of numpy's default cannot move a report: the quartiles of ``[1, 2, 3, 4]`` are
1.75 and 3.25.

Intervals are percentile bootstraps of the mean: the seeds are resampled with replacement ``n_boot`` times in
one vectorised draw from ``numpy.random.default_rng(seed)``, and the interval is read off the resampled means at
``(1 - confidence) / 2`` and ``(1 + confidence) / 2``. The same ``seed`` gives the same interval, bit for bit.
These intervals do not hold their label: with two to five seeds a percentile bootstrap is much narrower than a
true 95% interval, and fine-tuning seeds are treated as replicates although the pretraining seed is what
replicates an ablation. They describe spread; :mod:`bvr.report.inference` has the comparisons that hold their
level (paired t over pretraining seeds, Holm across a report, detectable effects).

>>> s = summarize([84.0, 84.5, 83.5, 84.2, 84.1])
>>> s.median, s.q1, s.q3
(84.1, 84.0, 84.2)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_BOOTSTRAPS = 10_000
"""Resamples per interval: the interval's ends move by well under 0.1 points between seeds at this count."""



@dataclass(frozen=True)
class Summary:
    """One arm's results on one metric across fine-tuning seeds.

    Statistics are taken over the ``n`` values kept: every run, or the runs that did not collapse when collapsed
    runs were left out. With no value kept every statistic is NaN; with one, the interval is NaN (one seed says
    nothing about spread).
    """

    n: int
    """Values summarised (after any collapsed runs were left out)."""
    median: float
    q1: float
    """First quartile (linear interpolation)."""
    q3: float
    """Third quartile (linear interpolation)."""
    iqr: float
    """``q3 - q1``."""
    min: float
    max: float
    mean: float
    ci_low: float
    """Lower end of the percentile-bootstrap interval of the mean."""
    ci_high: float
    """Upper end of the percentile-bootstrap interval of the mean."""
    confidence: float
    """Coverage the interval is labelled with (0.95); with a handful of seeds the bootstrap covers less."""
    n_collapsed: int = 0
    """Runs flagged as collapsed among the input, kept or not."""
    n_excluded: int = 0
    """Collapsed runs left out of the statistics; the reader must be told."""

def is_higher_better(metric: str) -> bool:
    """Whether a larger value of ``metric`` is better: every bvr metric except perplexity and losses.

    >>> is_higher_better("dev/f1"), is_higher_better("val/perplexity"), is_higher_better("train/mlm_loss")
    (True, False, False)
    """
    name = metric.rsplit("/", 1)[-1]
    return not (name == "perplexity" or name.endswith("loss"))


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    *,
    seed: int = 0,
    n_boot: int = DEFAULT_BOOTSTRAPS,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean of ``values``; ``(nan, nan)`` for fewer than two values.

    Args:
        values: one number per seed.
        seed: seed of the resampling generator; the same seed gives the same interval.
        n_boot: number of resamples.
        confidence: coverage aimed at, in (0, 1).

    Returns:
        The interval's lower and upper ends.
    """
    _check_bootstrap(n_boot, confidence)
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    # (n_boot, n) seed indices: each row is one resample of the seeds, drawn in one call.
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(means, [tail, 1.0 - tail], method="linear")
    return float(low), float(high)


def summarize(
    values: Sequence[float] | np.ndarray,
    *,
    collapsed: Sequence[bool] | np.ndarray | None = None,
    exclude_collapsed: bool = False,
    seed: int = 0,
    n_boot: int = DEFAULT_BOOTSTRAPS,
    confidence: float = 0.95,
) -> Summary:
    """Summarise one arm's values across fine-tuning seeds.

    Collapsed runs (a fine-tuning run stuck at the majority class, flagged ``bvr.collapsed``) are kept by default,
    since leaving them out flatters an arm that collapses more often; ``exclude_collapsed=True`` leaves them out
    and :attr:`Summary.n_excluded` says how many.

    Args:
        values: one number per run.
        collapsed: a flag per run, parallel to ``values`` (None: no run collapsed).
        exclude_collapsed: leave flagged runs out of the statistics.
        seed: seed of the bootstrap.
        n_boot: bootstrap resamples.
        confidence: coverage of the interval of the mean.

    Returns:
        The :class:`Summary`.

    Raises:
        ValueError: ``collapsed`` has another length than ``values``, or a kept value is NaN or infinite.
    """
    x = np.asarray(values, dtype=float)
    flags = _collapsed_flags(collapsed, x.size)
    kept = x[~flags] if exclude_collapsed else x
    n_collapsed = int(flags.sum())
    n_excluded = n_collapsed if exclude_collapsed else 0
    if not np.isfinite(kept).all():
        raise ValueError(f"values must be finite, got {kept.tolist()}: flag broken runs collapsed and leave them out")
    if kept.size == 0:
        _check_bootstrap(n_boot, confidence)
        return _empty_summary(confidence, n_collapsed=n_collapsed, n_excluded=n_excluded)
    q1, median, q3 = np.percentile(kept, [25, 50, 75], method="linear")
    low, high = bootstrap_ci(kept, seed=seed, n_boot=n_boot, confidence=confidence)
    return Summary(n=int(kept.size), median=float(median), q1=float(q1), q3=float(q3), iqr=float(q3 - q1),
                   min=float(kept.min()), max=float(kept.max()), mean=float(kept.mean()), ci_low=low, ci_high=high,
                   confidence=confidence, n_collapsed=n_collapsed, n_excluded=n_excluded)


def _collapsed_flags(collapsed: Sequence[bool] | np.ndarray | None, n: int) -> np.ndarray:
    """``collapsed`` as a boolean array of length ``n`` (all False when None)."""
    if collapsed is None:
        return np.zeros(n, dtype=bool)
    flags = np.asarray(collapsed, dtype=bool)
    if flags.shape != (n,):
        raise ValueError(f"collapsed has {flags.size} flags for {n} values")
    return flags


def _check_bootstrap(n_boot: int, confidence: float) -> None:
    """Refuse settings under which the interval means nothing."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, got {n_boot}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _empty_summary(confidence: float, *, n_collapsed: int = 0, n_excluded: int = 0) -> Summary:
    """The summary of no values: every statistic NaN."""
    nan = math.nan
    return Summary(n=0, median=nan, q1=nan, q3=nan, iqr=nan, min=nan, max=nan, mean=nan, ci_low=nan, ci_high=nan,
                   confidence=confidence, n_collapsed=n_collapsed, n_excluded=n_excluded)
