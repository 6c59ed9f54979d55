"""One fine-tuning LightningModule for every task kind; the kinds differ only in a small :class:`Family` object.

A family supplies the head, the loss, the evaluation and the trivial baseline of one task kind, and
:data:`FAMILIES` maps each kind to its family:

========================  ============================================  ===========================  ==================
kind                      head                                          loss                         evaluation
========================  ============================================  ===========================  ==================
classification            first token: dense + tanh, dropout, linear    cross-entropy                make_metrics
regression (STS-B)        the same, one output                          mean squared error           make_metrics
tagging (CoNLL-2003)      per token: dropout, linear                    cross-entropy, -100 skipped  EntityF1
span (SQuAD)              per token: linear to start and end scores     mean of start and end CE     SquadMetric
========================  ============================================  ===========================  ==================

The dense + tanh of the sequence head is the checkpoint's pooler where it has one (BERT trained with NSP;
bert-base-uncased), else a fresh one. Hugging Face RoBERTa folders carry an unused pooler that loading drops, so
they get a fresh one too, as ``RobertaClassificationHead`` does.

The model (:class:`FinetuneModel`: encoder + head) is a plain ``nn.Module``; :class:`FinetuneModule` adds AdamW
(no decay on biases and LayerNorm), linear warm-up and decay, the losses, and evaluation of every evaluation split
after each epoch, kept in :attr:`FinetuneModule.history` and logged as ``split/metric`` (``dev/accuracy``).

Each evaluation also says whether the run *collapsed*: a classifier that predicts one class for every example, a
regressor whose predictions barely vary, a tagger that gives every word the same tag or predicts no entity at all
(every word O), or a span model whose every answer is empty or the same string. Collapse is a known failure
of BERT fine-tuning on small tasks (the BERT paper, section 4.1; Mosbach et al. 2021), and such a seed scores like
the majority baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bvr.model.encoder import Encoder, Pooler, init_weights
from bvr.model.encoder_config import EncoderConfig
from bvr.model.layers import Dropout
from bvr.pretraining.module import NonFiniteLoss, linear_schedule, no_decay
from bvr.tasks.data import SplitData, TaskData
from bvr.tasks.metrics import baseline_note, main_score, majority_baseline, make_metrics
from bvr.tasks.ner import IGNORE_INDEX, EntityF1, labels_to_tags, predictions_to_tags
from bvr.tasks.registry import TaskSpec
from bvr.tasks.squad import SquadMetric, decode_predictions, references, squad_scores

COLLAPSE_STD_RATIO = 1e-2
"""A regression run has collapsed when its predictions' standard deviation is below this share of the gold
scores' (STS-B: about 0.015 points on a 0-5 scale)."""

# ---------------------------------------------------------------------------------------------------------------
# Heads and the model (plain torch)
# ---------------------------------------------------------------------------------------------------------------


def _fresh(module: nn.Module, config: EncoderConfig) -> nn.Module:
    """``module`` with BERT's initialisation (normal weights, zero biases)."""
    module.apply(lambda m: init_weights(m, config.initializer_range))
    return module


class SequenceHead(nn.Module):
    """First token -> dense + tanh (a pooler) -> dropout -> linear: (batch, seq, hidden) to (batch, outputs).

    Args:
        config: the encoder's config (sizes, dropout, initialisation).
        num_outputs: classes, or 1 for regression (then the output is (batch,)).
        pooler: a pretrained pooler to start from; None builds a fresh one.
    """

    def __init__(self, config: EncoderConfig, num_outputs: int, pooler: Pooler | None = None) -> None:
        super().__init__()
        self.pooler = pooler if pooler is not None else _fresh(Pooler(config), config)
        self.dropout = Dropout(config.dropout)
        self.out = _fresh(nn.Linear(config.hidden_size, num_outputs), config)
        self.squeeze = num_outputs == 1

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.out(self.dropout(self.pooler(hidden[:, 0])))  # (batch, outputs)
        return logits.squeeze(-1) if self.squeeze else logits


class TokenHead(nn.Module):
    """Dropout and a linear layer at every token: (batch, seq, hidden) to (batch, seq, labels)."""

    def __init__(self, config: EncoderConfig, num_labels: int) -> None:
        super().__init__()
        self.dropout = Dropout(config.dropout)
        self.out = _fresh(nn.Linear(config.hidden_size, num_labels), config)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(hidden))


class SpanHead(nn.Module):
    """Start and end scores at every token (BERT's SQuAD head): (batch, seq, hidden) to (batch, seq, 2)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.out = _fresh(nn.Linear(config.hidden_size, 2), config)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.out(hidden)


class FinetuneModel(nn.Module):
    """An encoder and a task head."""

    def __init__(self, encoder: Encoder, head: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The head's scores for a collated batch (``input_ids``, ``attention_mask``, ``token_type_ids``)."""
        hidden = self.encoder(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        return self.head(hidden)  # (batch, ...) as the head shapes it


def take_pooler(encoder: Encoder) -> Pooler | None:
    """Move the encoder's pooler (if any) out of it, for the sequence head to own; the encoder no longer pools."""
    pooler, encoder.pooler = encoder.pooler, None
    return pooler


# ---------------------------------------------------------------------------------------------------------------
# Evaluators: one per evaluation split, updated batch by batch, computed at the end of the epoch
# ---------------------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------------------
# Families: head, loss, evaluator and baseline per task kind
# ---------------------------------------------------------------------------------------------------------------


def _cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the targets that are not -100; a zero in the graph when there are none."""
    if not bool(targets.ne(IGNORE_INDEX).any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX)


class Family:
    """What one task kind adds to the shared encoder and fine-tuning loop."""

    def head(self, encoder: Encoder, data: TaskData) -> nn.Module:
        """A new head for ``encoder`` (which it may take the pooler from)."""
        raise NotImplementedError

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The training loss of one batch."""
        raise NotImplementedError

    def evaluator(self, data: TaskData, split: str) -> Evaluator:
        """A fresh evaluator of evaluation split ``split``."""
        raise NotImplementedError

    def baseline(self, data: TaskData) -> dict[str, float]:
        """Scores of the trivial baseline on every evaluation split, keyed ``split/metric``; empty if none."""
        return {}

    def baseline_note(self, data: TaskData) -> str | None:
        """One sentence saying what the baseline predicts."""
        return None


class ClassificationFamily(Family):
    """One label per example, from the first token."""

    def head(self, encoder: Encoder, data: TaskData) -> nn.Module:
        return SequenceHead(encoder.config, data.spec.num_labels, take_pooler(encoder))

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(logits.float(), batch["labels"])

    def evaluator(self, data: TaskData, split: str) -> Evaluator:
        return ClassificationEvaluator(data.spec)

    def baseline(self, data: TaskData) -> dict[str, float]:
        train = data.train_labels()
        return {
            f"{name}/{metric}": value
            for name, split in data.evals.items()
            for metric, value in majority_baseline(data.spec, train, [ex.label for ex in split.examples]).items()
        }

    def baseline_note(self, data: TaskData) -> str | None:
        return baseline_note(data.spec, data.train_labels())


class RegressionFamily(ClassificationFamily):
    """One score per example (STS-B), from the first token; the baseline predicts the training mean."""

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.mse_loss(logits.float(), batch["labels"].float())

    def evaluator(self, data: TaskData, split: str) -> Evaluator:
        return RegressionEvaluator(data.spec)


class TaggingFamily(Family):
    """One label per word, read at each word's first sub-token."""

    def head(self, encoder: Encoder, data: TaskData) -> nn.Module:
        return TokenHead(encoder.config, data.spec.num_labels)

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return _cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())

    def evaluator(self, data: TaskData, split: str) -> Evaluator:
        return TaggingEvaluator(data.spec)

    def baseline(self, data: TaskData) -> dict[str, float]:
        # Tagging every word "O" (the majority tag) finds no entity: precision, recall and F1 are all 0.
        return {f"{split}/{metric}": 0.0 for split in data.evals for metric in ("f1", "precision", "recall")}

    def baseline_note(self, data: TaskData) -> str | None:
        return "tags every word 'O' (the majority tag), so it finds no entity"


def squad_version(data: TaskData) -> str:
    """'2.0' when any question of the task is unanswerable, else '1.1' (the rule :func:`read_squad` applies)."""
    splits = [data.train, *data.evals.values()]
    return "2.0" if any(example.is_impossible for split in splits for example in split.examples) else "1.1"


class SpanFamily(Family):
    """An answer span in a context: start and end scores at every token of every window."""

    def head(self, encoder: Encoder, data: TaskData) -> nn.Module:
        return SpanHead(encoder.config)

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        start, end = logits.float().unbind(-1)  # (batch, seq) each
        return (F.cross_entropy(start, batch["start_positions"]) + F.cross_entropy(end, batch["end_positions"])) / 2

    def evaluator(self, data: TaskData, split: str) -> Evaluator:
        return SpanEvaluator(data.spec, data.evals[split], squad_version(data))

    def baseline(self, data: TaskData) -> dict[str, float]:
        # Answering nothing: 0 on v1.1; on v2.0 it scores the share of unanswerable questions.
        version, out = squad_version(data), {}
        for split, encoded in data.evals.items():
            refs = references(encoded.examples)
            scores = squad_scores({qid: "" for qid in refs}, refs, version)
            out.update({f"{split}/exact_match": float(scores["exact"]), f"{split}/f1": float(scores["f1"])})
        return out

    def baseline_note(self, data: TaskData) -> str | None:
        return "answers nothing (the empty string) for every question"


FAMILIES: dict[str, Family] = {
    "classification": ClassificationFamily(),
    "regression": RegressionFamily(),
    "tagging": TaggingFamily(),
    "span": SpanFamily(),
}
"""Task kind -> its family."""


def build_model(encoder: Encoder, data: TaskData) -> FinetuneModel:
    """The encoder with a fresh head for ``data``'s task."""
    return FinetuneModel(encoder, FAMILIES[data.spec.kind].head(encoder, data))


# ---------------------------------------------------------------------------------------------------------------
# The LightningModule
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OptimSettings:
    """AdamW and its schedule (BERT's fine-tuning recipe)."""

    learning_rate: float
    """Peak learning rate."""
    weight_decay: float = 0.01
    """Decay of weight matrices (not biases or LayerNorm)."""
    warmup_fraction: float = 0.1
    """Share of the optimiser steps spent warming up linearly; then linear decay to 0."""
    adam_betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    adam_eps: float = 1e-6
    """AdamW epsilon."""


@dataclass
class EpochScores:
    """One evaluation: the epoch (1-based), the optimiser step, ``split/metric`` scores and collapse per split."""

    epoch: int
    step: int
    scores: dict[str, float]
    collapsed: dict[str, bool] = field(default_factory=dict)


class FinetuneModule(L.LightningModule):
    """Fine-tunes a :class:`FinetuneModel`; evaluates every split after each epoch.

    Args:
        model: encoder and head.
        family: the task kind's loss.
        evaluators: split name -> its evaluator, in the order of the validation loaders.
        optim: optimiser settings.
    """

    def __init__(self, model: FinetuneModel, family: Family, evaluators: dict[str, Evaluator],
                 optim: OptimSettings) -> None:
        super().__init__()
        self.model = model
        self.family = family
        self.evaluators = evaluators
        self.optim = optim
        self.history: list[EpochScores] = []
        self.epochs_started = 0

    def on_train_epoch_start(self) -> None:
        # Counted here: Lightning's own counter differs between the end-of-epoch evaluation inside fit() and the
        # extra one after a run that max_steps ended inside an epoch.
        self.epochs_started += 1

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.family.loss(self.model(batch), batch)
        if not torch.isfinite(loss):
            raise NonFiniteLoss(f"the fine-tuning loss is not finite at step {self.global_step}", where="training",
                                hint="lower learning_rate or raise warmup_fraction")
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["input_ids"]))
        self.log("lr", self.lr_schedulers().get_last_lr()[0], batch_size=len(batch["input_ids"]))
        return loss

    def on_validation_epoch_start(self) -> None:
        for evaluator in self.evaluators.values():
            evaluator.reset()

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        split = list(self.evaluators)[dataloader_idx]
        self.evaluators[split].update(self.model(batch), batch)

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        scores: dict[str, float] = {}
        for split, evaluator in self.evaluators.items():
            scores.update({f"{split}/{name}": value for name, value in evaluator.compute().items()})
        collapsed = {split: evaluator.collapsed() for split, evaluator in self.evaluators.items()}
        self.history.append(EpochScores(self.epochs_started, self.global_step, scores, collapsed))
        self.log_dict(scores)

    def configure_optimizers(self) -> dict[str, Any]:
        params = list(self.model.named_parameters())
        groups = [
            {"params": [p for n, p in params if not no_decay(n, p)], "weight_decay": self.optim.weight_decay},
            {"params": [p for n, p in params if no_decay(n, p)], "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(groups, lr=self.optim.learning_rate, betas=self.optim.adam_betas,
                                      eps=self.optim.adam_eps)
        total = int(self.trainer.estimated_stepping_batches)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, linear_schedule(round(self.optim.warmup_fraction * total), total))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def make_module(encoder: Encoder, data: TaskData, optim: OptimSettings) -> FinetuneModule:
    """The fine-tuning module of ``data``'s task around ``encoder``: a fresh head and one evaluator per split."""
    family = FAMILIES[data.spec.kind]
    evaluators = {split: family.evaluator(data, split) for split in data.evals}
    return FinetuneModule(build_model(encoder, data), family, evaluators, optim)

