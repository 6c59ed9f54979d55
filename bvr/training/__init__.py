"""What pretraining and fine-tuning share around Lightning: the Trainer, AdamW and its schedule, precision, the
non-finite-loss stop.

- :mod:`bvr.training.trainer`: :func:`build_trainer`, the one Trainer factory, its :class:`TrainingBar`,
  :func:`quiet_fit` and :func:`check_accelerator`.
- :mod:`bvr.training.optim`: :func:`adamw` over :func:`parameter_groups` (no decay on biases and LayerNorm) with
  the :func:`linear_schedule` (warm-up, then linear decay to 0), and :func:`clip_unscaled` (clipping that bf16-mixed
  with a fused optimiser needs).
- :mod:`bvr.training.precision`: :func:`resolve_precision` (``auto`` -> bf16-mixed on a GPU that has it, else
  32-true).
- :mod:`bvr.training.guard`: :class:`NonFiniteLoss` and :func:`check_finite`.
- :mod:`bvr.training.runs`: :func:`training_logger`, the MLflow run of a training job, named and tagged by
  :mod:`bvr.tracking`'s rules.

The losses themselves (``IGNORE_INDEX``, cross-entropy) are in :mod:`bvr.model.losses`, where the model's heads use
them too. Nothing here imports :mod:`bvr.pretraining` or :mod:`bvr.tasks`, which both build on this.
"""

from bvr.training.guard import NonFiniteLoss, check_finite
from bvr.training.optim import adamw, clip_unscaled, linear_schedule, no_decay, parameter_groups
from bvr.training.precision import resolve_precision
from bvr.training.runs import training_logger
from bvr.training.trainer import TrainerSettings, build_trainer, check_accelerator, quiet_fit, resolve_strategy

__all__ = [
    "NonFiniteLoss",
    "TrainerSettings",
    "adamw",
    "build_trainer",
    "check_accelerator",
    "clip_unscaled",
    "quiet_fit",
    "check_finite",
    "linear_schedule",
    "no_decay",
    "parameter_groups",
    "resolve_precision",
    "resolve_strategy",
    "training_logger",
]
