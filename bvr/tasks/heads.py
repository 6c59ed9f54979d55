"""Task heads on the shared encoder, and the fine-tuned model (encoder + head), as plain ``nn.Module`` s.

The sequence head's dense + tanh is the checkpoint's pooler where it has one (BERT trained with NSP, or a BertModel
folder, which stores a pooler without the NSP head), else a fresh one: Hugging Face RoBERTa folders carry an unused
pooler that loading drops, so they get a fresh one, as ``RobertaClassificationHead`` does.
"""

from __future__ import annotations

import torch
from torch import nn

from bvr.model.cpu import Dropout
from bvr.model.encoder import Encoder, Pooler, init_weights
from bvr.model.encoder_config import EncoderConfig


def _fresh(module: nn.Module, config: EncoderConfig) -> nn.Module:
    """``module`` with BERT's initialisation (normal weights, zero biases)."""
    module.apply(lambda m: init_weights(m, config.initializer_range))
    return module


class SequenceHead(nn.Module):
    """First token -> dense + tanh (a pooler) -> dropout -> linear: (batch, seq, hidden) to (batch, outputs), or
    (batch,) for regression's one output; a pretrained ``pooler`` to start from, else a fresh one."""

    def __init__(self, config: EncoderConfig, num_outputs: int, pooler: Pooler | None = None) -> None:
        super().__init__()
        # The output layer is drawn first, so its weights do not depend on whether the pooler is drawn too.
        out = _fresh(nn.Linear(config.hidden_size, num_outputs), config)
        self.pooler = pooler if pooler is not None else _fresh(Pooler(config), config)
        self.dropout = Dropout(config.dropout)
        self.out = out
        self.squeeze = num_outputs == 1

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.out(self.dropout(self.pooler(hidden[:, 0])))  # (batch, outputs)
        return logits.squeeze(-1) if self.squeeze else logits


class TokenHead(nn.Module):
    """Dropout and a linear layer at every token: (batch, seq, hidden) to (batch, seq, outputs); without dropout and
    with two outputs, start and end scores, it is BERT's SQuAD head."""

    def __init__(self, config: EncoderConfig, num_outputs: int, dropout: bool = True) -> None:
        super().__init__()
        self.dropout = Dropout(config.dropout) if dropout else nn.Identity()
        self.out = _fresh(nn.Linear(config.hidden_size, num_outputs), config)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(hidden))


class FinetuneModel(nn.Module):
    def __init__(self, encoder: Encoder, head: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The head's scores for a collated batch (``input_ids``, ``attention_mask``, ``token_type_ids``)."""
        hidden = self.encoder(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        return self.head(hidden)  # (batch, ...) as the head shapes it


def take_pooler(encoder: Encoder) -> Pooler | None:
    """Move the encoder's pooler (if any) out of it, for the sequence head to own; the encoder no longer pools."""
    pooler, encoder.pooler = encoder.pooler, None
    return pooler
