"""Entity-level scores of a tagger: precision, recall and F1 as seqeval computes them by default (conlleval
chunking, micro-averaged over entities), as a function (:func:`entity_f1`) and a torchmetrics metric
(:class:`EntityF1`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torchmetrics import Metric

from bvr.tasks.iob import entity_types, extract_entities


@dataclass
class EntityCounts:
    """Entity counts per type, from which every entity-level score follows; a true positive matches a gold entity
    in type, start and end."""

    true_positives: Counter[str] = field(default_factory=Counter)
    predicted: Counter[str] = field(default_factory=Counter)
    gold: Counter[str] = field(default_factory=Counter)


def count_entities(gold_sequences: Iterable[Sequence[str]], pred_sequences: Iterable[Sequence[str]]) -> EntityCounts:
    """Entity counts per type over sentence pairs (gold, predicted) of equal length."""
    counts = EntityCounts()
    for gold_tags, predicted_tags in zip(gold_sequences, pred_sequences, strict=True):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(f"{len(gold_tags)} gold tags but {len(predicted_tags)} predicted tags")
        gold, predicted = extract_entities(gold_tags), extract_entities(predicted_tags)
        counts.true_positives.update(kind for kind, _, _ in gold & predicted)
        counts.predicted.update(kind for kind, _, _ in predicted)
        counts.gold.update(kind for kind, _, _ in gold)
    return counts


def _scores(true_positives: int, predicted: int, gold: int) -> dict[str, float | int]:
    # 0 for an empty denominator, as seqeval's default; F1 from P and R in seqeval's order of operations, so the
    # floats agree to the last bit.
    precision = true_positives / predicted if predicted else 0.0
    recall = true_positives / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "support": gold, "predicted": predicted}


def scores_from_counts(counts: EntityCounts) -> dict[str, Any]:
    """Micro-averaged and per-type precision, recall and F1 from entity counts: ``precision``, ``recall``, ``f1``,
    ``support`` (gold entities) and ``predicted`` over all types, and ``per_type``: the same five per entity type
    seen in gold or predictions."""
    kinds = sorted(set(counts.gold) | set(counts.predicted))
    overall = _scores(sum(counts.true_positives.values()), sum(counts.predicted.values()), sum(counts.gold.values()))
    per_type = {kind: _scores(counts.true_positives[kind], counts.predicted[kind], counts.gold[kind]) for kind in kinds}
    return {**overall, "per_type": per_type}


def entity_f1(gold_sequences: Iterable[Sequence[str]], pred_sequences: Iterable[Sequence[str]]) -> dict[str, Any]:
    """Entity-level precision, recall and F1 as seqeval computes them by default: an entity is found only when type,
    start and end all match; overall figures are micro averages (totals over all types, not a mean of per-type
    scores); a score is 0 when its denominator is."""
    return scores_from_counts(count_entities(gold_sequences, pred_sequences))


class EntityF1(Metric):
    """Entity-level micro F1 (seqeval's default) accumulated over batches; equal to :func:`entity_f1` on all of them.
    The state is three count vectors over a fixed list of entity types, summed across processes."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    true_positives: torch.Tensor
    predicted: torch.Tensor
    gold: torch.Tensor

    def __init__(self, types: Sequence[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.types = list(types)
        for name in ("true_positives", "predicted", "gold"):
            self.add_state(name, default=torch.zeros(len(self.types), dtype=torch.long), dist_reduce_fx="sum")

    @classmethod
    def from_labels(cls, labels: Iterable[str], **kwargs: Any) -> EntityF1:
        return cls(entity_types(labels), **kwargs)

    def _as_tensor(self, counter: Counter[str]) -> torch.Tensor:
        unknown = sorted(set(counter) - set(self.types))
        if unknown:
            raise ValueError(f"entity types {unknown} are not among the metric's types {self.types}")
        return torch.tensor([counter[kind] for kind in self.types], dtype=torch.long, device=self.gold.device)

    def update(self, gold_sequences: Iterable[Sequence[str]], pred_sequences: Iterable[Sequence[str]]) -> None:
        """Count the entities of a batch of sentences (gold and predicted tag lists)."""
        counts = count_entities(gold_sequences, pred_sequences)
        self.true_positives += self._as_tensor(counts.true_positives)
        self.predicted += self._as_tensor(counts.predicted)
        self.gold += self._as_tensor(counts.gold)

    def _counts(self) -> EntityCounts:
        return EntityCounts(*(Counter({kind: int(n) for kind, n in zip(self.types, values.tolist(), strict=True) if n})
                              for values in (self.true_positives, self.predicted, self.gold)))

    def compute(self) -> torch.Tensor:
        """Overall (micro) entity F1, as a float64 scalar so it equals :func:`entity_f1`'s float exactly."""
        return torch.tensor(scores_from_counts(self._counts())["f1"], dtype=torch.float64)

    def report(self) -> dict[str, Any]:
        """Every figure :func:`entity_f1` gives (overall and per type), from the counts summed over processes."""
        with self.sync_context():
            return scores_from_counts(self._counts())
