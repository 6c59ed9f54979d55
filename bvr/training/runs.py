"""The MLflow run of one training job, named and tagged the same way by pretraining and fine-tuning."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning.pytorch.loggers import MLFlowLogger


def training_logger(
    experiment: str,
    *,
    arm: str,
    stage: str,
    ablation: str | None,
    task: str | None = None,
    seed: int | None = None,
    extra: Mapping[str, Any] | None = None,
    parent_run_id: str | None = None,
    run_id: str | None = None,
) -> MLFlowLogger:
    """The Lightning logger of one training run in the working directory's store.

    The run is named ``ARM/STAGE[/TASK][/seedN]`` (:func:`bvr.tracking.run_name`) and tagged with the same parts
    plus ``extra`` (:func:`bvr.tracking.run_tags`); ``parent_run_id`` nests it, ``run_id`` reopens a resumed run
    (:func:`bvr.logger.make_logger`).
    """
    # Imported here: MLflow is needed to log, not to train, so the model and Trainer code import without it (the
    # GPU check runs on machines that have torch and Lightning only).
    from bvr.logger import make_logger
    from bvr.tracking import run_name, run_tags

    tags = run_tags(ablation=ablation, arm=arm, stage=stage, task=task, seed=seed, extra=extra)
    return make_logger(experiment, run_name=run_name(arm, stage, task, seed), tags=tags, parent_run_id=parent_run_id,
                       workdir=Path.cwd(), run_id=run_id)
