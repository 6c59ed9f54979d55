"""``bvr finetune``: fine-tune one checkpoint on one task over several seeds, track every seed, summarise the spread.

Each seed trains a fresh head on the checkpoint's encoder (the ``from_scratch`` control: a random encoder of the
same shape) and evaluates every evaluation split after each epoch. It reports its final epoch's scores and, as
``best/``, those of its best epoch by the headline score (chosen on the evaluation split itself: optimistic).

MLflow: :mod:`bvr.tasks.recorder`. A finished seed is cached in ``output_dir/finetune/TASK-seedN-HASH/``, HASH over
the checkpoint's files, the task, the resolved hyperparameters, the content of the task's files, the seed and the
from-scratch flag: a second call trains only the missing seeds, two processes asking for one seed train it once,
and a data file edited in place is trained on again. Its ``result.json`` is also an artifact of the seed's run: a
folder deleted or damaged since is read back from it, and a seed cached by another experiment's call gets a copy of
its run in this one (:mod:`bvr.tasks.seed_runs`). A span task's seed also keeps its final ``predictions.json`` (and
SQuAD v2.0's ``na_probs.json``) in its folder.

Hyperparameters: :func:`load_finetune_config` (:class:`~bvr.config.FinetuneConfig`'s defaults, the task's own
``TaskSpec.finetune``, the preset, the config file, then ``--set``; each layer's ``finetune.KEY`` before its
``finetune.per_task.TASK.KEY``). Where ``learning_rate`` or ``epochs`` is a list, every point of the grid is
fine-tuned over the same seeds, each with its own cache folders and run, and the point chosen on held-out training
examples (:mod:`bvr.tasks.selection`) gives the call's seeds.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import lightning as L

from bvr.cache import CACHE_VERSION, build_once, cache_dir, fingerprint
from bvr.config import FinetuneConfig, GridPoint, check_task_names, load_config, resolve_finetune
from bvr.errors import BvrError
from bvr.fs import write_text
from bvr.pretrained import Pretrained, load_pretrained
from bvr.tasks.data import load_task_data, loader, task_files
from bvr.tasks.kinds import KINDS
from bvr.tasks.module import FinetuneModule, OptimSettings, make_module
from bvr.tasks.recorder import TaskRecorder
from bvr.tasks.registry import TASKS, TaskSpec, get_task
from bvr.tasks.results import FinetuneResult, SeedResult, TaskInfo, read_seed_result, write_seed_result
from bvr.tasks.seed_runs import RESULT_FILE, place_seeds
from bvr.tasks.selection import PointResult, Selection, select
from bvr.tasks.source import EncoderSource, default_arm
from bvr.tasks.splits import TaskData
from bvr.tokenization import vocab_info
from bvr.tracking import DataInput, RunContext, check_store, close_stale_runs, closed_on_error
from bvr.training import TrainerSettings, build_trainer, check_accelerator, quiet_fit
from bvr.write_checks import check_writable

DEFAULT_EXPERIMENT = "bvr-finetune"


@dataclass(frozen=True)
class FinetuneSetup:
    """Where a fine-tuning call reads its data and hyperparameters and caches its seeds: an ablation's plan, or the
    command's options, gives them together."""

    data_dir: str | Path | None = None  # the folder holding ``glue/``, ``conll2003/``, ``squad/``; None: the hub
    output_dir: str | Path = "outputs"  # where finished seeds are cached (``output_dir/finetune/``)
    preset: str | None = None
    overrides: Sequence[str] = ()  # ``--set`` strings (``finetune.epochs=2``, ``finetune.per_task.squad.stride=64``)
    config_file: str | Path | None = None


def finetune(checkpoint: str | Path, task: str, *, seeds: int | Sequence[int] = 5, setup: FinetuneSetup | None = None,
             from_scratch: bool = False, context: RunContext | None = None, progress: bool = False) -> FinetuneResult:
    """Fine-tune ``checkpoint`` on ``task`` once per seed, reusing seeds already finished with the same settings.

    ``checkpoint`` is a bvr run folder, its ``model/`` folder, or a Hugging Face BERT/RoBERTa folder; ``seeds`` how
    many (0 to n-1), or the seeds themselves; ``from_scratch`` the no-pretraining control (a randomly initialised
    encoder of the checkpoint's shape). ``context`` says where the runs go: the experiment (default: the ablation's,
    else ``bvr-finetune``), the label (default: the checkpoint's run name, ``-scratch`` added for the control), the
    run to nest this call's run under, and the model's tags.
    """
    start = time.perf_counter()
    call = _prepare(checkpoint, task, seeds, setup or FinetuneSetup(), from_scratch, context)
    data = _Data(call, progress)
    selection = None
    with TaskRecorder(call.context, call.spec, str(call.pretrained.folder), from_scratch) as recorder:
        if len(call.points) == 1:  # no grid: the seeds are the call's, nothing held out; the point's config recorded
            seeds_done, info = _fit_point(call, call.points[0], recorder, data)
            config = call.points[0].grid.config.as_dict()
        else:  # the grid's config recorded: its lists and selection split
            seeds_done, info, selection = _fit_grid(call, recorder, data)
            config = call.cfg.as_dict()
        recorder.record_spread(info, seeds_done)
    return FinetuneResult(call.spec.name, str(call.context.label), str(call.pretrained.folder), from_scratch,
                          recorder.main_key, seeds_done, info, config, time.perf_counter() - start,
                          recorder.parent_run_id, selection.to_dict() if selection else None)


# --- The steps of a call ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Point:
    """One point of the call's grid (the only one, without a grid) and each of its seeds' cache folders."""

    grid: GridPoint
    dirs: dict[int, Path]


@dataclass(frozen=True)
class _Call:
    """What one call fine-tunes, checked: the task, its seeds and hyperparameters (a grid's points among them), the
    model, the data folder and each point's seeds' cache folders."""

    spec: TaskSpec
    seeds: list[int]
    cfg: FinetuneConfig
    pretrained: Pretrained
    data_dir: Path | None
    points: list[_Point]
    from_scratch: bool
    context: RunContext  # the call's context, its experiment and label filled in


def _prepare(checkpoint: str | Path, task: str, seeds: int | Sequence[int], setup: FinetuneSetup, from_scratch: bool,
             context: RunContext | None) -> _Call:
    """The task, seeds and hyperparameters checked, then the machine, the store and the output folder; what a killed
    lone run left closed; the checkpoint loaded; each seed's cache folder named."""
    spec = get_task(task)
    seed_list = _seed_list(seeds)
    cfg = load_finetune_config(spec, config_file=Path(setup.config_file) if setup.config_file else None,
                               preset=setup.preset, overrides=setup.overrides)
    check_accelerator(cfg.accelerator, "finetune.accelerator")  # the settings first, then the machine
    check_store(Path.cwd())
    check_writable(Path(setup.output_dir), "output folder (--output-dir)")
    context = context or RunContext()
    if context.ablation is None:  # a lone run closes what a killed one left (an ablation does it for all its runs)
        close_stale_runs(context.experiment or DEFAULT_EXPERIMENT, Path.cwd())
    pretrained = load_pretrained(Path(checkpoint), need_mlm_head=False)  # the encoder is what fine-tuning needs
    if cfg.max_length > (positions := pretrained.model.config.max_tokens):
        raise BvrError(f"max_length {cfg.max_length} exceeds the model's {positions} positions", where="max_length",
                       hint=f"use --set finetune.max_length={positions} or less")
    data_dir = Path(setup.data_dir) if setup.data_dir is not None else None
    identity = fingerprint(pretrained.folder)  # the model folder's files (weights, config, tokenizer), not its place
    points = [_Point(point, _seed_dirs(Path(setup.output_dir) / "finetune", spec, point.config, identity, data_dir,
                                       from_scratch, seed_list)) for point in cfg.grid()]
    context = context.with_defaults(DEFAULT_EXPERIMENT, default_arm(pretrained, from_scratch))
    return _Call(spec, seed_list, cfg, pretrained, data_dir, points, from_scratch, context)


class _Data:
    """The task's data, the encoder source and the task's files, built once for every point that trains a seed
    (a grid's points differ only in the learning rate and epochs, not in their data)."""

    def __init__(self, call: _Call, progress: bool) -> None:
        self.call, self.progress = call, progress
        self._built: tuple[TaskData, TaskInfo, EncoderSource, list[DataInput]] | None = None

    def job(self, cfg: FinetuneConfig, recorder: TaskRecorder) -> _Job:
        """What ``cfg``'s seeds share, recorded by ``recorder``."""
        call = self.call
        if self._built is None:
            pretrained, kind = call.pretrained, KINDS[call.spec.kind]
            data = load_task_data(call.spec, call.data_dir, pretrained.tokenizer, pretrained.family,
                                  vocab_info(pretrained.tokenizer, pretrained.family).pad_id, cfg.data_settings())
            info = TaskInfo(kind.baseline(data), kind.baseline_note(data), data.reports, data.split_note)
            self._built = (data, info, EncoderSource(pretrained, call.from_scratch),
                           _data_inputs(call.spec, call.data_dir))
        data, info, source, inputs = self._built
        return _Job(call.spec, cfg, data, source, info, recorder, self.progress, inputs)


def _fit_point(call: _Call, point: _Point, recorder: TaskRecorder, data: _Data) -> tuple[list[SeedResult], TaskInfo]:
    """The point's seeds, in the call's order: the cached ones reused, the others trained."""
    results, info = _reuse(point.dirs, recorder)
    if len(results) < len(call.seeds):
        job = data.job(point.grid.config, recorder)
        info = job.info
        _train_missing(job, point.dirs, results)
    assert info is not None  # every seed is cached or trained above
    return [results[seed] for seed in call.seeds], info


def _fit_grid(call: _Call, recorder: TaskRecorder, data: _Data) -> tuple[list[SeedResult], TaskInfo, Selection]:
    """Every point of the grid over the call's seeds, each under a run of its own; the seeds of the point chosen on
    the selection split (:func:`bvr.tasks.selection.select`)."""
    results, recorders, infos = [], [], []
    for point in call.points:
        with recorder.for_point(point.grid) as point_recorder:
            seeds, info = _fit_point(call, point, point_recorder, data)
        results.append(PointResult(point.grid, seeds))
        recorders.append(point_recorder)
        infos.append(info)
    selection = select(results, call.spec.main_metric, infos[0].split_note)
    recorder.record_choice(recorders, selection)
    return results[selection.chosen].seeds, infos[selection.chosen], selection


def _reuse(dirs: dict[int, Path], recorder: TaskRecorder) -> tuple[dict[int, SeedResult], TaskInfo | None]:
    """The cached seeds, those whose runs another experiment sharing this cache logged copied into this one, and the
    task's information they hold (None: no seed is cached)."""
    here, elsewhere = place_seeds(recorder.client, recorder.experiment_id, dirs)
    cached = {**here, **elsewhere}
    results = {seed: result for seed, (result, _) in cached.items()}
    info = next(iter(cached.values()))[1] if cached else None
    results.update(recorder.copy_seeds(elsewhere, dirs))
    return results, info


@dataclass
class _Job:
    """What every seed a call trains shares."""

    spec: TaskSpec
    cfg: FinetuneConfig
    data: TaskData
    source: EncoderSource
    info: TaskInfo
    recorder: TaskRecorder
    progress: bool
    inputs: list[DataInput] = field(default_factory=list)  # the task's files, logged as each seed run's datasets


def _train_missing(job: _Job, dirs: dict[int, Path], results: dict[int, SeedResult]) -> None:
    """Train every seed not in ``results`` under the call's parent run; each seed's result.json is also an artifact
    of its run, from which a cache folder deleted later is read back."""
    for seed, folder in dirs.items():
        if seed in results:
            continue
        resolved = {"seed": seed, "task": job.spec.name, "checkpoint": job.recorder.checkpoint,
                    "from_scratch": job.source.from_scratch, "finetune": job.cfg.as_dict()}

        def build(tmp: Path, seed: int = seed, folder: Path = folder) -> None:
            result = _train_seed(job, seed, tmp, folder.name)
            write_seed_result(tmp, result, job.info, folder)
            job.recorder.record_result_file(result, tmp / RESULT_FILE)

        _, built = build_once(folder, build, resolved)
        # not built: another process did
        results[seed] = dataclasses.replace(read_seed_result(folder)[0], reused=not built)


# --- One seed --------------------------------------------------------------------------------------------------


def _train_seed(job: _Job, seed: int, out: Path, key: str) -> SeedResult:
    """Train and evaluate one seed into ``out``; record it under the call's run, tagged as made for the cache folder
    named ``key``."""
    L.seed_everything(seed, workers=True, verbose=False)
    cfg = job.cfg
    # Encoder and head are drawn in generators of their own (bvr.tasks.source.seeded), so the head's initial
    # weights, the data order and dropout at seed s are the same for every arm and the control.
    optim = OptimSettings(cfg.learning_rate, cfg.weight_decay, cfg.warmup_fraction,
                          (cfg.adam_betas[0], cfg.adam_betas[1]), cfg.adam_eps)
    module = make_module(job.source.build(seed), job.data, optim, seed)
    logger = job.recorder.open_seed(seed, key, cfg, job.info, job.inputs)
    with closed_on_error(logger.experiment, logger.run_id):  # Lightning ends it FINISHED before record_seed
        settings = TrainerSettings(precision=cfg.precision, accelerator=cfg.accelerator, grad_clip=cfg.grad_clip,
                                   log_every_steps=cfg.log_every_steps, max_steps=cfg.max_steps or -1,
                                   max_epochs=cfg.epochs)
        trainer = build_trainer(out, settings, logger, progress=job.progress)
        start = time.perf_counter()
        _fit(job, module, trainer, seed)
        main_key = job.recorder.main_key  # the best evaluation by it: the earliest among equals
        final, best = module.history[-1], max(module.history, key=lambda entry: (entry.scores[main_key], -entry.step))
        result = SeedResult(seed=seed, scores=final.scores, best_scores=best.scores, best_epoch=best.epoch,
                            collapsed=final.collapsed[job.spec.headline_split], seconds=time.perf_counter() - start,
                            history=[dataclasses.asdict(entry) for entry in module.history], run_id=logger.run_id)
        record = module.evaluators[job.spec.headline_split].record()
        for name, text in record.files.items():  # predictions, SQuAD v2.0's na_probs.json: kept in the seed's folder
            write_text(out / name, text)
        job.recorder.record_seed(result, job.info, record, [out / name for name in record.files])
        if record.warning:
            print(f"{job.spec.name} seed {seed}: {record.warning}", file=sys.stderr, flush=True)
        return result


def _fit(job: _Job, module: FinetuneModule, trainer: L.Trainer, seed: int) -> None:
    data, cfg = job.data, job.cfg
    evals = [loader(data, split, cfg.eval_batch_size, num_workers=cfg.num_workers) for split in data.evals.values()]
    with quiet_fit():
        train = loader(data, data.train, cfg.batch_size, seed=seed, num_workers=cfg.num_workers)
        trainer.fit(module, train_dataloaders=train, val_dataloaders=evals)
        if not module.history or module.history[-1].step != trainer.global_step:
            trainer.validate(module, dataloaders=evals, verbose=False)  # max_steps ended the run inside an epoch


def _data_inputs(spec: TaskSpec, data_dir: Path | None) -> list[DataInput]:
    """The task's files as MLflow datasets, each with its content fingerprint (none when read from the hub)."""
    paths = task_files(spec, data_dir)
    return [DataInput(f"{spec.name} {split.name}", fingerprint(path), str(path),
                      "train" if split.name == "train" else "eval")
            for split, path in zip(spec.splits, paths, strict=False) if path.is_file()]


# --- Checks, data and cache folders ----------------------------------------------------------------------------


def load_finetune_config(spec: TaskSpec, *, config_file: Path | None = None, preset: str | None = None,
                         overrides: Sequence[str] | None = None) -> FinetuneConfig:
    """The resolved hyperparameters of ``spec`` (:func:`bvr.config.resolve_finetune` over :func:`load_config`):
    the config file's and the preset's ``finetune:`` sections, then the ``--set`` overrides."""
    cfg = load_config(Path(config_file) if config_file else None, preset=preset, overrides=list(overrides or []))
    check_task_names(list(cfg.finetune.per_task), list(TASKS), "finetune.per_task")
    return resolve_finetune(cfg, spec)


def _seed_list(seeds: int | Sequence[int]) -> list[int]:
    if isinstance(seeds, int):
        if seeds < 1:
            raise BvrError(f"need at least one seed, got {seeds}", where="--seeds")
        return list(range(seeds))
    if not seeds or len(set(seeds)) != len(seeds):
        raise BvrError(f"seeds must be distinct and not empty, got {list(seeds)}", where="--seeds")
    return list(seeds)


def _seed_dirs(root: Path, spec: TaskSpec, cfg: FinetuneConfig, identity: str, data_dir: Path | None,
               from_scratch: bool, seeds: list[int]) -> dict[int, Path]:
    """Each seed's cache folder, named by everything its result depends on, the task files' content included but not
    the data folder's path."""
    data = fingerprint(*task_files(spec, data_dir)) if data_dir else None  # None: read from the hub
    parts = {"version": CACHE_VERSION, "checkpoint": identity, "task": spec.name, "from_scratch": from_scratch,
             "data": data, "finetune": cfg.hashed()}
    return {seed: cache_dir(root, f"{spec.name}-seed{seed}", {**parts, "seed": seed}) for seed in seeds}
