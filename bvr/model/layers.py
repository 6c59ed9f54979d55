"""The encoder's layers as BERT computes them: the reference path, to read beside Hugging Face's ``modeling_bert.py``.

Each class is the Hugging Face module its docstring names, with its parameter names and eager computation, plus
RoBERTa's position numbering (:meth:`Embeddings.position_ids`) and pre-LayerNorm blocks (the layout of Hugging Face's
``RobertaPreLayerNorm``). :mod:`bvr.model.fast` subclasses these modules to compute the same function in fewer passes
(what runs by default; ``Encoder(config, fast=False)`` runs this file); tests/test_fast.py holds the two paths equal.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bvr.model.encoder_config import EncoderConfig


def layer_norm(config: EncoderConfig) -> nn.LayerNorm:
    return nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


def key_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """A (batch, seq) 1/0 padding mask as attention's boolean (batch, 1, 1, seq), True at keys to attend to; None
    where nothing is padded (SDPA's fastest, unmasked kernel needs None). Padding *queries* still attend to the real
    tokens, as in Hugging Face's models, so no softmax row is empty."""
    if attention_mask is None or bool(attention_mask.all()):
        return None
    return attention_mask.bool()[:, None, None, :]


class Embeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout (HF ``BertEmbeddings``); without the
    LayerNorm when ``config.embedding_norm`` is False."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.family = config.family
        self.pad_token_id = config.pad_token_id
        # padding_idx as in HF: the pad row starts at zero and gets no gradient from lookups.
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        pos_pad = config.pad_token_id if config.family == "roberta" else None
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size, padding_idx=pos_pad)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = layer_norm(config) if config.embedding_norm else None  # None: the sum as it is (GPT-2)
        self.dropout = nn.Dropout(config.dropout)

    def position_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Position of each token: ``(1, seq)`` from 0 for bert; ``(batch, seq)`` for roberta, which (as fairseq) counts
        only non-pad tokens from ``pad + 1`` and gives pad tokens ``pad`` itself, the zero, frozen padding row."""
        if self.family == "bert":
            return torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        not_pad = input_ids.ne(self.pad_token_id).long()  # (batch, seq)
        return torch.cumsum(not_pad, dim=1) * not_pad + self.pad_token_id

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Embed ``input_ids`` (batch, seq) into (batch, seq, hidden); ``token_type_ids`` None means type 0."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)  # (batch, seq)
        words = self.word_embeddings(input_ids)  # (batch, seq, hidden)
        positions = self.position_embeddings(self.position_ids(input_ids))  # (1 or batch, seq, hidden)
        types = self.token_type_embeddings(token_type_ids)  # (batch, seq, hidden)
        x = words + positions + types  # (batch, seq, hidden)
        return self.dropout(x if self.LayerNorm is None else self.LayerNorm(x))  # (batch, seq, hidden)


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention (HF ``BertSelfAttention``: query, key, value)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_dropout)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq, hidden) -> (batch, heads, seq, head_dim), a view."""
        return x.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Attend over ``x`` (batch, seq, hidden); ``mask`` (batch, 1, 1, seq) is True at keys to attend to."""
        q = self.split_heads(self.query(x))  # (batch, heads, seq, head_dim)
        k = self.split_heads(self.key(x))  # (batch, heads, seq, head_dim)
        v = self.split_heads(self.value(x))  # (batch, heads, seq, head_dim)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (batch, heads, seq, seq)
        if mask is not None:
            # finfo.min rather than -inf, as HF: a row with no real key (an all-padding sequence) stays finite.
            scores = scores.masked_fill(mask.logical_not(), torch.finfo(scores.dtype).min)  # (batch, heads, seq, seq)
        probs = self.dropout(scores.softmax(dim=-1))  # (batch, heads, seq, seq)
        context = probs @ v  # (batch, heads, seq, head_dim)
        return context.transpose(1, 2).flatten(2)  # (batch, seq, hidden)


class ResidualOutput(nn.Module):
    """Projection, dropout, residual add and, post-LayerNorm, the LayerNorm (HF ``BertSelfOutput``, ``BertOutput``);
    a pre-LayerNorm block's sits before the sub-layer instead (``Attention.LayerNorm``, ``Intermediate.LayerNorm``)."""

    def __init__(self, in_size: int, config: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(in_size, config.hidden_size)
        self.LayerNorm = None if config.pre_norm else layer_norm(config)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """(batch, seq, in_size) sub-layer output and (batch, seq, hidden) residual -> (batch, seq, hidden)."""
        y = self.dropout(self.dense(x)) + residual  # (batch, seq, hidden)
        return y if self.LayerNorm is None else self.LayerNorm(y)


class Attention(nn.Module):
    """Self-attention with its output block (HF ``BertAttention``: ``self`` and ``output``)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.LayerNorm = layer_norm(config) if config.pre_norm else None  # pre-LayerNorm: before attention
        self.self = SelfAttention(config)
        self.output = ResidualOutput(config.hidden_size, config)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """(batch, seq, hidden) -> (batch, seq, hidden)."""
        normed = x if self.LayerNorm is None else self.LayerNorm(x)  # (batch, seq, hidden)
        return self.output(self.self(normed, mask), x)  # (batch, seq, hidden)


class Intermediate(nn.Module):
    """First feed-forward projection and exact (erf) GELU (HF ``BertIntermediate``)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.LayerNorm = layer_norm(config) if config.pre_norm else None  # pre-LayerNorm: before the feed-forward
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., hidden) -> (..., intermediate)."""
        if self.LayerNorm is not None:
            x = self.LayerNorm(x)
        return F.gelu(self.dense(x))  # (..., intermediate)


class Layer(nn.Module):
    """One transformer layer (HF ``BertLayer``): attention, then the feed-forward, each a residual block."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.attention = Attention(config)
        self.intermediate = Intermediate(config)
        self.output = ResidualOutput(config.intermediate_size, config)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """(batch, seq, hidden) -> (batch, seq, hidden); ``mask`` as :meth:`SelfAttention.forward`'s."""
        x = self.attention(x, mask)  # (batch, seq, hidden)
        return self.output(self.intermediate(x), x)  # (batch, seq, hidden)


class LayerStack(nn.Module):
    """The layers, held as ``layer.{i}`` (HF ``BertEncoder``)."""

    layer_class: type[Layer] = Layer
    """What each layer is built as (:class:`bvr.model.fast.FastLayer` in the fast path)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(self.layer_class(config) for _ in range(config.num_layers))

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                selected: torch.Tensor | None = None) -> torch.Tensor:
        """The last layer's states of the embeddings ``x``, (batch, seq, hidden), or with ``selected`` (batch, seq)
        boolean only those there, (n_selected, hidden) in row-major order; ``attention_mask`` 1 at real tokens."""
        x = self.every_layer(x, attention_mask)[-1]  # (batch, seq, hidden)
        return x if selected is None else x[selected]  # (n_selected, hidden)

    def every_layer(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Each layer's output, first to last: ``num_layers`` tensors of (batch, seq, hidden)."""
        mask = key_mask(attention_mask)  # (batch, 1, 1, seq) or None
        states = []
        for layer in self.layer:
            x = layer(x, mask)  # (batch, seq, hidden)
            states.append(x)
        return states
