"""``bvr pretrain``: prepare (or reuse) the data, train with a Lightning Trainer, log to MLflow, save the model.

A run lives in ``output_dir/runs/pretrain-NAME-HASH/`` (HASH over everything that changes the result):

- ``checkpoints/last.ckpt``: the resumable state (weights, optimiser, schedule, loop, data position, RNG), replaced
  whole or not at all (:class:`~bvr.checkpoints.AtomicCheckpointIO`);
- ``model/``: the final weights as a Hugging Face folder (config.json, model.safetensors, tokenizer files) plus
  ``bvr.yaml`` (the resolved config), which ``bvr fill-mask`` and fine-tuning read. The sentence head of ``nsp``
  and of ``sop`` is the same 2-way classifier on the pooled first token and is exported alike, as BERT's
  ``cls.seq_relationship`` (``BertForPreTraining``): kept rather than dropped so that fine-tuning starts from
  the trained pooler under either objective. For ``sop`` its logits mean (in order, swapped), not (IsNext,
  NotNext); ``bvr.yaml`` says which;
- ``config.yaml``, ``mlflow_run_id`` and ``DONE`` when finished (a finished run is reused, not trained again);
- beside the folder, a hidden ``.pretrain-NAME-HASH.lock`` held by the process training it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch

from bvr.cache import CACHE_VERSION, DONE, build_once, cache_dir, global_rank, is_done, target_lock
from bvr.checkpoints import check_checkpoint, check_fits
from bvr.config import Config, dump_config
from bvr.errors import BvrError
from bvr.fs import write_text
from bvr.model import PretrainingModel, count_parameters
from bvr.model.encoder import compile_layers
from bvr.pretraining.data import PretrainingDataModule, check_batch_fits, validation_differs
from bvr.pretraining.export import build_model, export_again, export_model, model_problem
from bvr.pretraining.exposure import exposure, ids_per_word, unigram_entropy, vocabulary_exposure
from bvr.pretraining.module import PretrainingModule
from bvr.pretraining.prepare import Prepared, load_instances, prepare, prepare_corpus, prepare_tokenizer
from bvr.threads import ThreadBudget, use_threads
from bvr.tokenization import VocabInfo, load_tokenizer, vocab_info
from bvr.tracking import (
    DataInput,
    RunContext,
    check_store,
    close_stale_runs,
    closed_on_error,
    git_commit,
    link_model,
    log_artifact_dir,
    log_config,
    log_inputs,
    store_client,
    system_metrics,
    tracking_uri,
)
from bvr.training import TrainerSettings, build_trainer, check_accelerator, quiet_fit, training_logger
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


def run_dir_for(cfg: Config, prepared: Prepared) -> Path:
    """The run folder: named by the data, tokenizer, model, masking and training settings (not by how the run is
    carried out and logged, :data:`EXECUTION_KEYS`)."""
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


EXECUTION_KEYS = ("num_workers", "threads", "log_every_steps", "val_every_steps", "checkpoint_every_steps")
"""``training`` keys that say how a run is carried out and logged, not what it computes: not in its folder's key."""


def _logged_metrics(trainer: L.Trainer) -> dict[str, float]:
    return {k: float(v) for k, v in trainer.callback_metrics.items() if torch.is_tensor(v) and v.numel() == 1}


def _last_training_metrics(run_id: str) -> dict[str, float]:
    """The run's latest ``train/*`` values in MLflow: what a run resumed after its last step reports for them."""
    logged = store_client(tracking_uri()).get_run(run_id).data.metrics
    return {key: float(value) for key, value in logged.items() if key.startswith("train/")}


def pretrain(
    cfg: Config,
    *,
    context: RunContext | None = None,
    resume: bool = False,
    restart: bool = False,
    progress: bool = True,
    callbacks: list[L.Callback] | None = None,
) -> PretrainResult:
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
            for the checkpoint and the exported model (:func:`pretraining_bytes`); an optimiser step larger than the
            training data (:func:`~bvr.pretraining.data.check_batch_fits`); or a write fails for want of
            space or permission (:class:`~bvr.write_checks.WriteError`); a GPU accelerator on a machine without one
            (before any data is read).
    """
    check_accelerator(cfg.training.accelerator)
    check_store(Path.cwd())
    context = (context or RunContext()).with_defaults(DEFAULT_EXPERIMENT, cfg.name)
    if context.ablation is None and global_rank() == 0:  # a lone run closes what a killed one left (an ablation does)
        close_stale_runs(context.experiment, Path.cwd())
    prepared = prepare(cfg, progress=progress)
    check_batch_fits(cfg, load_instances(prepared)["train"])
    run_dir = run_dir_for(cfg, prepared)
    with target_lock(run_dir):  # a second process with the same config waits here, then reuses the result
        if is_done(run_dir):
            if global_rank() == 0 and (problem := model_problem(run_dir / "model")):
                export_again(cfg, prepared.tokenizer, run_dir, problem)
            return PretrainResult(run_dir, True, json.loads((run_dir / "metrics.json").read_text()))
        ckpt_path = _resume_point(run_dir / "checkpoints" / "last.ckpt", resume, restart)
        return _train(cfg, prepared, run_dir, ckpt_path, context, progress, callbacks or [])


def _train(cfg: Config, prepared: Prepared, run_dir: Path, ckpt_path: str | None, context: RunContext,
           progress: bool, callbacks: list[L.Callback]) -> PretrainResult:
    """Train into ``run_dir`` (from ``ckpt_path`` when resuming): build, open the run's record, fit, then on rank
    zero export, record and mark it done."""
    built = _build(cfg, prepared, run_dir, ckpt_path, context)
    logger = _logger(cfg, run_dir, ckpt_path, context, built.params, prepared, built.threads)
    with closed_on_error(logger.experiment, logger.run_id):  # FINISHED only once exported and marked done
        metrics = _fit(cfg, built, run_dir, ckpt_path, logger, progress, callbacks)
        if metrics is None:  # another DDP rank: rank zero exports and records
            return PretrainResult(run_dir, False, {})
        _export(cfg, run_dir, built.model, prepared, metrics)
        _record(cfg, run_dir, logger, metrics)
        write_text(run_dir / DONE, "")
        return PretrainResult(run_dir, False, metrics)


@dataclass(frozen=True)
class _Built:
    """What a run trains: the model in its LightningModule, the data, and what the record states about them."""

    model: PretrainingModel
    module: PretrainingModule
    datamodule: PretrainingDataModule
    vocab: VocabInfo
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
    return _Built(model, module, datamodule, vocab, params, threads, words)


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
        metrics = {**_last_training_metrics(logger.run_id), **metrics}
    metrics.update(wall_seconds=time.perf_counter() - start, tokens_seen=float(module.tokens_seen),
                   steps=float(trainer.global_step), **{f"params_{k}": float(v) for k, v in built.params.items()})
    metrics.update(exposure(cfg, trainer.global_step, datamodule.instances["train"], module.tokens_seen))
    metrics.update(vocabulary_exposure(datamodule.instances["train"], built.vocab, module.tokens_seen,
                                       built.ids_per_word))
    metrics["val_unigram_entropy"] = unigram_entropy(datamodule.instances["validation"], built.vocab)
    return metrics


def initialise(cfg: Config, *, progress: bool = True) -> PretrainResult:
    """The no-pretraining control's starting point: the configured encoder, randomly initialised, never trained.

    Written like a finished run (``model/`` with the tokenizer and ``bvr.yaml``) under
    ``output_dir/runs/init-NAME-HASH``, so fine-tuning reads it as any checkpoint; with ``from_scratch`` it takes
    only the shape and the tokenizer and draws new weights per seed. Only the corpus and tokenizer stages are
    prepared. The weights depend on ``training.seed`` alone, so the folder's bytes (and the fine-tuning cache
    keyed on them) are the same each time.
    """
    corpus_dir = prepare_corpus(cfg, progress=progress)
    tokenizer_dir = prepare_tokenizer(cfg, corpus_dir, progress=progress)
    runs = Path(cfg.output_dir) / "runs"
    parts = {"version": CACHE_VERSION, "tokenizer": tokenizer_dir.name, "model": dataclasses.asdict(cfg.model),
             "sentence_head": cfg.data.sentence_objective != "none", "seed": cfg.training.seed}
    run_dir = cache_dir(runs, f"init-{cfg.name}", parts)

    def build(tmp: Path) -> None:
        tokenizer, family = load_tokenizer(tokenizer_dir)
        model = build_model(cfg, vocab_info(tokenizer, family))
        export_model(model, tokenizer_dir, cfg, tmp / "model")
        params = {f"params_{k}": float(v) for k, v in count_parameters(model).items()}
        (tmp / "metrics.json").write_text(json.dumps({**params, "steps": 0.0, "tokens_seen": 0.0}, indent=2))

    run_dir, built = build_once(run_dir, build, parts)
    return PretrainResult(run_dir, not built, json.loads((run_dir / "metrics.json").read_text()))


CHECKPOINT_BYTES_PER_PARAMETER = 12
"""A checkpoint holds each parameter three times in float32: the weight and AdamW's two moments."""
EXPORT_BYTES_PER_PARAMETER = 4
"""The exported model holds the float32 weights."""


def pretraining_bytes(parameters: int, checkpoints: bool) -> int:
    """The disk a pretraining run needs free: a checkpoint (when it writes any: the next one is written whole
    beside the last before replacing it) and the exported model.

    >>> pretraining_bytes(1_000_000, checkpoints=True), pretraining_bytes(1_000_000, checkpoints=False)
    (16000000, 4000000)
    """
    return parameters * (EXPORT_BYTES_PER_PARAMETER + (CHECKPOINT_BYTES_PER_PARAMETER if checkpoints else 0))


def _resume_point(last: Path, resume: bool, restart: bool) -> str | None:
    if restart and last.exists():
        last.unlink()
        return None
    if last.exists() and not resume:
        raise BvrError(
            f"an unfinished run of this configuration exists ({last})",
            where="pretrain",
            hint="pass --resume to continue it or --restart to start over",
        )
    if not resume or not last.exists():
        return None  # nothing to resume: start, as a first run would
    check_checkpoint(last)
    return str(last)


def _logger(cfg: Config, run_dir: Path, ckpt_path: str | None, context: RunContext, params: dict[str, int],
            prepared: Prepared, budget: ThreadBudget) -> Any:
    """The run's MLflow logger: a new run (its config, tokenizer, data statistics and inputs logged), or the run
    of the checkpoint it resumes."""
    run_id_file = run_dir / "mlflow_run_id"
    run_id = run_id_file.read_text().strip() if ckpt_path and run_id_file.exists() else None
    extra = {"bvr.run_dir": str(run_dir), "bvr.tokenizer": prepared.tokenizer.name,
             "bvr.instances": prepared.instances.name,
             "bvr.params_total": params["total"], "bvr.params_non_embedding": params["non_embedding"],
             **budget.tags()}
    logger = training_logger(context, stage="pretrain", extra=extra, run_id=run_id)
    if run_id is None:
        write_text(run_id_file, logger.run_id)
        with closed_on_error(logger.experiment, logger.run_id):
            log_config(logger.experiment, logger.run_id, cfg.to_dict())
            log_artifact_dir(logger.experiment, logger.run_id, prepared.tokenizer, "tokenizer")
            stats = prepared.stats()
            logger.experiment.log_dict(logger.run_id, stats, "data_stats.json")
            log_inputs(logger.experiment, logger.run_id, _data_inputs(cfg, prepared))
    return logger


def _data_inputs(cfg: Config, prepared: Prepared) -> list[DataInput]:
    """The corpus and the training sequences as MLflow datasets; each cache folder's name ends in the hash of
    everything it was built from, the corpus files' content included, which serves as the digest."""
    corpus = f"{cfg.corpus.source} corpus {cfg.corpus.path}" + (
        f" (first {cfg.corpus.max_documents} documents)" if cfg.corpus.max_documents else "")
    return [DataInput(corpus, prepared.corpus.name.rsplit("-", 1)[-1], str(prepared.corpus)),
            DataInput(f"{cfg.data.input_format} sequences of {cfg.data.max_length}",
                      prepared.instances.name.rsplit("-", 1)[-1], str(prepared.instances))]


def _export(cfg: Config, run_dir: Path, model: PretrainingModel, prepared: Prepared, metrics: dict[str, float]) -> None:
    """The final weights with the tokenizer into ``model/``, and the metrics beside it."""
    export_model(model, prepared.tokenizer, cfg, run_dir / "model")
    write_text(run_dir / "metrics.json", json.dumps(metrics, indent=2))


RUN_METRICS = ("wall_seconds", "tokens_seen", "steps", "params_total", "params_embedding", "params_non_embedding",
               "epochs", "mask_distinct_per_sequence", "mask_max_times_seen", "val_unigram_entropy", "words_seen",
               "ids_per_word", "id_occurrences_median", "id_rare_share")
"""What a finished run logs once as ``run/KEY``; :mod:`bvr.pretraining.exposure` defines the epochs and what follows
them (masks, unigram entropy, words, id occurrences)."""


def _record(cfg: Config, run_dir: Path, logger: Any, metrics: dict[str, float]) -> None:
    """The run's ``run/*`` metrics, commit and metrics file into its MLflow run, and the exported encoder among its
    models."""
    client, run_id = logger.experiment, logger.run_id
    for key in RUN_METRICS:
        if key in metrics:
            client.log_metric(run_id, f"run/{key}", metrics[key])
    client.set_tag(run_id, "bvr.git_commit", git_commit() or "unknown")
    client.log_artifact(run_id, str(run_dir / "metrics.json"))
    _register_encoder(client, run_id, cfg, run_dir / "model", metrics)


ENCODER_MODEL_TYPE = "bvr-encoder"


def _register_encoder(client: Any, run_id: str, cfg: Config, model_dir: Path,
                      metrics: dict[str, float]) -> None:
    """List the exported encoder among the run's models in MLflow, as an external model (its files stay in
    ``model_dir``), with its path, shape and tokenizer, a description, the run's validation metrics, and the run
    linked to it both ways (:func:`bvr.tracking.link_model`)."""
    run = client.get_run(run_id)
    label = (run.info.run_name or cfg.name).split("/")[0]
    m = cfg.model
    model = client.create_logged_model(
        run.info.experiment_id, name=f"{label}-encoder", source_run_id=run_id, model_type=ENCODER_MODEL_TYPE,
        tags={"bvr.model_dir": str(model_dir.resolve()), "bvr.format": "hugging-face (transformers Auto classes)",
              "bvr.arm": run.data.tags.get("bvr.arm", cfg.name)},
        params={"model.family": m.family, "model.num_layers": str(m.num_layers),
                "model.hidden_size": str(m.hidden_size), "model.num_heads": str(m.num_heads),
                "tokenizer.family": cfg.tokenizer.family})
    client.finalize_logged_model(model.model_id, "READY")
    shown = {k: v for k, v in metrics.items() if k.startswith("val/")}
    shown |= {f"run/{k}": metrics[k] for k in ("tokens_seen", "params_total", "params_non_embedding") if k in metrics}
    link_model(client, run_id, model.model_id, metrics=shown, step=int(metrics.get("steps", 0)), description=(
        f"The encoder pretrained by run `{run.info.run_name}` ({m.family}, {m.num_layers} layers of {m.hidden_size}, "
        f"{cfg.tokenizer.family} tokenizer): a Hugging Face folder at `{model_dir.resolve()}` (transformers' Auto "
        "classes load it); fine-tuning and evaluations of it are the runs of the same label."))
