"""``bvr finetune``: fine-tune one checkpoint on one task over several seeds, track every seed, summarise the spread.

For each seed a Lightning Trainer trains a fresh head on the checkpoint's encoder (or, for the ``from_scratch``
control arm, on a randomly initialised encoder of the same shape) and evaluates every evaluation split after each
epoch. A seed reports its final epoch's scores and, labelled ``best/``, those of its best epoch by the headline
score (choosing the best epoch on the evaluation split itself flatters the score; the final epoch is the honest one).

MLflow: a parent run ``ARM/finetune/TASK`` per invocation (nested under ``parent_run_id`` when given), and under it
one run ``ARM/finetune/TASK/seedN`` per seed, tagged ``bvr.task``, ``bvr.seed``, ``bvr.arm``, ``bvr.stage=finetune``,
``bvr.checkpoint`` and ``bvr.collapsed``, with metrics ``dev/accuracy`` (one value per epoch), ``best/dev/accuracy``,
``best/epoch`` and the trivial baseline's ``baseline/dev/accuracy``; a span task's seed also keeps its final
``predictions.json`` (and SQuAD v2.0's ``na_probs.json``) in its folder and as artifacts, with the null threshold
and its source as params (``squad.null_threshold``, ``squad.null_threshold_source``) and ``squad/all_empty``. The
parent holds the spread of the headline score over the seeds (``dev/accuracy_median``, ``_min``, ``_max``, ``_q1``,
``_q3``, ``_iqr``).

Every finished seed is cached in ``output_dir/finetune/TASK-seedN-HASH/result.json``; HASH covers the checkpoint's
files, the task, the resolved hyperparameters, the data folder and the content of the task's files in it, the seed
and the from-scratch flag, so a second call reuses finished seeds and trains only the missing ones, and a data file
edited in place is trained on again. Two processes asking for the same seed at once train it once: the second waits
for the first and reuses its result. The result.json is also an artifact of the seed's run, tagged ``bvr.result``
with the folder's name: a folder deleted or damaged since is read back from it, and a seed cached by another
experiment's call gets a copy of its run in this one (:mod:`bvr.tasks.seed_runs`).

Hyperparameters are the ``finetune`` section of the configuration, resolved per task by
:func:`bvr.config.resolve_finetune`: :class:`~bvr.config.FinetuneConfig`'s defaults, the task's own
(``TaskSpec.finetune``), then the preset, the config file and ``--set finetune.KEY=VALUE``, each layer's
``finetune.KEY`` before its ``finetune.per_task.TASK.KEY`` (:func:`bvr.tasks.settings.load_finetune_config`).

This module is the seed loop and its cache; the results it returns and their printing are
:mod:`bvr.tasks.results`, the checkpoint's identity and fresh encoders :mod:`bvr.tasks.source`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from bvr.cache import build_once, cache_dir, fingerprint, reuse_older
from bvr.config import FinetuneConfig
from bvr.errors import BvrError
from bvr.pretrained import Pretrained, load_pretrained
from bvr.tasks.data import load_task_data, loader, task_files
from bvr.tasks.evaluators import EvalRecord
from bvr.tasks.kinds import KINDS
from bvr.tasks.module import EpochScores, FinetuneModule, make_module
from bvr.tasks.registry import TaskSpec, get_task
from bvr.tasks.results import (
    FinetuneResult,
    SeedResult,
    TaskInfo,
    read_seed_result,
    spread,
    write_seed_result,
)
from bvr.tasks.seed_runs import RESULT_FILE, TaskParent, place_seeds
from bvr.tasks.settings import load_finetune_config, optim_settings
from bvr.tasks.source import EncoderSource, checkpoint_identity, default_arm
from bvr.tasks.splits import TaskData
from bvr.tokenization import vocab_info
from bvr.tracking import (
    TAG_COLLAPSED,
    TAG_MEASURE,
    DataInput,
    RunContext,
    check_store,
    close_stale_runs,
    closed_on_error,
    ensure_experiment,
    log_config,
    log_inputs,
    log_params_batched,
    run_name,
    run_tags,
    store_client,
    tracking_uri,
)
from bvr.tracking.placed import TAG_RESULT, copy_run
from bvr.training import TrainerSettings, build_trainer, check_accelerator, quiet_fit, training_logger
from bvr.write_checks import check_writable

# 3: encoder and task head drawn in generators of their own per seed; 4: packed layers, fused AdamW, 15-bit dropout;
# 5: dropout's scale folded into the weights before it (the same masks, other rounding); 6: a bert folder's stored
# pooler loaded without its NSP head (a BertModel folder's sequence head started from a fresh one)
FINETUNE_VERSION = 6
DEFAULT_EXPERIMENT = "bvr-finetune"
TAG_CHECKPOINT = "bvr.checkpoint"
TAG_FROM_SCRATCH = "bvr.from_scratch"
TAG_DATA_SPLIT = "bvr.data_split"
SCORE_KEY = "score"
"""The headline score in points, under one name for every task (a seed's final score; the median over seeds on the
task's run), so that MLflow's runs table grouped by ``bvr.arm`` shows one comparable column."""
_MAX_TAG = 5000


# ---------------------------------------------------------------------------------------------------------------
# One seed
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class _Job:
    """What every seed of one call shares."""

    spec: TaskSpec
    cfg: FinetuneConfig
    data: TaskData
    source: EncoderSource
    info: TaskInfo
    checkpoint: str
    context: RunContext
    """The call's context, its experiment and label filled in; each seed's run nests under the call's run."""
    progress: bool
    inputs: list[DataInput] = field(default_factory=list)
    """The task's files, logged as each seed run's datasets."""

    @property
    def main_key(self) -> str:
        return f"{self.spec.headline_split}/{self.spec.main_metric}"


def _best(history: list[EpochScores], key: str) -> EpochScores:
    """The evaluation with the highest headline score (the earliest among equals)."""
    return max(history, key=lambda entry: (entry.scores[key], -entry.step))


def _seed_logger(job: _Job, seed: int, parent_id: str, key: str) -> Any:
    extra = {TAG_CHECKPOINT: job.checkpoint, TAG_COLLAPSED: False, TAG_FROM_SCRATCH: job.source.from_scratch,
             TAG_RESULT: key,
             "bvr.threads": str(torch.get_num_threads())}  # the budget the command or ablation set (bvr.threads)
    if job.info.split_note:
        extra[TAG_DATA_SPLIT] = job.info.split_note[:_MAX_TAG]
    logger = training_logger(dataclasses.replace(job.context, parent_run_id=parent_id), stage="finetune",
                             task=job.spec.name, seed=seed, extra=extra)
    log_config(logger, None, {"task": job.spec.name, "seed": seed, "checkpoint": job.checkpoint,
                              "from_scratch": job.source.from_scratch, "finetune": dataclasses.asdict(job.cfg)})
    log_inputs(logger.experiment, logger.run_id, job.inputs)
    return logger


def _data_inputs(spec: TaskSpec, data_dir: Path | None) -> list[DataInput]:
    """The task's files as MLflow datasets, each with its content fingerprint (none when read from the hub)."""
    if data_dir is None:
        return []
    files = {split.name: data_dir / spec.folder / split.file for split in spec.splits}
    return [DataInput(f"{spec.name} {name}", fingerprint(path), str(path), "train" if name == "train" else "eval")
            for name, path in files.items() if path.is_file()]


def _fit(job: _Job, module: FinetuneModule, trainer: L.Trainer, seed: int) -> None:
    data, cfg = job.data, job.cfg
    evals = [loader(data, split, cfg.eval_batch_size, num_workers=cfg.num_workers) for split in data.evals.values()]
    with quiet_fit():
        train = loader(data, data.train, cfg.batch_size, seed=seed, num_workers=cfg.num_workers)
        trainer.fit(module, train_dataloaders=train, val_dataloaders=evals)
        if not module.history or module.history[-1].step != trainer.global_step:
            trainer.validate(module, dataloaders=evals, verbose=False)  # max_steps ended the run inside an epoch


def _keep_record(record: EvalRecord, client: MlflowClient, run_id: str, out: Path, who: str) -> None:
    """The headline split's files into the run folder and the run's artifacts, its params and metrics; its warning
    (a collapse) as one line on stderr, led by ``who`` (the task and seed)."""
    for name, text in record.files.items():
        (out / name).write_text(text, encoding="utf-8")
        client.log_artifact(run_id, str(out / name))
    log_params_batched(client, run_id, record.params)
    for key, value in record.metrics.items():
        client.log_metric(run_id, key, value)
    if record.warning:
        print(f"{who}: {record.warning}", file=sys.stderr, flush=True)


def _log_outcome(job: _Job, client: MlflowClient, run_id: str, result: SeedResult) -> None:
    metrics = {f"best/{key}": value for key, value in result.best_scores.items()}
    metrics.update({f"baseline/{key}": value for key, value in job.info.baseline.items()})
    metrics.update({"best/epoch": float(result.best_epoch), "run/wall_seconds": result.seconds,
                    SCORE_KEY: result.scores[job.main_key] * job.spec.points_scale})
    for key, value in metrics.items():
        client.log_metric(run_id, key, value)
    client.set_tag(run_id, TAG_COLLAPSED, json.dumps(result.collapsed))
    client.log_text(run_id, "\n".join([*job.info.reports, job.info.split_note or ""]).strip() + "\n", "data.txt")


def _train_seed(job: _Job, seed: int, parent_id: str, out: Path, key: str) -> SeedResult:
    """Train and evaluate one seed into ``out``; log it to MLflow under ``parent_id``, tagged as made for the cache
    folder named ``key``."""
    L.seed_everything(seed, workers=True, verbose=False)
    # Encoder and head are drawn in generators of their own (bvr.tasks.source.seeded), so the head's initial
    # weights, the data order and dropout at seed s are the same for every arm and the control.
    module = make_module(job.source.build(seed), job.data, optim_settings(job.cfg), seed)
    logger = _seed_logger(job, seed, parent_id, key)
    with closed_on_error(logger.experiment, logger.run_id):  # Lightning ends it FINISHED before _log_outcome
        cfg = job.cfg
        settings = TrainerSettings(precision=cfg.precision, accelerator=cfg.accelerator, grad_clip=cfg.grad_clip,
                                   log_every_steps=cfg.log_every_steps, max_steps=cfg.max_steps or -1,
                                   max_epochs=cfg.epochs)
        trainer = build_trainer(out, settings, logger, progress=job.progress)
        start = time.perf_counter()
        _fit(job, module, trainer, seed)
        final, best = module.history[-1], _best(module.history, job.main_key)
        result = SeedResult(
            seed=seed, scores=final.scores, best_scores=best.scores, best_epoch=best.epoch,
            collapsed=final.collapsed[job.spec.headline_split], seconds=time.perf_counter() - start,
            history=[dataclasses.asdict(entry) for entry in module.history], run_id=logger.run_id,
        )
        _log_outcome(job, logger.experiment, logger.run_id, result)
        _keep_record(module.evaluators[job.spec.headline_split].record(), logger.experiment, logger.run_id,
                     out, f"{job.spec.name} seed {seed}")
        return result


# ---------------------------------------------------------------------------------------------------------------
# The entry point
# ---------------------------------------------------------------------------------------------------------------


def _seed_list(seeds: int | Sequence[int]) -> list[int]:
    if isinstance(seeds, int):
        if seeds < 1:
            raise BvrError(f"need at least one seed, got {seeds}", where="--seeds")
        return list(range(seeds))
    if not seeds or len(set(seeds)) != len(seeds):
        raise BvrError(f"seeds must be distinct and not empty, got {list(seeds)}", where="--seeds")
    return list(seeds)


def _task_info(data: TaskData) -> TaskInfo:
    kind = KINDS[data.spec.kind]
    return TaskInfo(kind.baseline(data), kind.baseline_note(data), data.reports, data.split_note)


def _load_data(spec: TaskSpec, pretrained: Pretrained, data_dir: Path | None, cfg: FinetuneConfig) -> TaskData:
    vocab = vocab_info(pretrained.tokenizer, pretrained.family)
    return load_task_data(spec, data_dir, pretrained.tokenizer, pretrained.family, vocab.pad_id, cfg.data_settings())


def _check_fits(cfg: FinetuneConfig, pretrained: Pretrained) -> None:
    positions = pretrained.model.config.max_tokens
    if cfg.max_length > positions:
        raise BvrError(f"max_length {cfg.max_length} exceeds the model's {positions} positions", where="max_length",
                       hint=f"use --set finetune.max_length={positions} or less")


def _seed_dirs(root: Path, spec: TaskSpec, cfg: FinetuneConfig, identity: str, data_dir: Path | None,
               from_scratch: bool, seeds: list[int]) -> dict[int, Path]:
    """Each seed's cache folder, named by everything its result depends on, the task files' content included but not
    the data folder's path (a folder named while it was, and not since, is reused)."""
    parts = {"version": FINETUNE_VERSION, "checkpoint": identity, "task": spec.name, "finetune": cfg.hashed(),
             "data_dir": None, "from_scratch": from_scratch,
             "data": fingerprint(*task_files(spec, data_dir)) if data_dir else None}
    before = {**parts, "data_dir": str(Path(data_dir).resolve()) if data_dir else None}  # the key until the path left
    return {seed: reuse_older(cache_dir(root, f"{spec.name}-seed{seed}", {**parts, "seed": seed}),
                              cache_dir(root, f"{spec.name}-seed{seed}", {**before, "seed": seed})) for seed in seeds}


def finetune(
    checkpoint: str | Path,
    task: str,
    *,
    seeds: int | Sequence[int] = 5,
    data_dir: str | Path | None = None,
    output_dir: str | Path = "outputs",
    preset: str | None = None,
    overrides: Sequence[str] | None = None,
    config_file: str | Path | None = None,
    from_scratch: bool = False,
    context: RunContext | None = None,
    progress: bool = False,
) -> FinetuneResult:
    """Fine-tune ``checkpoint`` on ``task`` once per seed, reusing seeds already finished with the same settings.

    Args:
        checkpoint: a bvr run folder, its ``model/`` folder, or a Hugging Face BERT/RoBERTa folder.
        task: a registered task name (``sst2``, ``conll2003``, ``squad``; see :data:`bvr.tasks.registry.TASKS`).
        seeds: how many seeds (0 to n-1), or the seeds themselves.
        data_dir: the folder holding ``glue/``, ``conll2003/``, ``squad/``; None reads the Hugging Face hub.
        output_dir: where finished seeds are cached (``output_dir/finetune/``).
        preset: a preset, ``experiments/presets/NAME.yaml`` (``tiny``), for its ``finetune`` section.
        overrides: ``--set`` strings (``finetune.epochs=2``, ``finetune.per_task.squad.stride=64``).
        config_file: a config file (its ``finetune`` section).
        from_scratch: the no-pretraining control: a randomly initialised encoder of the checkpoint's shape.
        context: where the runs go: the experiment (default: the ablation's, else ``bvr-finetune``), the label
            (default: the checkpoint's run name, ``-scratch`` added for the control), the run to nest this call's
            run under, and the model's tags.
        progress: show Lightning's progress bar.

    Returns:
        Per-seed scores and the spread of the headline score; :func:`bvr.tasks.results.describe` prints it.

    Raises:
        BvrError: an unknown task, a bad hyperparameter (file and key named), a checkpoint that cannot be loaded,
            data that cannot be read, a tracking server that does not answer, or an output or working folder that
            cannot be written.
    """
    start = time.perf_counter()
    spec = get_task(task)
    seed_list = _seed_list(seeds)
    cfg = load_finetune_config(spec, config_file=Path(config_file) if config_file else None, preset=preset,
                               overrides=overrides)
    check_accelerator(cfg.accelerator, "finetune.accelerator")  # the settings first, then the machine
    check_store(Path.cwd())
    check_writable(Path(output_dir), "output folder (--output-dir)")
    context = context or RunContext()
    if context.ablation is None:  # a lone run closes what a killed one left (an ablation does it for all its runs)
        close_stale_runs(context.experiment or DEFAULT_EXPERIMENT, Path.cwd())
    pretrained = load_pretrained(Path(checkpoint), need_mlm_head=False)  # the encoder is what fine-tuning needs
    _check_fits(cfg, pretrained)
    data_path = Path(data_dir) if data_dir is not None else None
    dirs = _seed_dirs(Path(output_dir) / "finetune", spec, cfg, checkpoint_identity(pretrained.folder), data_path,
                      from_scratch, seed_list)
    context = context.with_defaults(DEFAULT_EXPERIMENT, default_arm(pretrained, from_scratch))
    arm, name, parent_run_id = context.label, context.experiment, context.parent_run_id
    client = store_client(tracking_uri(Path.cwd()))
    experiment_id = ensure_experiment(name, Path.cwd())
    placed = place_seeds(client, experiment_id, dirs)
    results = {seed: result for seed, (result, _) in placed.cached.items()}
    info = next(iter(placed.cached.values()))[1] if placed.cached else None
    extra = {TAG_CHECKPOINT: str(pretrained.folder), TAG_FROM_SCRATCH: from_scratch,
             TAG_MEASURE: f"finetune/{spec.name}", **({MLFLOW_PARENT_RUN_ID: parent_run_id} if parent_run_id else {})}
    with contextlib.ExitStack() as stack:
        parent = TaskParent(stack, name, run_name(arm, "finetune", spec.name),
                            run_tags(context, stage="finetune", task=spec.name, extra=extra))
        for seed, (cached, _) in placed.elsewhere.items():  # logged by another experiment sharing this cache
            tags = run_tags(context, stage="finetune", task=spec.name, seed=seed, extra={TAG_RESULT: dirs[seed].name})
            results[seed] = dataclasses.replace(cached, run_id=copy_run(
                client, str(cached.run_id), experiment_id, parent_run_id=parent.id(), tags=tags))
        if len(results) < len(seed_list):
            data = _load_data(spec, pretrained, data_path, cfg)
            info = _task_info(data)
            job = _Job(spec, cfg, data, EncoderSource(pretrained, from_scratch), info, str(pretrained.folder),
                       context, progress, _data_inputs(spec, data_path))
            _train_missing(job, dirs, results, parent)
        if parent.started:
            _log_spread(client, parent.id(), spec, info, [results[seed] for seed in seed_list])
    assert info is not None  # every seed is cached or trained above
    return FinetuneResult(spec.name, arm, str(pretrained.folder), from_scratch, f"{spec.headline_split}/"
                          f"{spec.main_metric}", [results[seed] for seed in seed_list], info,
                          dataclasses.asdict(cfg), time.perf_counter() - start,
                          parent.run_id if parent.started else None)


def _train_missing(job: _Job, dirs: dict[int, Path], results: dict[int, SeedResult], parent: TaskParent) -> None:
    """Train every seed not in ``results`` under the call's parent run; each seed's result.json is also an artifact
    of its run, from which a cache folder deleted later is read back."""
    for seed, folder in dirs.items():
        if seed in results:
            continue
        resolved = {"seed": seed, "task": job.spec.name, "checkpoint": job.checkpoint,
                    "from_scratch": job.source.from_scratch, "finetune": dataclasses.asdict(job.cfg)}

        def build(tmp: Path, seed: int = seed, folder: Path = folder) -> None:
            result = _train_seed(job, seed, parent.id(), tmp, folder.name)
            write_seed_result(tmp, result, job.info, folder)
            store_client(tracking_uri(Path.cwd())).log_artifact(str(result.run_id), str(tmp / RESULT_FILE))

        _, built = build_once(folder, build, resolved)
        # not built: another process did
        results[seed] = dataclasses.replace(read_seed_result(folder)[0], reused=not built)


def _log_spread(client: MlflowClient, run_id: str, spec: TaskSpec, info: TaskInfo | None,
                seeds: list[SeedResult]) -> None:
    key = f"{spec.headline_split}/{spec.main_metric}"
    for name, value in spread([seed.scores[key] for seed in seeds]).items():
        client.log_metric(run_id, f"{key}_{name}", value)
        if name == "median":
            client.log_metric(run_id, SCORE_KEY, value * spec.points_scale)
    for name, value in (info.baseline if info else {}).items():
        client.log_metric(run_id, f"baseline/{name}", value)
    collapsed = sum(seed.collapsed for seed in seeds)
    client.log_metric(run_id, "collapsed_seeds", float(collapsed))
    client.set_tag(run_id, TAG_COLLAPSED, json.dumps(collapsed > 0))


