"""The pretraining LightningModule: losses, optimiser and schedule, metrics, and the state a resume needs.

The encoder and heads are a plain ``nn.Module`` (:class:`bvr.model.PretrainingModel`); this module adds what
training needs around it:

- AdamW with no weight decay on biases and LayerNorm weights; linear warm-up then linear decay to zero at
  ``max_steps`` (:func:`bvr.training.adamw`); gradient clipping and accumulation are the Trainer's.
- Metrics: ``train/mlm_loss``, ``train/nsp_loss``, ``train/nsp_acc``, ``train/mlm_acc``, ``lr``,
  ``train/tokens_seen`` and ``train/tokens_per_s``; on held-out documents ``val/mlm_loss`` (token-weighted over one
  fixed mask), ``val/perplexity`` and ``val/nsp_acc``. With sentence-order prediction the sentence metrics are
  named ``train/sop_loss``, ``train/sop_acc`` and ``val/sop_acc``. With the span-boundary objective (``model.sbo``)
  also ``train/sbo_loss``, ``train/sbo_acc`` and ``val/sbo_loss`` (token-weighted like ``val/mlm_loss``).
- A non-finite loss stops the run before the bad step updates anything (:class:`bvr.training.NonFiniteLoss`).
- Checkpoints carry the RNG state (dropout) and the tokens seen, so a resumed run continues exactly.
"""

from __future__ import annotations

import math
import time
from typing import Any

import lightning as L
import torch

from bvr.config import TrainingConfig
from bvr.model import PretrainingModel
from bvr.training import adamw, check_finite, clip_unscaled

_VAL_SUMS = ("mlm_loss", "masked", "sentence_correct", "sentence_count", "sbo_loss")
"""Sums over the validation batches, reduced across ranks once at the end."""


class PretrainingModule(L.LightningModule):
    """Trains a :class:`PretrainingModel` with masked-language modelling (and next-sentence or sentence-order
    prediction).

    Args:
        model: the encoder and heads.
        training: optimiser, schedule and budget settings.
        failed_checkpoint_hint: where the last good checkpoint lives, for the non-finite-loss message.
        sentence_objective: ``data.sentence_objective`` (``nsp`` or ``sop``), the name of the sentence head's
            metrics when the model has one.
    """

    def __init__(self, model: PretrainingModel, training: TrainingConfig, failed_checkpoint_hint: str = "",
                 sentence_objective: str = "nsp") -> None:
        super().__init__()
        self.model = model
        self.sentence_objective = sentence_objective
        self.training_cfg = training
        self.failed_checkpoint_hint = failed_checkpoint_hint
        self.tokens_seen = 0
        self._pending_rng: dict[str, Any] | None = None
        self.stepped = 0  # the optimiser steps taken when the last batch ended: a batch that adds none accumulates
        self._step_started = time.perf_counter()
        self._tokens_at_log = 0
        self._val_sums: dict[str, float] = {}

    # ---- training ------------------------------------------------------------------------------------------

    def _loss(self, batch: dict[str, torch.Tensor]):
        return self.model.pretraining_loss(
            batch["input_ids"], batch["labels"], batch["attention_mask"], batch["token_type_ids"],
            batch["sentence_labels"] if self.model.sentence_head else None,
        )

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        out = self._loss(batch)
        check_finite(out.loss, self.global_step, what="training loss", values=lambda: self._loss_values(out),
                     hint=f"the last good checkpoint is {self.failed_checkpoint_hint or 'the last one written'}; "
                     "lower training.learning_rate or raise training.warmup_steps, then run again with --resume")
        self.tokens_seen += self._global_tokens(batch)
        self.log("train/mlm_loss", out.mlm_loss, prog_bar=True)
        self.log("train/mlm_acc", out.mlm_accuracy)
        if out.sentence_loss is not None:
            self.log(f"train/{self.sentence_objective}_loss", out.sentence_loss)
            self.log(f"train/{self.sentence_objective}_acc", out.sentence_accuracy)
        if out.sbo_loss is not None:
            self.log("train/sbo_loss", out.sbo_loss)
            self.log("train/sbo_acc", out.sbo_accuracy)
        return out.loss

    def _global_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        tokens = batch["attention_mask"].sum()
        if self.trainer is not None and self.trainer.world_size > 1:
            tokens = self.trainer.strategy.reduce(tokens.float(), reduce_op="sum")
        return int(tokens)

    def _loss_values(self, out) -> str:
        objective, loss = self.sentence_objective, out.sentence_loss
        sentence = "" if loss is None else f", {objective}_loss={loss.item():.4g}"
        sbo = f", sbo_loss={out.sbo_loss.item():.4g}" if out.sbo_loss is not None else ""
        return f"mlm_loss={out.mlm_loss.item():.4g}{sentence}{sbo}"

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.global_step == self.stepped:  # a micro-batch: the optimiser did not step
            return
        self.stepped = step = self.global_step
        if step % self.training_cfg.log_every_steps == 0 or step == 1:
            now = time.perf_counter()
            elapsed = now - self._step_started
            rate = (self.tokens_seen - self._tokens_at_log) / elapsed if elapsed > 0 else 0.0
            self._step_started, self._tokens_at_log = now, self.tokens_seen
            self.log_dict({"train/tokens_seen": float(self.tokens_seen), "train/tokens_per_s": rate,
                           "lr": self.lr_schedulers().get_last_lr()[0]}, rank_zero_only=True)
        budget = self.training_cfg.max_tokens
        if budget is not None and self.tokens_seen >= budget:
            self.trainer.should_stop = True

    # ---- validation ----------------------------------------------------------------------------------------

    def on_validation_epoch_start(self) -> None:
        self._val_sums = dict.fromkeys(_VAL_SUMS, 0.0)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        out = self._loss(batch)
        sums = self._val_sums
        sums["mlm_loss"] += float(out.mlm_loss) * out.n_masked
        sums["masked"] += out.n_masked
        if out.sentence_accuracy is not None:
            sums["sentence_correct"] += float(out.sentence_accuracy) * out.n_sentence
            sums["sentence_count"] += out.n_sentence
        if out.sbo_loss is not None:
            sums["sbo_loss"] += float(out.sbo_loss) * out.n_masked

    def on_validation_epoch_end(self) -> None:
        totals = torch.tensor([self._val_sums[k] for k in _VAL_SUMS], dtype=torch.float64, device=self.device)
        if self.trainer.world_size > 1:  # every validation sequence is on exactly one rank
            totals = self.trainer.strategy.reduce(totals, reduce_op="sum")
        loss_sum, masked, sentence_correct, sentence_count, sbo_sum = totals.tolist()
        if masked == 0:
            return
        mlm_loss = loss_sum / masked
        metrics = {"val/mlm_loss": mlm_loss, "val/perplexity": math.exp(min(mlm_loss, 50.0))}
        if sentence_count:
            metrics[f"val/{self.sentence_objective}_acc"] = sentence_correct / sentence_count
        if self.model.sbo_enabled:
            metrics["val/sbo_loss"] = sbo_sum / masked
        # Every rank holds the same reduced totals, so syncing (a mean of equal values) changes nothing.
        self.log_dict(metrics, prog_bar=True, sync_dist=True)

    # ---- optimiser -----------------------------------------------------------------------------------------

    def configure_optimizers(self):
        cfg = self.training_cfg
        return adamw(self.model.named_parameters(), learning_rate=cfg.learning_rate, weight_decay=cfg.weight_decay,
                     betas=cfg.adam_betas, eps=cfg.adam_eps, warmup_steps=cfg.warmup_steps, max_steps=cfg.max_steps,
                     fused=self.trainer.precision != "16-mixed")

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        if not clip_unscaled(self, gradient_clip_val, gradient_clip_algorithm):  # bf16-mixed with fused AdamW
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    # ---- exact resume --------------------------------------------------------------------------------------

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["bvr"] = {
            "tokens_seen": self.tokens_seen,
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("bvr", {})
        self.tokens_seen = int(state.get("tokens_seen", 0))
        self._tokens_at_log = self.tokens_seen
        self._pending_rng = state or None

    def on_train_start(self) -> None:
        # Restored here rather than at load time so that nothing between loading and the first step (building
        # loaders, the sanity check) can draw from the generator the dropout masks come from.
        if self._pending_rng:
            torch.set_rng_state(self._pending_rng["torch_rng"])
            if self._pending_rng.get("cuda_rng") is not None and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(self._pending_rng["cuda_rng"])
            self._pending_rng = None
        self._step_started = time.perf_counter()
        self.stepped = self.global_step  # a resumed run's steps so far
