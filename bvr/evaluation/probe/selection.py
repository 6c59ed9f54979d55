"""Choosing a probe's L2 strength on a held-out part of its training subsample, and scoring probe predictions
with the task's metrics (and the trivial baseline's)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from bvr.errors import BvrError
from bvr.evaluation.probe.features import ProbeSplit
from bvr.evaluation.probe.fit import LinearProbe, Standardised, fit_probe
from bvr.tasks.data import subset
from bvr.tasks.glue_metrics import PLAIN_METRICS, UndefinedMetricWarning, main_score, majority_prediction
from bvr.tasks.iob import OUTSIDE
from bvr.tasks.ner_metric import entity_f1
from bvr.tasks.registry import TaskSpec

L2_GRID: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
"""L2 strengths tried, on standardised features with a mean (not summed) loss."""
HELD_OUT_FRACTION = 0.1
"""Share of the training subsample held out to choose the L2 strength (at least one example)."""
HELD_OUT_SEED = 0
"""Seed of the held-out draw from the subsample: the same for every probe seed, which so changes only the subsample."""


def held_out_split(count: int) -> tuple[list[int], list[int]]:
    """Positions ``0..count-1`` split into (fit, held out): :data:`HELD_OUT_FRACTION` held out, at least one.

    >>> fit, held = held_out_split(20)
    >>> len(fit), len(held), sorted(fit + held) == list(range(20))
    (18, 2, True)
    """
    if count < 2:
        raise BvrError(f"choosing the L2 strength needs at least 2 training examples, got {count}",
                       where="max_train_examples")
    held = subset(range(count), max(1, round(HELD_OUT_FRACTION * count)), HELD_OUT_SEED)  # fewer than count
    chosen = set(held)
    return [i for i in range(count) if i not in chosen], held


@dataclass
class Selection:
    """The probe refitted with the L2 strength chosen, and the held-out headline score of each strength tried."""

    probe: LinearProbe
    held_out: dict[float, float]


def train_probe(spec: TaskSpec, split: ProbeSplit, picked: Sequence[int], kind: str,
                sparse: bool = False) -> Selection:
    """Choose the L2 strength on a held-out part of the examples ``picked``, then refit on all of them.

    The grid is walked from the strongest penalty to the weakest, each fit warm-started from the previous one; ties
    go to the stronger penalty (the simpler model). ``sparse``: word counts or the like (:meth:`Standardised.of`).
    """
    fit, held = held_out_split(len(picked))
    fit_examples, held_examples = [picked[i] for i in fit], [picked[i] for i in held]
    x = split.features[kind]
    fit_rows, held_rows = split.rows(fit_examples), split.rows(held_examples)
    fit_data = Standardised.of(x[fit_rows], sparse)
    held_out, probes, previous = {}, {}, None
    for l2 in sorted(L2_GRID, reverse=True):
        probes[l2] = previous = fit_probe(fit_data, split.labels[fit_rows], spec, l2, previous)
        predictions = previous.predict(x[held_rows], spec.kind == "regression")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UndefinedMetricWarning)  # a tiny held-out part may be constant
            held_out[l2] = main_score(spec, score(spec, split, held_examples, predictions))
    best = max(L2_GRID, key=lambda l2: (held_out[l2], l2))
    rows = split.rows(picked)
    refit = fit_probe(Standardised.of(x[rows], sparse), split.labels[rows], spec, best, probes[best])
    return Selection(refit, dict(sorted(held_out.items())))


# --- Scores ----------------------------------------------------------------------------------------------------


def score(spec: TaskSpec, split: ProbeSplit, picked: Sequence[int], predictions: torch.Tensor) -> dict[str, float]:
    """Every metric of the task, and its headline, for predictions on the rows of the examples ``picked``. Tagging:
    entity-level precision, recall and F1 and ``accuracy`` over words; a word without a row is predicted O."""
    if spec.kind != "tagging":
        targets = [split.examples[i].label for i in picked]
        values = {name: PLAIN_METRICS[name](predictions.tolist(), targets) for name in spec.metrics}
        values[spec.main_metric] = main_score(spec, values)
        return values
    names, predicted_ids = spec.label_names or (), predictions.tolist()
    gold = [list(split.examples[i].tags) for i in picked]
    predicted = [[OUTSIDE] * len(tags) for tags in gold]
    row = 0
    for sentence, i in zip(predicted, picked, strict=True):
        for word in split.words[i]:
            sentence[word] = names[predicted_ids[row]]
            row += 1
    entities = entity_f1(gold, predicted)
    words = [(g, p) for tags, guesses in zip(gold, predicted, strict=True) for g, p in zip(tags, guesses, strict=True)]
    values = {name: float(entities[name]) for name in ("f1", "precision", "recall")}
    values["accuracy"] = sum(g == p for g, p in words) / len(words)
    return values


def baseline_scores(spec: TaskSpec, train: ProbeSplit, picked: Sequence[int], dev: ProbeSplit) -> dict[str, float]:
    """The trivial baseline on dev: the majority training class (tag, for tagging) or the mean score everywhere."""
    guess = majority_prediction(spec, train.labels[train.rows(picked)].tolist())
    dtype = torch.float64 if spec.kind == "regression" else torch.long
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)  # expected: the prediction is constant
        return score(spec, dev, range(len(dev.examples)), torch.full((len(dev.labels),), guess, dtype=dtype))
