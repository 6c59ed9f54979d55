"""A pretraining run's MLflow record: opened before the first step (config, tokenizer, data statistics, inputs),
finished after the export (``run/*`` metrics, commit, metrics file, the encoder among the models)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bvr.config import Config
from bvr.fs import write_text
from bvr.pretraining.prepare import Prepared
from bvr.threads import ThreadBudget
from bvr.tracking import (
    DataInput,
    RunContext,
    closed_on_error,
    git_commit,
    link_model,
    log_artifact_dir,
    log_config,
    log_inputs,
    store_client,
    tracking_uri,
)
from bvr.training import training_logger


def open_record(cfg: Config, run_dir: Path, ckpt_path: str | None, context: RunContext, params: dict[str, int],
                prepared: Prepared, budget: ThreadBudget) -> Any:
    """The run's MLflow logger: a new run (its config, tokenizer, data statistics and inputs logged), or the run
    of the checkpoint it resumes."""
    run_id_file = run_dir / "mlflow_run_id"
    run_id = run_id_file.read_text().strip() if ckpt_path and run_id_file.exists() else None
    extra = {"bvr.run_dir": str(run_dir), "bvr.tokenizer": prepared.tokenizer.name,
             "bvr.instances": prepared.instances.name, "bvr.params_total": params["total"],
             "bvr.params_non_embedding": params["non_embedding"], **budget.tags()}
    logger = training_logger(context, stage="pretrain", extra=extra, run_id=run_id)
    if run_id is None:
        inputs, stats = _data_inputs(cfg, prepared), prepared.stats()
        write_text(run_id_file, logger.run_id)
        with closed_on_error(logger.experiment, logger.run_id):
            log_config(logger.experiment, logger.run_id, cfg.to_dict())
            log_artifact_dir(logger.experiment, logger.run_id, prepared.tokenizer, "tokenizer")
            logger.experiment.log_dict(logger.run_id, stats, "data_stats.json")
            log_inputs(logger.experiment, logger.run_id, inputs)
    return logger


def _data_inputs(cfg: Config, prepared: Prepared) -> list[DataInput]:
    """The corpus and the training sequences as MLflow datasets; each cache folder's name ends in the hash of
    everything it was built from, the corpus files' content included, which serves as the digest."""
    corpus = f"{cfg.corpus.source} corpus {cfg.corpus.path}" + (
        f" (first {cfg.corpus.max_documents} documents)" if cfg.corpus.max_documents else "")
    return [DataInput(corpus, prepared.corpus.name.rsplit("-", 1)[-1], str(prepared.corpus)),
            DataInput(f"{cfg.data.input_format} sequences of {cfg.data.max_length}",
                      prepared.instances.name.rsplit("-", 1)[-1], str(prepared.instances))]


def last_training_metrics(run_id: str) -> dict[str, float]:
    """The run's latest ``train/*`` values in MLflow: what a run resumed after its last step reports for them."""
    logged = store_client(tracking_uri()).get_run(run_id).data.metrics
    return {key: float(value) for key, value in logged.items() if key.startswith("train/")}


RUN_METRICS = ("wall_seconds", "tokens_seen", "steps", "params_total", "params_embedding", "params_non_embedding",
               "epochs", "mask_distinct_per_sequence", "mask_max_times_seen", "val_unigram_entropy", "words_seen",
               "ids_per_word", "id_occurrences_median", "id_rare_share")
"""What a finished run logs once as ``run/KEY``; :mod:`bvr.pretraining.exposure` defines the epochs and what follows
them (masks, unigram entropy, words, id occurrences)."""


def finish_record(cfg: Config, run_dir: Path, logger: Any, metrics: dict[str, float]) -> None:
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


def _register_encoder(client: Any, run_id: str, cfg: Config, model_dir: Path, metrics: dict[str, float]) -> None:
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
