"""The MLflow run of one training job, named and tagged the same way by pretraining and fine-tuning."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning.pytorch.loggers import MLFlowLogger

    from bvr.tracking import RunContext


def training_logger(context: RunContext, *, stage: str, task: str | None = None, seed: int | None = None,
                    extra: Mapping[str, Any] | None = None, run_id: str | None = None) -> MLFlowLogger:
    """The Lightning logger of one training run in the working directory's store.

    The run goes to the context's experiment, nested under its parent run; it is named ``LABEL/STAGE[/TASK][/seedN]``
    (:func:`bvr.tracking.run_name`) and tagged with the same parts, the context's tags and ``extra``
    (:func:`bvr.tracking.run_tags`); ``run_id`` reopens a resumed run (:func:`bvr.logger.make_logger`). The context
    comes with its experiment and label filled in (:meth:`bvr.tracking.RunContext.with_defaults`).
    """
    # Imported here: MLflow is needed to log, not to train, so the model and Trainer code import without it (the
    # GPU check runs on machines that have torch and Lightning only).
    from bvr.logger import make_logger
    from bvr.tracking import run_name, run_tags

    assert context.experiment and context.label, "training_logger needs a context with its defaults filled in"
    return make_logger(context.experiment, run_name=run_name(context.label, stage, task, seed),
                       tags=run_tags(context, stage=stage, task=task, seed=seed, extra=extra),
                       parent_run_id=context.parent_run_id, workdir=Path.cwd(), run_id=run_id)
