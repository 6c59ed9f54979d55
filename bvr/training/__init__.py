"""What pretraining and fine-tuning share around Lightning: the one Trainer factory, its progress bar, the
precision and accelerator checks and the MLflow logger of a training job (:mod:`bvr.training.trainer`); AdamW with
BERT's parameter groups and schedule, the clipping bf16-mixed needs and the non-finite-loss stop
(:mod:`bvr.training.optim`). The losses are in :mod:`bvr.model.losses`, beside the heads that use them. Nothing here
imports :mod:`bvr.pretraining` or :mod:`bvr.tasks`, which both build on this.
"""

from bvr.training.optim import NonFiniteLoss, adamw, check_finite, clip_unscaled, linear_schedule, parameter_groups
from bvr.training.trainer import (
    TrainerSettings,
    build_trainer,
    check_accelerator,
    quiet_fit,
    resolve_precision,
    resolve_strategy,
    training_logger,
)

__all__ = ["NonFiniteLoss", "TrainerSettings", "adamw", "build_trainer", "check_accelerator", "clip_unscaled",
           "quiet_fit", "check_finite", "linear_schedule", "parameter_groups", "resolve_precision", "resolve_strategy",
           "training_logger"]
