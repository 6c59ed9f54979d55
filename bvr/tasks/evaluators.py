"""Evaluators: one per evaluation split and task kind, updated batch by batch, computed at the end of the epoch.

Each evaluation also says whether the run *collapsed*: a classifier that predicts one class for every example, a
regressor whose predictions barely vary, a tagger that gives every word the same tag or predicts no entity at all
(every word O), or a span model whose every answer is empty or the same string. Collapse is a known failure
of BERT fine-tuning on small tasks (the BERT paper, section 4.1; Mosbach et al. 2021), and such a seed scores like
the majority baseline.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from bvr.model.losses import IGNORE_INDEX
from bvr.tasks.metrics import main_score, make_metrics
from bvr.tasks.ner import labels_to_tags, predictions_to_tags
from bvr.tasks.ner_metric import EntityF1
from bvr.tasks.readers.squad_json import references
from bvr.tasks.registry import TaskSpec
from bvr.tasks.squad_decode import decode_predictions
from bvr.tasks.squad_metric import SquadMetric

if TYPE_CHECKING:
    from bvr.tasks.data import SplitData

COLLAPSE_STD_RATIO = 1e-2
"""A regression run has collapsed when its predictions' standard deviation is below this share of the gold
scores' (STS-B: about 0.015 points on a 0-5 scale)."""


def _cpu(tensor: torch.Tensor) -> torch.Tensor:
    """Detached float32 (or integer) CPU copy: metrics are kept on the CPU in full precision."""
    tensor = tensor.detach()
    return (tensor.float() if tensor.is_floating_point() else tensor).cpu()


class Evaluator:
    """Scores one evaluation split; subclasses define :meth:`update`, :meth:`_compute` and :meth:`reset`."""

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec

    def update(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> None:
        """Take one batch's head output and its batch."""
        raise NotImplementedError

    def _compute(self) -> dict[str, float]:
        raise NotImplementedError

    def reset(self) -> None:
        """Forget everything seen, for the next epoch."""
        raise NotImplementedError

    def compute(self) -> dict[str, float]:
        """The task's metrics, and the headline score under its own name when it averages several metrics."""
        values = self._compute()
        if len(self.spec.main_metrics) > 1:
            values[self.spec.main_metric] = main_score(self.spec, values)
        return values

    def collapsed(self) -> bool:
        """Whether the predictions seen are degenerate (see the module docstring); False unless a kind defines it."""
        return False


class ClassificationEvaluator(Evaluator):
    """The task's torchmetrics collection, and how often each class was predicted."""

    def __init__(self, spec: TaskSpec) -> None:
        super().__init__(spec)
        self.metrics = make_metrics(spec)
        self.predicted = torch.zeros(spec.num_labels, dtype=torch.long)

    def update(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> None:
        preds = _cpu(logits).argmax(-1)  # (batch,)
        self.metrics.update(preds, _cpu(batch["labels"]))
        self.predicted += torch.bincount(preds, minlength=self.spec.num_labels)

    def _compute(self) -> dict[str, float]:
        return {name: float(value) for name, value in self.metrics.compute().items()}

    def reset(self) -> None:
        self.metrics.reset()
        self.predicted.zero_()

    def collapsed(self) -> bool:
        return int((self.predicted > 0).sum()) == 1


class RegressionEvaluator(Evaluator):
    """The task's correlations, and running sums of the predictions and gold scores to measure their spread."""

    def __init__(self, spec: TaskSpec) -> None:
        super().__init__(spec)
        self.metrics = make_metrics(spec)
        self.sums = torch.zeros(5, dtype=torch.float64)  # n, sum and sum of squares of predictions, then of gold

    def update(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> None:
        preds, gold = _cpu(logits).double(), _cpu(batch["labels"]).double()
        self.metrics.update(preds.float(), gold.float())
        self.sums += torch.stack([torch.tensor(float(len(preds)), dtype=torch.float64), preds.sum(),
                                  preds.square().sum(), gold.sum(), gold.square().sum()])

    def _compute(self) -> dict[str, float]:
        return {name: float(value) for name, value in self.metrics.compute().items()}

    def reset(self) -> None:
        self.metrics.reset()
        self.sums.zero_()

    def spread(self) -> tuple[float, float]:
        """Standard deviations of the predictions and of the gold scores."""
        n, pred_sum, pred_sq, gold_sum, gold_sq = self.sums.tolist()
        if n == 0:
            return 0.0, 0.0
        return (math.sqrt(max(pred_sq / n - (pred_sum / n) ** 2, 0.0)),
                math.sqrt(max(gold_sq / n - (gold_sum / n) ** 2, 0.0)))

    def collapsed(self) -> bool:
        pred_std, gold_std = self.spread()
        return pred_std <= COLLAPSE_STD_RATIO * (gold_std or 1.0)


class TaggingEvaluator(Evaluator):
    """Entity-level micro F1, precision and recall over each word's first sub-token, and the tags predicted."""

    def __init__(self, spec: TaskSpec) -> None:
        super().__init__(spec)
        self.names = list(spec.label_names or ())
        self.metric = EntityF1.from_labels(self.names)
        self.predicted = torch.zeros(len(self.names), dtype=torch.long)
        self.entities_predicted: int | None = None

    def update(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> None:
        logits, labels = _cpu(logits), _cpu(batch["labels"])
        self.metric.update(labels_to_tags(labels, self.names), predictions_to_tags(logits, labels, self.names))
        preds = logits.argmax(-1)[labels != IGNORE_INDEX]
        self.predicted += torch.bincount(preds, minlength=len(self.names))

    def _compute(self) -> dict[str, float]:
        true_positives, predicted, gold = (int(getattr(self.metric, name).sum())
                                           for name in ("true_positives", "predicted", "gold"))
        self.entities_predicted = predicted
        return {"f1": float(self.metric.compute()),
                "precision": true_positives / predicted if predicted else 0.0,
                "recall": true_positives / gold if gold else 0.0}

    def reset(self) -> None:
        self.metric.reset()
        self.predicted.zero_()
        self.entities_predicted: int | None = None

    def collapsed(self) -> bool:
        """One tag for every word, or not a single entity predicted (all O): either scores like the all-O baseline."""
        if self.entities_predicted is None:
            self._compute()
        return int((self.predicted > 0).sum()) == 1 or self.entities_predicted == 0


class SpanEvaluator(Evaluator):
    """Start and end scores of every window, decoded into answers and scored as the official script does."""

    def __init__(self, spec: TaskSpec, split: SplitData, version: str) -> None:
        super().__init__(spec)
        self.split = split
        self.version = version
        self.starts: list[np.ndarray | None] = []
        self.ends: list[np.ndarray | None] = []
        self.reset()

    def update(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> None:
        scores = _cpu(logits).numpy()  # (batch, seq, 2)
        for row, index in enumerate(batch["index"].tolist()):
            self.starts[index], self.ends[index] = scores[row, :, 0], scores[row, :, 1]

    def _compute(self) -> dict[str, float]:
        seen = [i for i, start in enumerate(self.starts) if start is not None]
        if len(seen) < len(self.starts):
            raise RuntimeError(f"{len(self.starts) - len(seen)} windows of {self.split.name} were not evaluated")
        decoded = decode_predictions(self.split.examples, self.split.features, self.starts, self.ends,
                                     version_2=self.version == "2.0")
        self.answers = list(decoded.predictions.values())
        metric = SquadMetric(self.version)
        metric.update(decoded.predictions, references(self.split.examples))
        scores = metric.compute()
        return {"exact_match": float(scores["exact"]), "f1": float(scores["f1"])}

    def reset(self) -> None:
        self.starts = [None] * len(self.split)
        self.ends = [None] * len(self.split)
        self.answers: list[str] | None = None

    def collapsed(self) -> bool:
        """Every answer empty (no-answer for every question) or the same string for every question."""
        if self.answers is None:
            self._compute()
        answers = self.answers or []
        return bool(answers) and (all(a == "" for a in answers) or (len(answers) > 1 and len(set(answers)) == 1))

