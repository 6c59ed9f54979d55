"""Nested seeds: fine-tuning (or probe) seeds averaged to one value per pretraining seed, and the spread split
between the two kinds of seed."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from bvr.report.inference.power import check_finite


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
