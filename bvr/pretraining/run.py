"""``bvr pretrain``, read top to bottom: settings, data, model, the loop, export, record.

:func:`pretrain` is the whole recipe; the functions below it come in the order it calls them, and the loop's step
(:meth:`PretrainingModule.training_step`) is here too. A run lives in ``output_dir/runs/pretrain-NAME-HASH/`` (HASH
over everything that changes the result):

- ``checkpoints/last.ckpt``: the resumable state (weights, optimiser, schedule, loop, data position, RNG), replaced
  whole or not at all (:class:`~bvr.checkpoints.AtomicCheckpointIO`);
- ``model/``: the final weights as a Hugging Face folder plus ``bvr.yaml`` (the resolved config), which
  ``bvr fill-mask`` and fine-tuning read (:mod:`bvr.pretraining.export`);
- ``config.yaml``, ``metrics.json``, ``mlflow_run_id`` and ``DONE`` when finished (a finished run is reused, not
  trained again); beside the folder, a hidden ``.pretrain-NAME-HASH.lock`` held by the process training it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch

from bvr.cache import CACHE_VERSION, DONE, cache_dir, global_rank, is_done, target_lock
from bvr.checkpoints import check_fits, resume_point
from bvr.config import Config, TrainingConfig, dump_config
from bvr.fs import write_text
from bvr.model import PretrainingModel, count_parameters
from bvr.model.encoder import compile_layers
from bvr.pretraining.data import REFERENCE_SCHEME, REFERENCE_SPLIT, PretrainingDataModule, check_batch_fits
from bvr.pretraining.export import build_model, export_again, export_model, model_problem, pretraining_bytes
from bvr.pretraining.exposure import exposure, ids_per_word, unigram_entropy, vocabulary_exposure
from bvr.pretraining.prepare import Prepared, load_instances, prepare
from bvr.pretraining.record import finish_record, last_training_metrics, open_record
from bvr.threads import ThreadBudget, use_threads
from bvr.tokenization import load_tokenizer, vocab_info
from bvr.tracking import RunContext, check_store, close_stale_runs, closed_on_error, system_metrics, tracking_uri
from bvr.training import TrainerSettings, build_trainer, check_accelerator, quiet_fit
from bvr.training.optim import adamw, check_finite, clip_unscaled
from bvr.write_checks import check_free_space

DEFAULT_EXPERIMENT = "bvr-pretrain"


@dataclass(frozen=True)
class PretrainResult:
    """Where a pretraining run's outputs are, and what it measured."""

    run_dir: Path
    reused: bool
    metrics: dict[str, float]

    @property
    def model_dir(self) -> Path:
        return self.run_dir / "model"


def pretrain(cfg: Config, *, context: RunContext | None = None, resume: bool = False, restart: bool = False,
             progress: bool = True, callbacks: list[L.Callback] | None = None) -> PretrainResult:
    """Pretrain the configured encoder, or return the finished run with the same configuration.

    One process trains a run folder at a time: a second call with the same configuration waits for the first
    (saying which process it is), then returns its result.

    Args:
        cfg: the resolved configuration.
        context: the ablation, label, parent run and tags of the MLflow run (default: a lone run named by the
            config, in the experiment ``bvr-pretrain``).
        resume: continue an unfinished run of the same configuration from its last checkpoint.
        restart: discard an unfinished run and start again.
        progress: show a progress bar.
        callbacks: extra Lightning callbacks (monitoring, or fault injection in tests).

    Raises:
        BvrError: an unfinished run exists and neither ``resume`` nor ``restart`` was given; its checkpoint cannot be
            read on ``resume``; a non-finite loss; the tracking server does not answer; too little disk is free
            for the checkpoint and the exported model (:func:`~bvr.pretraining.export.pretraining_bytes`); an
            optimiser step larger than the training data (:func:`~bvr.pretraining.data.check_batch_fits`); or a
            write fails for want of space or permission (:class:`~bvr.write_checks.WriteError`); a GPU accelerator
            on a machine without one (before any data is read).
    """
    # Settings: the machine and the record's store, checked before any work.
    check_accelerator(cfg.training.accelerator)
    check_store(Path.cwd())
    context = (context or RunContext()).with_defaults(DEFAULT_EXPERIMENT, cfg.name)
    if context.ablation is None and global_rank() == 0:  # a lone run closes what a killed one left (an ablation does)
        close_stale_runs(context.experiment, Path.cwd())
    # Data: the cached corpus, tokenizer and sequences, which name the run's folder.
    prepared = prepare(cfg, progress=progress)
    check_batch_fits(cfg, load_instances(prepared)["train"])
    run_dir = run_dir_for(cfg, prepared)
    with target_lock(run_dir):  # a second process with the same config waits here, then reuses the result
        if not is_done(run_dir):
            ckpt_path = resume_point(run_dir / "checkpoints" / "last.ckpt", resume, restart)
            # Model, the loop, export and record.
            built = _build(cfg, prepared, run_dir, ckpt_path, context)
            logger = open_record(cfg, run_dir, ckpt_path, context, built.params, prepared, built.threads)
            with closed_on_error(logger.experiment, logger.run_id):  # FINISHED only once exported and marked done
                metrics = _fit(cfg, built, run_dir, ckpt_path, logger, progress, callbacks or [])
                if metrics is None:  # another DDP rank: rank zero exports and records
                    return PretrainResult(run_dir, False, {})
                _export(cfg, run_dir, built.model, prepared, metrics)
                finish_record(cfg, run_dir, logger, metrics)
                write_text(run_dir / DONE, "")
                return PretrainResult(run_dir, False, metrics)
        # Finished before: reused, its model written again from the last checkpoint if the folder was damaged since.
        if global_rank() == 0 and (problem := model_problem(run_dir / "model")):
            export_again(cfg, prepared.tokenizer, run_dir, problem)
        return PretrainResult(run_dir, True, json.loads((run_dir / "metrics.json").read_text()))


EXECUTION_KEYS = ("num_workers", "threads", "log_every_steps", "val_every_steps", "checkpoint_every_steps")
"""``training`` keys that say how a run is carried out and logged, not what it computes: not in its folder's key."""


def run_dir_for(cfg: Config, prepared: Prepared) -> Path:
    """The run folder, named by everything that changes the result (not by :data:`EXECUTION_KEYS`)."""
    parts = {
        "version": CACHE_VERSION,
        "instances": prepared.instances.name,
        "tokenizer": prepared.tokenizer.name,
        "model": dataclasses.asdict(cfg.model),
        "masking": dataclasses.asdict(cfg.masking),
        "training": {k: v for k, v in dataclasses.asdict(cfg.training).items() if k not in EXECUTION_KEYS},
        "reference_validation": validation_differs(cfg),  # validated on the reference masks, not on its own
    }
    return cache_dir(Path(cfg.output_dir) / "runs", f"pretrain-{cfg.name}", parts)


def validation_differs(cfg: Config) -> bool:
    """Whether the arm trains on other masks than it is validated on (another scheme or split): its validation loss
    then measures the common reference task (:func:`~bvr.pretraining.data.fixed_validation_collator`), not its own
    training task."""
    return cfg.masking.scheme != REFERENCE_SCHEME or tuple(cfg.masking.split) != REFERENCE_SPLIT


@dataclass(frozen=True)
class _Built:
    """What a run trains: the model in its LightningModule, the data, and what the record states about them."""

    model: PretrainingModel
    module: PretrainingModule
    datamodule: PretrainingDataModule
    params: dict[str, int]
    threads: ThreadBudget
    ids_per_word: float | None = None


def _build(cfg: Config, prepared: Prepared, run_dir: Path, ckpt_path: str | None, context: RunContext) -> _Built:
    """The run folder's config, the model (checked against the checkpoint it resumes and the disk it needs), its
    LightningModule and data, on the threads the run may use."""
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, run_dir / "config.yaml")
    tokenizer, family = load_tokenizer(prepared.tokenizer)
    vocab = vocab_info(tokenizer, family)
    model = build_model(cfg, vocab)
    params = count_parameters(model)
    check_free_space(run_dir, pretraining_bytes(params["total"], cfg.training.checkpoint_every_steps is not None),
                     f"pretraining {params['total']:,} parameters (checkpoint and exported model)")
    threads = use_threads(cfg.training.threads)
    if context.ablation is None and global_rank() == 0:  # a lone run's opening line (an ablation's states it once)
        print(f"pretraining {run_dir.name}: {params['total']:,} parameters, {cfg.training.max_steps:,} steps; "
              f"{threads.line()}", flush=True)
    module = PretrainingModule(model, cfg.training, failed_checkpoint_hint=str(run_dir / "checkpoints" / "last.ckpt"),
                               sentence_objective=cfg.data.sentence_objective)
    if ckpt_path is not None:
        check_fits(Path(ckpt_path), module.state_dict())
    datamodule = PretrainingDataModule(cfg, load_instances(prepared), vocab)
    if cfg.training.compile:
        compile_layers(model.encoder)
    words = ids_per_word(prepared.corpus, prepared.tokenized)  # tokens seen in words (None: no count of words)
    return _Built(model, module, datamodule, params, threads, words)


def _fit(cfg: Config, built: _Built, run_dir: Path, ckpt_path: str | None, logger: Any, progress: bool,
         callbacks: list[L.Callback]) -> dict[str, float] | None:
    """Fit to ``training.max_steps`` (validated at the end too), the machine's load logged beside; the run's
    metrics (losses, time, tokens, parameters, mask exposure, the validation tokens' unigram entropy), or None on
    a rank other than zero."""
    t, module, datamodule = cfg.training, built.module, built.datamodule
    trainer = build_trainer(run_dir, TrainerSettings.of(t), logger, progress=progress, sampler_per_rank=True,
                            step_progress_bar=True, callbacks=callbacks)
    start = time.perf_counter()
    monitored = logger.run_id if global_rank() == 0 else None  # the machine's load beside the throughput
    with quiet_fit(), system_metrics(monitored, tracking_uri(), resume=ckpt_path is not None):
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
        metrics = _logged_metrics(trainer)
        # Resumed from the last step's checkpoint (stopped while exporting or recording), the fit took no step.
        fitted_nothing = not any(key.startswith("train/") for key in metrics)
        if fitted_nothing or t.val_every_steps and trainer.global_step % t.val_every_steps:
            # "every val_every_steps and at the end": the last steps were not validated yet.
            trainer.validate(module, datamodule=datamodule, verbose=False)
            metrics.update(_logged_metrics(trainer))
    if trainer.global_rank != 0:
        return None
    if fitted_nothing:  # the training losses of the last logged step, as the interrupted run logged them
        metrics = {**last_training_metrics(logger.run_id), **metrics}
    metrics.update(wall_seconds=time.perf_counter() - start, tokens_seen=float(module.tokens_seen),
                   steps=float(trainer.global_step), **{f"params_{k}": float(v) for k, v in built.params.items()})
    metrics.update(exposure(cfg, trainer.global_step, datamodule.instances["train"], module.tokens_seen))
    metrics.update(vocabulary_exposure(datamodule.instances["train"], datamodule.vocab, module.tokens_seen,
                                       built.ids_per_word))
    metrics["val_unigram_entropy"] = unigram_entropy(datamodule.instances["validation"], datamodule.vocab)
    return metrics


def _logged_metrics(trainer: L.Trainer) -> dict[str, float]:
    return {k: float(v) for k, v in trainer.callback_metrics.items() if torch.is_tensor(v) and v.numel() == 1}


_VAL_SUMS = ("mlm_loss", "masked", "sentence_correct", "sentence_count", "sbo_loss")
"""Sums over the validation batches, reduced across ranks once at the end."""


class PretrainingModule(L.LightningModule):
    """The loop's step: masked-language modelling (and next-sentence or sentence-order prediction) on a
    :class:`PretrainingModel`, with its optimiser, schedule, metrics and the state an exact resume needs.

    The Trainer calls :meth:`training_step` once per micro-batch and, every ``training.grad_accum`` of them, clips
    (:meth:`configure_gradient_clipping`) and steps AdamW and its schedule (:meth:`configure_optimizers`,
    :func:`bvr.training.adamw`). A non-finite loss stops the run before the bad step updates anything.

    Metrics: ``train/mlm_loss``, ``train/mlm_acc``, ``train/nsp_loss`` and ``train/nsp_acc`` (``sop`` under
    sentence-order prediction), ``train/sbo_loss`` and ``train/sbo_acc`` (``model.sbo``), and every
    ``log_every_steps`` steps ``lr``, ``train/tokens_seen`` and ``train/tokens_per_s``; on held-out documents
    ``val/mlm_loss`` (token-weighted over one fixed mask), ``val/perplexity``, ``val/nsp_acc`` and ``val/sbo_loss``.
    ``failed_checkpoint_hint`` names the last good checkpoint in the non-finite-loss message; ``sentence_objective``
    (``data.sentence_objective``) names the sentence head's metrics.
    """

    def __init__(self, model: PretrainingModel, training: TrainingConfig, failed_checkpoint_hint: str = "",
                 sentence_objective: str = "nsp") -> None:
        super().__init__()
        self.model = model
        self.sentence_objective = sentence_objective
        self.training_cfg = training
        self.failed_checkpoint_hint = failed_checkpoint_hint
        self.tokens_seen = 0
        self.pending_rng: dict[str, Any] | None = None
        self.stepped = 0  # the optimiser steps taken when the last batch ended: a batch that adds none accumulates
        self.step_started = time.perf_counter()
        self.tokens_at_log = 0
        self.val_sums: dict[str, float] = {}

    def loss(self, batch: dict[str, torch.Tensor]):
        return self.model.pretraining_loss(
            batch["input_ids"], batch["labels"], batch["attention_mask"], batch["token_type_ids"],
            batch["sentence_labels"] if self.model.sentence_head else None,
        )

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        out = self.loss(batch)
        check_finite(out.loss, self.global_step, what="training loss", values=lambda: self.loss_values(out),
                     hint=f"the last good checkpoint is {self.failed_checkpoint_hint or 'the last one written'}; "
                     "lower training.learning_rate or raise training.warmup_steps, then run again with --resume")
        tokens = batch["attention_mask"].sum()
        if self.trainer.world_size > 1:  # every rank's micro-batch
            tokens = self.trainer.strategy.reduce(tokens.float(), reduce_op="sum")
        self.tokens_seen += int(tokens)
        self.log("train/mlm_loss", out.mlm_loss, prog_bar=True)
        self.log("train/mlm_acc", out.mlm_accuracy)
        if out.sentence_loss is not None:
            self.log(f"train/{self.sentence_objective}_loss", out.sentence_loss)
            self.log(f"train/{self.sentence_objective}_acc", out.sentence_accuracy)
        if out.sbo_loss is not None:
            self.log("train/sbo_loss", out.sbo_loss)
            self.log("train/sbo_acc", out.sbo_accuracy)
        return out.loss  # the Trainer divides it by grad_accum, runs backward and, at a step, AdamW

    def loss_values(self, out) -> str:
        parts = {"mlm": out.mlm_loss, self.sentence_objective: out.sentence_loss, "sbo": out.sbo_loss}
        return ", ".join(f"{name}_loss={loss.item():.4g}" for name, loss in parts.items() if loss is not None)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.global_step == self.stepped:  # a micro-batch: the optimiser did not step
            return
        self.stepped = step = self.global_step
        if step % self.training_cfg.log_every_steps == 0 or step == 1:
            now = time.perf_counter()
            elapsed = now - self.step_started
            rate = (self.tokens_seen - self.tokens_at_log) / elapsed if elapsed > 0 else 0.0
            self.step_started, self.tokens_at_log = now, self.tokens_seen
            self.log_dict({"train/tokens_seen": float(self.tokens_seen), "train/tokens_per_s": rate,
                           "lr": self.lr_schedulers().get_last_lr()[0]}, rank_zero_only=True)
        budget = self.training_cfg.max_tokens
        if budget is not None and self.tokens_seen >= budget:
            self.trainer.should_stop = True

    def on_validation_epoch_start(self) -> None:
        self.val_sums = dict.fromkeys(_VAL_SUMS, 0.0)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        out = self.loss(batch)
        sums = self.val_sums
        sums["mlm_loss"] += float(out.mlm_loss) * out.n_masked
        sums["masked"] += out.n_masked
        if out.sentence_accuracy is not None:
            sums["sentence_correct"] += float(out.sentence_accuracy) * out.n_sentence
            sums["sentence_count"] += out.n_sentence
        if out.sbo_loss is not None:
            sums["sbo_loss"] += float(out.sbo_loss) * out.n_masked

    def on_validation_epoch_end(self) -> None:
        totals = torch.tensor([self.val_sums[k] for k in _VAL_SUMS], dtype=torch.float64, device=self.device)
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

    def configure_optimizers(self):
        cfg = self.training_cfg
        return adamw(self.model.named_parameters(), learning_rate=cfg.learning_rate, weight_decay=cfg.weight_decay,
                     betas=cfg.adam_betas, eps=cfg.adam_eps, warmup_steps=cfg.warmup_steps, max_steps=cfg.max_steps,
                     fused=self.trainer.precision != "16-mixed")

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        if not clip_unscaled(self, gradient_clip_val, gradient_clip_algorithm):  # bf16-mixed with fused AdamW
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:  # exact resume: the tokens and the RNG
        checkpoint["bvr"] = {
            "tokens_seen": self.tokens_seen,
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("bvr", {})
        self.tokens_seen = int(state.get("tokens_seen", 0))
        self.tokens_at_log = self.tokens_seen
        self.pending_rng = state or None

    def on_train_start(self) -> None:
        # Restored here rather than at load time so that nothing between loading and the first step (building
        # loaders, the sanity check) can draw from the generator the dropout masks come from.
        if self.pending_rng:
            torch.set_rng_state(self.pending_rng["torch_rng"])
            if self.pending_rng.get("cuda_rng") is not None and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(self.pending_rng["cuda_rng"])
            self.pending_rng = None
        self.step_started = time.perf_counter()
        self.stepped = self.global_step  # a resumed run's steps so far


def _export(cfg: Config, run_dir: Path, model: PretrainingModel, prepared: Prepared, metrics: dict[str, float]) -> None:
    """The final weights with the tokenizer into ``model/``, and the metrics beside it."""
    export_model(model, prepared.tokenizer, cfg, run_dir / "model")
    write_text(run_dir / "metrics.json", json.dumps(metrics, indent=2))
