"""BLiMP accuracies: per paradigm, linguistic term and field, macro and micro, from the PLL scores of the pairs."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bvr.evaluation.blimp.pairs import BlimpPair

CHANCE = 0.5
"""Accuracy of a scorer that picks one sentence of each pair at random."""


@dataclass(frozen=True)
class BlimpSummary:
    """A model's macro accuracy and accuracy per linguistic term, over some paradigms."""

    macro: float
    terms: dict[str, float]
    """Mean accuracy over each term's paradigms."""
    paradigms: int


def group_means(values: Mapping[str, float], group_of: Mapping[str, str]) -> dict[str, float]:
    """Mean of ``values`` (paradigm -> accuracy) per group (paradigm -> group), groups sorted by name."""
    members: dict[str, list[float]] = defaultdict(list)
    for paradigm, value in values.items():
        members[group_of[paradigm]].append(value)
    return {group: float(np.mean(members[group])) for group in sorted(members)}


@dataclass
class BlimpResult:
    """Scores and accuracies (fractions in [0, 1]) of one model on BLiMP; build it with :func:`score_pairs`. A tie
    counts as wrong (the release has 7 pairs whose two sentences are identical, always wrong)."""

    pairs: list[BlimpPair]
    good_pll: np.ndarray  # (pairs,)
    bad_pll: np.ndarray  # (pairs,)
    correct: np.ndarray
    """(pairs,) bool, good_pll > bad_pll: per-pair correctness, for paired statistics across models."""
    paradigm_accuracy: dict[str, float]
    """Accuracy of each paradigm (UID), sorted by UID."""
    paradigm_pairs: dict[str, int]
    term_accuracy: dict[str, float]
    """Mean paradigm accuracy of each linguistics_term."""
    field_accuracy: dict[str, float]
    """Mean paradigm accuracy of each field."""
    macro_accuracy: float
    """Mean paradigm accuracy: the paper's headline figure."""
    micro_accuracy: float
    """Share of all pairs correct (equal to the macro accuracy when every paradigm has as many pairs)."""
    seconds: float | None = None
    published: dict[str, BlimpSummary] = dataclasses.field(default_factory=dict)
    """The paper's models over the same paradigms (:func:`bvr.evaluation.blimp.published.published_summaries`),
    when their file was found."""

    @property
    def paradigm_terms(self) -> dict[str, str]:
        return {pair.uid: pair.term for pair in self.pairs}

    @property
    def sentences(self) -> int:
        return 2 * len(self.pairs)

    def summary(self) -> BlimpSummary:
        """This model's macro and per-term accuracies, to set beside :attr:`published`."""
        return BlimpSummary(self.macro_accuracy, dict(self.term_accuracy), len(self.paradigm_accuracy))

    def metrics(self) -> dict[str, float]:
        """Flat metrics, fractions in [0, 1]: ``blimp/macro_accuracy``, ``blimp/micro_accuracy``, ``blimp/pairs``,
        ``blimp/paradigm/<UID>``, ``blimp/term/<linguistics_term>`` and ``blimp/field/<field>``."""
        metrics = {"blimp/macro_accuracy": self.macro_accuracy, "blimp/micro_accuracy": self.micro_accuracy,
                   "blimp/pairs": float(len(self.pairs))}
        for prefix, values in (("paradigm", self.paradigm_accuracy), ("term", self.term_accuracy),
                               ("field", self.field_accuracy)):
            metrics.update({f"blimp/{prefix}/{name}": value for name, value in values.items()})
        return metrics

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-ready values: the metrics, each paradigm, the published models, and every pair."""
        terms, fields = self.paradigm_terms, {pair.uid: pair.field for pair in self.pairs}
        return {
            "metrics": self.metrics(),
            "seconds": self.seconds,
            "sentences": self.sentences,
            "paradigms": {uid: {"term": terms[uid], "field": fields[uid], "pairs": self.paradigm_pairs[uid],
                                "accuracy": accuracy} for uid, accuracy in self.paradigm_accuracy.items()},
            "published": {name: {"macro_accuracy": s.macro, "terms": s.terms, "paradigms": s.paradigms}
                          for name, s in self.published.items()},
            "pairs": [{"UID": p.uid, "pairID": p.pair_id, "good_pll": float(g), "bad_pll": float(b),
                       "correct": bool(c)}
                      for p, g, b, c in zip(self.pairs, self.good_pll, self.bad_pll, self.correct, strict=True)],
        }


def score_pairs(pairs: Sequence[BlimpPair], good_pll: Sequence[float], bad_pll: Sequence[float], *,
                seconds: float | None = None) -> BlimpResult:
    """Accuracies from the scores of each pair's good and bad sentence (any scores where higher means likelier).

    Example:
        >>> pairs = [BlimpPair("p", "0", "syntax", "t", "good", "bad"), BlimpPair("p", "1", "syntax", "t", "a", "b"),
        ...          BlimpPair("q", "0", "semantics", "t", "x", "y")]
        >>> result = score_pairs(pairs, [-1.0, -5.0, -2.0], [-3.0, -5.0, -9.0])
        >>> result.paradigm_accuracy, result.macro_accuracy, result.micro_accuracy
        ({'p': 0.5, 'q': 1.0}, 0.75, 0.6666666666666666)
    """
    pairs = list(pairs)
    if not pairs:
        raise ValueError("no pairs to score")
    good, bad = np.asarray(good_pll, dtype=np.float64), np.asarray(bad_pll, dtype=np.float64)  # (pairs,) each
    if good.shape != (len(pairs),) or bad.shape != (len(pairs),):
        raise ValueError(f"need one good and one bad score per pair: {len(pairs)} pairs, {good.shape}, {bad.shape}")
    correct = good > bad  # strict: a tie is wrong
    members: dict[str, list[int]] = defaultdict(list)
    for index, pair in enumerate(pairs):
        members[pair.uid].append(index)
    accuracy = {uid: float(correct[members[uid]].mean()) for uid in sorted(members)}
    return BlimpResult(pairs=pairs, good_pll=good, bad_pll=bad, correct=correct, paradigm_accuracy=accuracy,
                       paradigm_pairs={uid: len(members[uid]) for uid in accuracy},
                       term_accuracy=group_means(accuracy, {p.uid: p.term for p in pairs}),
                       field_accuracy=group_means(accuracy, {p.uid: p.field for p in pairs}),
                       macro_accuracy=macro_accuracy(accuracy), micro_accuracy=float(correct.mean()), seconds=seconds)


def macro_accuracy(by_paradigm: Mapping[str, float]) -> float:
    """Mean accuracy over paradigms.

    >>> macro_accuracy({"a": 0.5, "b": 1.0})
    0.75
    """
    return float(np.mean(list(by_paradigm.values())))
