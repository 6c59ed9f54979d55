"""Evaluators: one per evaluation split and task kind, updated batch by batch, computed at the end of the epoch.

Each also says whether the run *collapsed*, a known failure of BERT fine-tuning on small tasks (the BERT paper,
section 4.1; Mosbach et al. 2021) that scores like the majority baseline: a classifier that predicts one class for
every example, a regressor whose predictions barely vary, a tagger that gives every word the same tag or predicts no
entity at all, or a span model whose every answer is empty or the same string (under SQuAD v2.0, nearly every one
empty).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from bvr.model.losses import IGNORE_INDEX
from bvr.tasks.glue_metrics import main_score, make_metrics
from bvr.tasks.ner import labels_to_tags, predictions_to_tags
from bvr.tasks.ner_metric import EntityF1
from bvr.tasks.readers.squad_json import references
from bvr.tasks.registry import TaskSpec
from bvr.tasks.splits import SplitData
from bvr.tasks.squad.decode import SquadPredictions, decode_predictions
from bvr.tasks.squad.metric import best_threshold, evaluate_v2, squad_scores

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

    def record(self) -> EvalRecord:
        """What the last evaluation leaves in the run beyond its scores; nothing unless a kind defines it."""
        return EvalRecord()


@dataclass
class EvalRecord:
    """What an evaluation leaves in its run beyond the scores: MLflow params (how it was scored) and metrics of
    the final evaluation, files (name -> text) written to the run folder and logged as artifacts, and a warning."""

    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    warning: str | None = None


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

    _compute = ClassificationEvaluator._compute

    def update(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> None:
        preds, gold = _cpu(logits).double(), _cpu(batch["labels"]).double()
        self.metrics.update(preds.float(), gold.float())
        self.sums += torch.stack([torch.tensor(float(len(preds)), dtype=torch.float64), preds.sum(),
                                  preds.square().sum(), gold.sum(), gold.square().sum()])

    def reset(self) -> None:
        self.metrics.reset()
        self.sums.zero_()

    def spread(self) -> tuple[float, float]:
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
        scores = self.metric.report()
        self.entities_predicted = scores["predicted"]
        return {name: scores[name] for name in ("f1", "precision", "recall")}

    def reset(self) -> None:
        self.metric.reset()
        self.predicted.zero_()
        self.entities_predicted: int | None = None

    def collapsed(self) -> bool:
        """One tag for every word, or not a single entity predicted (all O): either scores like the all-O baseline."""
        if self.entities_predicted is None:
            self._compute()
        return int((self.predicted > 0).sum()) == 1 or self.entities_predicted == 0


EMPTY_COLLAPSE_SHARE = 0.95
"""A SQuAD v2.0 run has collapsed when at least this share of its answers are "" (no answer): it then scores
about the share of unanswerable questions, like the answer-nothing baseline."""


class SpanEvaluator(Evaluator):
    """Start and end scores of every window, decoded into answers and scored as the official script does.

    Under v2.0 the answer is "" where the null score exceeds the best span's by more than the threshold: the one
    with the best F1 on ``threshold_from``'s split (held out of training; set by the span kind) when there is one,
    else ``threshold``. The scores are :func:`~bvr.tasks.squad.metric.evaluate_v2`'s of the predictions and
    no-answer probabilities :meth:`record` saves, so re-scoring those files gives the logged numbers.
    """

    def __init__(self, spec: TaskSpec, split: SplitData, version: str, threshold: float = 0.0) -> None:
        super().__init__(spec)
        self.split, self.version, self.threshold = split, version, threshold
        self.threshold_from: SpanEvaluator | None = None
        self.reset()

    def update(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> None:
        scores = _cpu(logits).numpy()  # (batch, seq, 2)
        for row, index in enumerate(batch["index"].tolist()):
            self.starts[index], self.ends[index] = scores[row, :, 0], scores[row, :, 1]

    def null_threshold(self) -> float:
        """The threshold this split is decoded with: chosen on the held-out split, else the fixed one."""
        return self.threshold_from.best_threshold() if self.threshold_from is not None else self.threshold

    def threshold_source(self) -> str:
        """Where :meth:`null_threshold` comes from, in words (logged with the run)."""
        if self.threshold_from is not None:
            return (f"best F1 on the {len(self.threshold_from.split.examples):,} held-out training questions "
                    "(not trained on, not scored), after each epoch")
        if self.threshold == 0.0:
            return "0, BERT's default: not tuned on any data"
        return "finetune.null_threshold, fixed by the configuration"

    def best_threshold(self) -> float:
        """The null-score threshold with the best F1 on this split's questions, over their best spans."""
        decoded = self._decode()
        return best_threshold(decoded.best_spans, decoded.null_diffs, references(self.split.examples))["best_f1_thresh"]

    def _decode(self) -> SquadPredictions:
        if self.decoded is None:
            seen = [i for i, start in enumerate(self.starts) if start is not None]
            if len(seen) < len(self.starts):
                raise RuntimeError(f"{len(self.starts) - len(seen)} windows of {self.split.name} were not evaluated")
            v2 = self.version == "2.0"
            self.decoded = decode_predictions(self.split.examples, self.split.features, self.starts, self.ends,
                                              version_2=v2, threshold=self.null_threshold() if v2 else 0.0)
        return self.decoded

    def _compute(self) -> dict[str, float]:
        decoded = self._decode()
        self.answers = list(decoded.predictions.values())
        refs = references(self.split.examples)
        if self.version == "2.0":
            scores = evaluate_v2(decoded.predictions, decoded.na_probs, refs)
            extra = {key: float(value) for key, value in scores.items() if key not in ("exact", "f1", "missing")}
            return {"exact_match": scores["exact"], "f1": scores["f1"], **extra,
                    "null_threshold": self.null_threshold(), "empty_share": self.empty_share()}
        scores = squad_scores(decoded.predictions, refs, self.version)
        return {"exact_match": scores["exact"], "f1": scores["f1"]}

    def reset(self) -> None:
        self.starts: list[np.ndarray | None] = [None] * len(self.split)
        self.ends: list[np.ndarray | None] = [None] * len(self.split)
        self.answers: list[str] | None = None
        self.decoded: SquadPredictions | None = None

    def empty_share(self) -> float:
        answers = self.answers or []
        return sum(answer == "" for answer in answers) / len(answers) if answers else 0.0

    def collapsed(self) -> bool:
        """Every answer empty (no-answer for every question) or the same string for every question; under v2.0 also
        at least :data:`EMPTY_COLLAPSE_SHARE` of them empty."""
        if self.answers is None:
            self._compute()
        answers = self.answers or []
        nearly_empty = self.version == "2.0" and self.empty_share() >= EMPTY_COLLAPSE_SHARE
        return bool(answers) and (nearly_empty or all(a == "" for a in answers)
                                  or (len(answers) > 1 and len(set(answers)) == 1))

    def record(self) -> EvalRecord:
        """``predictions.json`` (question id -> answer) and, under v2.0, ``na_probs.json`` (question id ->
        probability of no answer), the official script's input files; v2.0's threshold and its source as params;
        ``squad/all_empty`` (1.0 when at least :data:`EMPTY_COLLAPSE_SHARE` of the answers are "")."""
        decoded = self._decode()
        if self.answers is None:
            self._compute()
        files = {"predictions.json": json.dumps(decoded.predictions, indent=1, ensure_ascii=False) + "\n"}
        if self.version != "2.0":
            return EvalRecord(params={"squad.version": self.version}, files=files)
        files["na_probs.json"] = json.dumps(decoded.na_probs, indent=1) + "\n"
        all_empty = self.empty_share() >= EMPTY_COLLAPSE_SHARE
        warning = (f"{self.split.name}: {self.empty_share():.0%} of the answers are empty (no answer): the run "
                   "collapsed to the answer-nothing baseline" if all_empty else None)
        params = {"squad.version": self.version, "squad.null_threshold": repr(self.null_threshold()),
                  "squad.null_threshold_source": self.threshold_source()}
        return EvalRecord(params, {"squad/all_empty": float(all_empty)}, files, warning)
