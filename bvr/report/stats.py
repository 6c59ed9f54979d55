"""Descriptive statistics across fine-tuning seeds: summaries, paired differences between arms, and verdicts in words.

Pure functions on numbers: no files, no MLflow, no pandas. A report collects one value per (arm, task, seed)
and asks three questions of them:

- how an arm did across its seeds (:func:`summarize`): the median and quartiles RoBERTa reports (medians of
  five), the mean and a bootstrap interval for it, and how many runs collapsed;
- whether two arms differ (:func:`paired_difference`): seeds are paired, because fine-tuning seed s gives every
  arm and the no-pretraining control the same data order, dropout stream and initial task-head output layer
  (drawn from the seed alone, :func:`bvr.tasks.source.seeded`), so the difference per seed cancels much of the
  seed noise. The sequence head's pooler is shared less: it is the checkpoint's where the checkpoint has one
  (trained in arms pretrained with NSP or SOP; the random initialisation in the control when the base config has
  a sentence objective) and drawn from the seed, the same in every such model, where it has none;
- what that means in words (:func:`verdict`) and next to the paper (:func:`agreement`).

Quartiles use numpy's linear interpolation (``method="linear"``, numpy's default and type 7 of Hyndman and Fan),
passed explicitly so a change of numpy's default cannot move a report: the quartiles of ``[1, 2, 3, 4]`` are
1.75 and 3.25.

Intervals are percentile bootstraps of the mean: the seeds are resampled with replacement ``n_boot`` times in
one vectorised draw from ``numpy.random.default_rng(seed)``, and the interval is read off the resampled means at
``(1 - confidence) / 2`` and ``(1 + confidence) / 2``. The same ``seed`` gives the same interval, bit for bit.
These intervals do not hold their label. With two to five seeds a percentile bootstrap is much narrower than a
true 95% interval: simulated under a true null with normal differences, its interval excluded 0 (so
:func:`verdict` named a better arm) 50% of the time at 2 pairs, 25% at 3, 16% at 5 and 10% at 10, against the 5%
the label implies. Nothing here corrects for the many comparisons of one report either, and fine-tuning seeds are
treated as replicates although the pretraining seed is what replicates an ablation. So "distinguishable" and the
"(95% CI)" of a verdict are screening statements about this run of the suite, not significance tests or
confidence intervals. :mod:`bvr.report.inference` has the comparisons that hold their level (paired t over
pretraining seeds, Holm across a report, detectable effects); use it for any claim that one arm is better.

>>> s = summarize([84.0, 84.5, 83.5, 84.2, 84.1])
>>> s.median, s.q1, s.q3
(84.1, 84.0, 84.2)
>>> p = paired_difference({0: 0.80, 1: 0.81, 2: 0.79}, {0: 0.80, 1: 0.81, 2: 0.79})
>>> verdict(p, a_name="static", b_name="dynamic", metric="dev/accuracy")
'no difference detected at this scale (n=3)'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_BOOTSTRAPS = 10_000
"""Resamples per interval: the interval's ends move by well under 0.1 points between seeds at this count."""

# Metric names as reports print them; any other name is printed as logged, with '_' read as a space.
_DISPLAY_NAMES = {"f1": "F1", "mcc": "MCC", "exact_match": "exact match", "accuracy_f1": "accuracy/F1",
                  "pearson_spearman": "Pearson/Spearman"}


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

    @property
    def collapsed_note(self) -> str:
        """What happened to collapsed runs, for a table footnote ('' when none collapsed).

        >>> summarize([0.91, 0.50, 0.50], collapsed=[False, True, True], exclude_collapsed=True).collapsed_note
        '2 collapsed runs left out'
        """
        if self.n_collapsed == 0:
            return ""
        runs = "run" if self.n_collapsed == 1 else "runs"
        action = "left out" if self.n_excluded else "kept"
        return f"{self.n_collapsed} collapsed {runs} {action}"


@dataclass(frozen=True)
class Paired:
    """The difference ``b - a`` between two arms, paired by fine-tuning seed."""

    n: int
    """Seeds with a value for both arms."""
    seeds: tuple[int, ...]
    """The paired seeds, ascending."""
    only_a: tuple[int, ...]
    """Seeds with a value for arm a only: not used, and reported so a missing run is not hidden."""
    only_b: tuple[int, ...]
    """Seeds with a value for arm b only."""
    differences: tuple[float, ...]
    """``b - a`` for each paired seed, in the order of ``seeds``."""
    mean_diff: float
    """Mean of ``differences`` (NaN with no pair)."""
    ci_low: float
    """Lower end of the bootstrap interval of the mean difference (NaN with fewer than 2 pairs)."""
    ci_high: float
    """Upper end of that interval."""
    confidence: float
    distinguishable: bool
    """The bootstrap interval excludes 0; always False when there are too few pairs to tell. A screening flag, not
    a test: under a true null it is set about a quarter of the time at 3 pairs (see the module docstring)."""

    @property
    def can_tell(self) -> bool:
        """Enough pairs (2 or more) for an interval; with fewer, no verdict either way."""
        return self.n >= 2

    @property
    def unpaired(self) -> tuple[int, ...]:
        """Every seed present for one arm only, ascending."""
        return tuple(sorted(self.only_a + self.only_b))

    @property
    def half_width(self) -> float:
        """Half the interval's width: the '±' of a verdict."""
        return (self.ci_high - self.ci_low) / 2


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


def paired_difference(
    a_by_seed: Mapping[int, float],
    b_by_seed: Mapping[int, float],
    *,
    seed: int = 0,
    n_boot: int = DEFAULT_BOOTSTRAPS,
    confidence: float = 0.95,
) -> Paired:
    """The mean difference ``b - a`` over the fine-tuning seeds both arms have, with a bootstrap interval.

    Seeds present for one arm only are left out and listed in :attr:`Paired.only_a` / :attr:`Paired.only_b`.
    With fewer than two pairs the interval is NaN and the result says it cannot tell; nothing raises.

    Args:
        a_by_seed: arm a's value per fine-tuning seed.
        b_by_seed: arm b's value per fine-tuning seed.
        seed: seed of the bootstrap (not a fine-tuning seed).
        n_boot: bootstrap resamples.
        confidence: coverage of the interval.

    Returns:
        The :class:`Paired` difference.

    Raises:
        ValueError: a paired value is NaN or infinite.
    """
    seeds = tuple(sorted(set(a_by_seed) & set(b_by_seed)))
    diffs = np.array([b_by_seed[s] - a_by_seed[s] for s in seeds], dtype=float)
    if not np.isfinite(diffs).all():
        bad = [s for s, d in zip(seeds, diffs, strict=True) if not math.isfinite(d)]
        raise ValueError(f"paired values must be finite; seeds {bad} are not")
    low, high = bootstrap_ci(diffs, seed=seed, n_boot=n_boot, confidence=confidence)
    mean = float(diffs.mean()) if diffs.size else math.nan
    return Paired(n=len(seeds), seeds=seeds, only_a=tuple(sorted(set(a_by_seed) - set(b_by_seed))),
                  only_b=tuple(sorted(set(b_by_seed) - set(a_by_seed))), differences=tuple(diffs.tolist()),
                  mean_diff=mean, ci_low=low, ci_high=high, confidence=confidence,
                  distinguishable=bool(low > 0 or high < 0))  # NaN compares False: too few pairs is not a finding


def verdict(
    paired: Paired,
    *,
    a_name: str,
    b_name: str,
    metric: str,
    scale: float = 100,
    higher_is_better: bool | None = None,
    digits: int = 1,
) -> str:
    """A plain sentence on which arm the bootstrap screen favours, if any.

    The "95% CI" in the sentence is the bootstrap's label, not its coverage (see the module docstring); a claim
    that one arm is better needs :func:`bvr.report.inference.verdict`.

    Args:
        paired: the difference ``b - a``, from :func:`paired_difference`.
        a_name: what to call arm a.
        b_name: what to call arm b.
        metric: the metric key (``dev/accuracy``); its last part names the unit.
        scale: factor from logged values to printed points: 100 for scores logged as fractions (GLUE accuracy),
            1 for scores logged in points (SQuAD F1) and for perplexity.
        higher_is_better: the metric's direction; None infers it with :func:`is_higher_better`.
        digits: decimals printed.

    Returns:
        "too few paired seeds to tell (n=1)", "no difference detected at this scale (n=5)", or for example
        "dynamic better by 0.9 ± 0.6 accuracy points (95% CI, n=5)", where ± is the interval's half-width.

    >>> p = paired_difference({0: 3.99, 1: 4.01, 2: 4.00}, {0: 3.70, 1: 3.66, 2: 3.68})
    >>> verdict(p, a_name="256", b_name="2k", metric="val/perplexity", scale=1, digits=2)
    '2k better by 0.32 ± 0.03 perplexity (95% CI, n=3)'
    """
    if not paired.can_tell:
        return f"too few paired seeds to tell (n={paired.n})"
    if not paired.distinguishable:
        return f"no difference detected at this scale (n={paired.n})"
    higher = is_higher_better(metric) if higher_is_better is None else higher_is_better
    b_wins = (paired.mean_diff > 0) == higher
    size, pm = abs(paired.mean_diff) * scale, paired.half_width * scale
    return (f"{b_name if b_wins else a_name} better by {size:.{digits}f} ± {pm:.{digits}f} {_unit(metric)}"
            f" ({paired.confidence:.0%} CI, n={paired.n})")


def agreement(published_delta: float | None, measured: Paired, *, higher_is_better: bool = True) -> str:
    """Whether the measured difference agrees in direction with the published one.

    Both are ``b - a`` on the same metric, so agreeing in sign is agreeing on which arm is better whatever the
    metric's direction; ``higher_is_better`` is accepted so callers can pass a row's direction uniformly, and
    does not change the answer. A published difference of exactly 0 (the paper saw none) disagrees with any
    difference we can distinguish.

    Args:
        published_delta: the paper's ``b - a`` (None or NaN: the paper has no such number).
        measured: our paired difference.
        higher_is_better: the metric's direction.

    Returns:
        "agree", "disagree", "inconclusive" (our interval covers 0, or too few pairs) or "no published value".
    """
    del higher_is_better  # the sign comparison below holds for either direction, see the docstring
    if published_delta is None or math.isnan(published_delta):
        return "no published value"
    if not measured.distinguishable:
        return "inconclusive"
    return "agree" if np.sign(published_delta) == np.sign(measured.mean_diff) else "disagree"


def _unit(metric: str) -> str:
    """The unit a verdict prints: 'accuracy points' for ``dev/accuracy``, 'perplexity' for ``val/perplexity``."""
    name = metric.rsplit("/", 1)[-1]
    shown = _DISPLAY_NAMES.get(name, name.replace("_", " "))
    # Scores are compared in points; perplexity and losses have no points to speak of.
    return shown if not is_higher_better(metric) else f"{shown} points"


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
