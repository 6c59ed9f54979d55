"""The encoder and its pretraining heads as plain ``torch.nn`` modules, with Hugging Face's parameter names.

- :mod:`bvr.model.encoder_config`: :class:`EncoderConfig` (sizes, family constants, named presets).
- :mod:`bvr.model.layers`: embeddings, self-attention and feed-forward as BERT computes them (the reference path).
- :mod:`bvr.model.fast`: what runs by default, the same function in fewer passes (fused projections, folded
  dropout scales, packing, selection); :mod:`bvr.model.cpu`: dropout as the CPU computes it.
- :mod:`bvr.model.encoder`: :class:`Encoder`, which picks one path or the other (``fast=``).
- :mod:`bvr.model.heads`: the MLM, NSP and span-boundary heads; :mod:`bvr.model.pretraining_model`:
  :class:`PretrainingModel` (encoder + sparse MLM head + optional NSP and SBO), its losses and
  :func:`count_parameters`.
- :mod:`bvr.model.losses`: :data:`IGNORE_INDEX` and the cross-entropy helpers the heads and the tasks share.
- :mod:`bvr.model.hf`: weights and configs to and from Hugging Face folders.

Nothing here imports Lightning, MLflow or ``transformers``.
"""

from bvr.model.encoder import Encoder
from bvr.model.encoder_config import EncoderConfig
from bvr.model.losses import IGNORE_INDEX
from bvr.model.pretraining_model import PretrainingLoss, PretrainingModel, PretrainingOutput, count_parameters

__all__ = [
    "IGNORE_INDEX",
    "Encoder",
    "EncoderConfig",
    "PretrainingLoss",
    "PretrainingModel",
    "PretrainingOutput",
    "count_parameters",
]
