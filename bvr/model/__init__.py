"""The encoder and its pretraining heads as plain ``torch.nn`` modules, with Hugging Face's parameter names.

- :mod:`bvr.model.encoder_config`: :class:`ModelConfig` (the ``model`` section: every knob, documented and checked
  once) and :class:`EncoderConfig` (those knobs with the tokenizer's vocabulary and the family's constants).
- :mod:`bvr.model.layers`: embeddings, self-attention and feed-forward as BERT computes them (the reference path).
- :mod:`bvr.model.fast`: what runs by default, the same function in fewer passes (fused projections, folded
  dropout scales, packing, selection); :mod:`bvr.model.cpu`: dropout as the CPU computes it.
- :mod:`bvr.model.encoder`: :class:`Encoder`, which picks one path or the other (``fast=``).
- :mod:`bvr.model.heads`: the MLM, NSP and span-boundary heads; :mod:`bvr.model.pretraining_model`:
  :class:`PretrainingModel` (encoder + sparse MLM head + optional NSP and SBO), its losses and
  :func:`count_parameters`.
- :mod:`bvr.model.losses`: :data:`IGNORE_INDEX` and the cross-entropy helpers the heads and the tasks share.
- :mod:`bvr.model.hf`: weights and configs to and from Hugging Face folders.

Nothing here imports Lightning, MLflow or ``transformers``. The names below load on first use
(``bvr.model.PretrainingModel``), so that the configuration system reads the ``model`` section
(:mod:`bvr.model.encoder_config`) without loading torch.
"""

from importlib import import_module
from typing import Any

_HOMES = {
    "IGNORE_INDEX": "bvr.model.losses",
    "Encoder": "bvr.model.encoder",
    "EncoderConfig": "bvr.model.encoder_config",
    "ModelConfig": "bvr.model.encoder_config",
    "PretrainingLoss": "bvr.model.pretraining_model",
    "PretrainingModel": "bvr.model.pretraining_model",
    "PretrainingOutput": "bvr.model.pretraining_model",
    "count_parameters": "bvr.model.pretraining_model",
}
"""Each name this package exports -> the module that defines it."""

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'bvr.model' has no attribute '{name}'")
