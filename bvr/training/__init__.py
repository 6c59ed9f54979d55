"""What pretraining and fine-tuning share around Lightning.

- :mod:`bvr.training.trainer`: :func:`build_trainer`, the one Trainer factory, its :class:`TrainingBar`,
  :func:`quiet_fit`, :func:`check_accelerator`, :func:`resolve_precision` (``auto`` -> bf16-mixed on a GPU that has
  it, else 32-true) and :func:`training_logger`, the MLflow run of a training job.
- :mod:`bvr.training.optim`: :func:`adamw` over :func:`parameter_groups` (no decay on biases and LayerNorm) with
  the :func:`linear_schedule` (warm-up, then linear decay to 0), :func:`clip_unscaled` (clipping that bf16-mixed
  with a fused optimiser needs), and :func:`check_finite`, the non-finite-loss stop.

The losses themselves (``IGNORE_INDEX``, cross-entropy) are in :mod:`bvr.model.losses`, where the model's heads use
them too. Nothing here imports :mod:`bvr.pretraining` or :mod:`bvr.tasks`, which both build on this.
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
