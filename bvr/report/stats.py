"""Descriptive statistics of one arm across fine-tuning seeds (:func:`summarize`: the median and quartiles RoBERTa
reports, the range, the mean and the collapsed runs) and which way a metric is better (:func:`is_higher_better`).
Pure functions on numbers; they describe spread only, whether arms differ is :mod:`bvr.report.inference`'s question.
Quartiles use numpy's ``method="linear"`` (type 7), passed explicitly so a change of numpy's default cannot move a
report: the quartiles of ``[1, 2, 3, 4]`` are 1.75 and 3.25.

>>> s = summarize([84.0, 84.5, 83.5, 84.2, 84.1])
>>> s.median, s.q1, s.q3
(84.1, 84.0, 84.2)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Summary:
    """One arm's results on one metric across fine-tuning seeds: every run, collapsed ones included (leaving them out
    would flatter an arm that collapses more often). With no value every statistic is NaN."""

    n: int
    median: float
    q1: float
    q3: float
    iqr: float
    min: float
    max: float
    mean: float
    n_collapsed: int = 0  # runs flagged as collapsed among the values


def is_higher_better(metric: str) -> bool:
    """Whether a larger value of ``metric`` is better: every bvr metric except perplexity and losses.

    >>> is_higher_better("dev/f1"), is_higher_better("val/perplexity"), is_higher_better("train/mlm_loss")
    (True, False, False)
    """
    name = metric.rsplit("/", 1)[-1]
    return not (name == "perplexity" or name.endswith("loss"))


def summarize(values: Sequence[float] | np.ndarray, *, collapsed: Sequence[bool] | np.ndarray | None = None) -> Summary:
    """Summarise one arm's values (one per run) across fine-tuning seeds; ``collapsed`` flags, parallel to
    ``values`` (None: none), the runs stuck at the majority class (``bvr.collapsed``), counted and kept."""
    x = np.asarray(values, dtype=float)
    flags = np.zeros(x.size, dtype=bool) if collapsed is None else np.asarray(collapsed, dtype=bool)
    if flags.shape != (x.size,):
        raise ValueError(f"collapsed has {flags.size} flags for {x.size} values")
    n_collapsed = int(flags.sum())
    if not np.isfinite(x).all():
        raise ValueError(f"values must be finite, got {x.tolist()}: a run without a score is not summarised")
    if x.size == 0:
        nan = math.nan
        return Summary(n=0, median=nan, q1=nan, q3=nan, iqr=nan, min=nan, max=nan, mean=nan, n_collapsed=n_collapsed)
    q1, median, q3 = np.percentile(x, [25, 50, 75], method="linear")
    return Summary(n=int(x.size), median=float(median), q1=float(q1), q3=float(q3), iqr=float(q3 - q1),
                   min=float(x.min()), max=float(x.max()), mean=float(x.mean()), n_collapsed=n_collapsed)
