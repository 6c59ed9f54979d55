"""The checkpoint a task is fine-tuned from: its identity (:func:`checkpoint_identity`, part of every seed's cache
key), its arm name (:func:`default_arm`) and a fresh encoder per seed (:class:`EncoderSource`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from bvr.cache import fingerprint
from bvr.model import Encoder
from bvr.model.encoder import init_weights
from bvr.pretrained import Pretrained


def checkpoint_identity(folder: Path) -> str:
    """A hash of the files of a model folder (weights, config, tokenizer): the same bytes, the same identity."""
    return fingerprint(folder)


def default_arm(pretrained: Pretrained, from_scratch: bool) -> str:
    """The run's ``name`` in the checkpoint's bvr.yaml, else the folder's name; ``-scratch`` for the control."""
    name = None
    record = pretrained.folder / "bvr.yaml"
    if record.is_file():
        data = yaml.safe_load(record.read_text(encoding="utf-8")) or {}
        name = data.get("name") if isinstance(data, dict) else None
    name = str(name or (pretrained.folder.parent.name if pretrained.folder.name == "model" else pretrained.folder.name))
    return f"{name}-scratch" if from_scratch else name


class EncoderSource:
    """Fresh encoders for each seed: the checkpoint's weights, or a random initialisation of the same shape."""

    def __init__(self, pretrained: Pretrained, from_scratch: bool) -> None:
        encoder = pretrained.model.encoder
        self.config = encoder.config
        self.from_scratch = from_scratch
        self.has_pooler = encoder.pooler is not None and not from_scratch
        self.state = {k: v.detach().clone() for k, v in encoder.state_dict().items()}

    def build(self) -> Encoder:
        """A new encoder (call after seeding: a from-scratch encoder draws its weights)."""
        encoder = Encoder(self.config, add_pooler=self.has_pooler)
        if self.from_scratch:
            encoder.apply(lambda module: init_weights(module, self.config.initializer_range))
        else:
            encoder.load_state_dict(self.state)
        return encoder
