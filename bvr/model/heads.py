"""The pretraining heads, with Hugging Face's module names: BERT's MLM and NSP heads, RoBERTa's MLM head, and
SpanBERT's span-boundary head (no Hugging Face counterpart: left out of exported folders). Every decoder is a
:class:`TiedDecoder`; :class:`~bvr.model.pretraining_model.PretrainingModel` joins the heads to the encoder.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bvr.model.encoder_config import EncoderConfig
from bvr.model.losses import IGNORE_INDEX


class TiedDecoder(nn.Module):
    """The MLM output projection: its ``weight`` *is* the word embedding and its ``bias`` the head's ``bias``.

    Shared objects, as HF ties them: under both names in ``state_dict()``, once in ``parameters()``, and left alone
    by :func:`init_weights` (not an ``nn.Linear``), so the embedding keeps its own initialisation.
    """

    def __init__(self, embedding: nn.Embedding, bias: nn.Parameter) -> None:
        super().__init__()
        self.weight = embedding.weight  # (vocab, hidden)
        self.bias = bias  # (vocab,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)  # (..., vocab)


class HeadTransform(nn.Module):
    """Dense, GELU, LayerNorm before the decoder (HF ``cls.predictions.transform``)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


class TiedHead(nn.Module):
    """A head whose logits, (..., vocab), are its :class:`TiedDecoder` over its ``features``, (..., hidden)."""

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.features(*inputs))


class BertLMPrediction(TiedHead):
    """BERT's MLM head (HF ``cls.predictions``): transform, then the tied decoder plus an output bias; no transform
    when ``config.head_transform`` is False."""

    def __init__(self, config: EncoderConfig, embedding: nn.Embedding) -> None:
        super().__init__()
        self.transform = HeadTransform(config) if config.head_transform else None
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.decoder = TiedDecoder(embedding, self.bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """(..., hidden) -> (..., hidden) states the decoder reads."""
        return x if self.transform is None else self.transform(x)


class BertPretrainingHeads(nn.Module):
    """BERT's heads under ``cls``: ``predictions`` (MLM) and, with NSP, ``seq_relationship``. Without an
    ``embedding`` the next-sentence head alone (a roberta-family model trained with NSP; HF ``BertOnlyNSPHead``)."""

    def __init__(self, config: EncoderConfig, embedding: nn.Embedding | None, sentence_head: bool) -> None:
        super().__init__()
        self.predictions = None if embedding is None else BertLMPrediction(config, embedding)
        self.seq_relationship = nn.Linear(config.hidden_size, 2) if sentence_head else None


class RobertaLMHead(TiedHead):
    """RoBERTa's MLM head (HF ``lm_head``): dense, GELU, layer_norm, tied decoder plus bias; only the decoder when
    ``config.head_transform`` is False."""

    def __init__(self, config: EncoderConfig, embedding: nn.Embedding) -> None:
        super().__init__()
        transform = config.head_transform
        self.dense = nn.Linear(config.hidden_size, config.hidden_size) if transform else None
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if transform else None
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.decoder = TiedDecoder(embedding, self.bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """(..., hidden) -> (..., hidden) states the decoder reads."""
        return x if self.dense is None else self.layer_norm(F.gelu(self.dense(x)))


def span_boundaries(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokens just outside each masked span (a maximal run of positions whose label is not -100).

    ``(left, right)``, (batch, seq) long: at a masked position, the positions before and after its run; elsewhere
    the position itself. A run touching the row's edge is clamped to it (never in training: CLS/BOS and SEP/EOS are
    never masked).

    >>> labels = torch.tensor([[-100, 5, 6, -100, 7, -100, -100]])
    >>> left, right = span_boundaries(labels)
    >>> left.tolist(), right.tolist()
    ([[0, 0, 0, 3, 3, 5, 6]], [[0, 3, 3, 3, 5, 5, 6]])
    """
    masked = labels.ne(IGNORE_INDEX)  # (batch, seq)
    seq = labels.shape[1]
    positions = torch.arange(seq, device=labels.device).expand_as(labels)  # (batch, seq)
    # The last unmasked position at or before each position (the run's left boundary at a masked one) ...
    left = torch.where(masked, -1, positions).cummax(dim=1).values.clamp(min=0)
    # ... and the first unmasked position at or after it, by the same scan over the reversed row.
    right = torch.where(masked, seq, positions).flip(1).cummin(dim=1).values.flip(1).clamp(max=seq - 1)
    return left, right


class SpanBoundaryHead(TiedHead):
    """SpanBERT's span-boundary objective (Joshi et al., 2020, section 3.2): a masked token x_i of the span
    x_s..x_e is predicted from the encodings of x_(s-1) and x_(e+1) and a relative position embedding p_(i-s+1),
    through two feed-forward layers with GeLU and LayerNorm, then the MLM's tied output embedding (own bias). The
    relative positions get ``max_position_embeddings`` embeddings.
    """

    def __init__(self, config: EncoderConfig, embedding: nn.Embedding) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, hidden)
        self.dense1 = nn.Linear(3 * hidden, hidden)
        self.layer_norm1 = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.dense2 = nn.Linear(hidden, hidden)
        self.layer_norm2 = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.decoder = TiedDecoder(embedding, self.bias)

    def features(self, left: torch.Tensor, right: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
        """(n, hidden) boundary states and (n,) offsets in the span (0 for its first token) -> (n, hidden)."""
        offset = offset.clamp(max=self.position_embeddings.num_embeddings - 1)
        x = torch.cat([left, right, self.position_embeddings(offset)], dim=-1)  # (n, 3 * hidden)
        x = self.layer_norm1(F.gelu(self.dense1(x)))
        return self.layer_norm2(F.gelu(self.dense2(x)))  # (n, hidden)
