"""The fine-tuning hyperparameters of a task: :func:`load_finetune_config` resolves them from the configuration
(:func:`bvr.config.resolve_finetune` over :func:`bvr.config.load_config`), :func:`optim_settings` takes the
optimiser's part."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bvr.config import FinetuneConfig, check_task_names, load_config, resolve_finetune
from bvr.tasks.module import OptimSettings
from bvr.tasks.registry import TASKS, TaskSpec


def load_finetune_config(spec: TaskSpec, *, config_file: Path | None = None, preset: str | None = None,
                         overrides: Sequence[str] | None = None) -> FinetuneConfig:
    """The resolved hyperparameters of ``spec`` (:func:`bvr.config.resolve_finetune` over :func:`load_config`):
    the config file's and the preset's ``finetune:`` sections, then the ``--set`` overrides."""
    cfg = load_config(Path(config_file) if config_file else None, preset=preset, overrides=list(overrides or []))
    check_task_names(list(cfg.finetune.per_task), list(TASKS), "finetune.per_task")
    return resolve_finetune(cfg, spec)


def optim_settings(cfg: FinetuneConfig) -> OptimSettings:
    return OptimSettings(cfg.learning_rate, cfg.weight_decay, cfg.warmup_fraction,
                         (cfg.adam_betas[0], cfg.adam_betas[1]), cfg.adam_eps)
