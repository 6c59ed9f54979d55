"""One fine-tuning LightningModule for every task kind, which differ only in their :class:`~bvr.tasks.kinds.Kind`:
:class:`FinetuneModule` trains a :class:`~bvr.tasks.heads.FinetuneModel` (encoder + head, a plain ``nn.Module``)
with AdamW (no decay on biases and LayerNorm), linear warm-up and decay and the kind's loss, and evaluates every
evaluation split after each epoch (:mod:`bvr.tasks.evaluators`), kept in :attr:`FinetuneModule.history` and logged
as ``split/metric`` (``dev/accuracy``) with whether each split collapsed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch

from bvr.model.encoder import Encoder
from bvr.tasks.evaluators import Evaluator
from bvr.tasks.heads import FinetuneModel
from bvr.tasks.kinds import KINDS, Kind
from bvr.tasks.source import seeded
from bvr.tasks.splits import TaskData
from bvr.training import adamw, check_finite, clip_unscaled


def build_model(encoder: Encoder, data: TaskData, seed: int) -> FinetuneModel:
    """The encoder with a fresh head for ``data``'s task, drawn in a generator of its own seeded by ``seed``
    (:func:`~bvr.tasks.source.seeded`): its initial weights are the same for every encoder of the same shape (every
    arm and the control), a sequence head's output layer whether its pooler is the checkpoint's or fresh, and the
    global generator is left alone."""
    with seeded("head", seed):
        head = KINDS[data.spec.kind].head(encoder, data)
    return FinetuneModel(encoder, head)


@dataclass(frozen=True)
class OptimSettings:
    """AdamW and its schedule (BERT's fine-tuning recipe)."""

    learning_rate: float  # peak
    weight_decay: float = 0.01  # of weight matrices (not biases or LayerNorm)
    warmup_fraction: float = 0.1  # share of the optimiser steps spent warming up linearly; then linear decay to 0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-6


@dataclass
class EpochScores:
    """One evaluation: the epoch (1-based), the optimiser step, ``split/metric`` scores and collapse per split."""

    epoch: int
    step: int
    scores: dict[str, float]
    collapsed: dict[str, bool] = field(default_factory=dict)


class FinetuneModule(L.LightningModule):
    """Fine-tunes a :class:`FinetuneModel` with its kind's loss; evaluates every split after each epoch, the
    ``evaluators`` in the order of the validation loaders."""

    def __init__(self, model: FinetuneModel, kind: Kind, evaluators: dict[str, Evaluator],
                 optim: OptimSettings) -> None:
        super().__init__()
        self.model, self.kind, self.evaluators, self.optim = model, kind, evaluators, optim
        self.history: list[EpochScores] = []
        self.epochs_started = 0

    def on_train_epoch_start(self) -> None:
        # Counted here: Lightning's own counter differs between the end-of-epoch evaluation inside fit() and the
        # extra one after a run that max_steps ended inside an epoch.
        self.epochs_started += 1

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.kind.loss(self.model(batch), batch)
        check_finite(loss, self.global_step, what="fine-tuning loss",
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
        # Logged as the Python floats they are, which result.json keeps too: self.log would make them float32
        # tensors, and a store read back would then differ (50.71813201904297 for 50.718132854578094).
        for logger in self.loggers:
            logger.log_metrics(scores, step=self.global_step)

    def configure_optimizers(self) -> dict[str, Any]:
        total = int(self.trainer.estimated_stepping_batches)
        return adamw(self.model.named_parameters(), learning_rate=self.optim.learning_rate,
                     weight_decay=self.optim.weight_decay, betas=self.optim.adam_betas, eps=self.optim.adam_eps,
                     warmup_steps=round(self.optim.warmup_fraction * total), max_steps=total,
                     fused=self.trainer.precision != "16-mixed")

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        if not clip_unscaled(self, gradient_clip_val, gradient_clip_algorithm):  # bf16-mixed with fused AdamW
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)


def make_module(encoder: Encoder, data: TaskData, optim: OptimSettings, seed: int) -> FinetuneModule:
    """The fine-tuning module of ``data``'s task around ``encoder``: a fresh head for fine-tuning seed ``seed``
    (:func:`build_model`) and one evaluator per split."""
    kind = KINDS[data.spec.kind]
    return FinetuneModule(build_model(encoder, data, seed), kind, kind.evaluators(data), optim)
