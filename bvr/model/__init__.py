"""The encoder and its pretraining heads as plain ``torch.nn`` modules with Hugging Face's parameter names: no
Lightning, MLflow or ``transformers``. The names below load on first use, so that the configuration system reads the
``model`` section (:mod:`bvr.model.encoder_config`) without loading torch.
"""

from importlib import import_module
from typing import Any

_HOMES = {
    "IGNORE_INDEX": "bvr.model.losses", "Encoder": "bvr.model.encoder", "EncoderConfig": "bvr.model.encoder_config",
    "ModelConfig": "bvr.model.encoder_config", "PretrainingLoss": "bvr.model.pretraining_model",
    "PretrainingModel": "bvr.model.pretraining_model", "PretrainingOutput": "bvr.model.pretraining_model",
    "count_parameters": "bvr.model.pretraining_model",
}
"""Each name this package exports -> the module that defines it."""

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'bvr.model' has no attribute '{name}'")
