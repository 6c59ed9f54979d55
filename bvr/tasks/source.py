"""The checkpoint a task is fine-tuned from: its arm name (:func:`default_arm`) and a fresh encoder per seed
(:class:`EncoderSource`), and the seeded generators fine-tuning draws its initial weights from (:func:`seeded`)."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

import torch
import yaml

from bvr.model import Encoder
from bvr.model.encoder import initialize
from bvr.pretrained import Pretrained


@contextlib.contextmanager
def seeded(stream: str, seed: int) -> Iterator[None]:
    """Draw from torch's CPU generator seeded by (``stream``, ``seed``) alone, and leave the caller's state as it was.

    Fine-tuning seed ``s`` builds its encoder in stream ``"encoder"`` and its task head in stream ``"head"``: the
    head's initial weights are then a function of ``s`` alone, whatever the encoder is (pretrained or random, with
    or without a pooler) and however many numbers building it took, and the global generator the training step
    draws dropout from is the one ``seed_everything(s)`` left. The streams' seeds are distinct 64-bit hashes, so the
    head's numbers are not a copy of the start of a random encoder's (or of dropout's).

    >>> with seeded("head", 0):
    ...     a = torch.rand(2)
    >>> with seeded("head", 0):
    ...     b = torch.rand(2)
    >>> torch.equal(a, b)
    True
    """
    digest = hashlib.sha256(f"bvr-finetune-{stream}:{seed}".encode()).digest()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int.from_bytes(digest[:8], "little"))
        yield


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

    def build(self, seed: int) -> Encoder:
        """A new encoder for fine-tuning seed ``seed``, built in its own :func:`seeded` stream: a from-scratch
        encoder draws its weights from it, and neither kind touches the global generator (so the task head and
        dropout that come after do not depend on which kind, or which shape of pooler, came first)."""
        with seeded("encoder", seed):
            encoder = Encoder(self.config, add_pooler=self.has_pooler)
            if self.from_scratch:
                initialize(encoder, self.config)
            else:
                encoder.load_state_dict(self.state)
        return encoder
