"""The transformer layers of the encoder, with Hugging Face's module names: self-attention on SDPA (with only the
wanted positions computed in the last layer) and the GELU feed-forward, with post-LayerNorm (BERT, RoBERTa) or
pre-LayerNorm residual blocks (``EncoderConfig.norm``; the names of Hugging Face's ``RobertaPreLayerNorm``). Dropout
and what the CPU does differently are in :mod:`bvr.model.cpu`."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bvr.model import cpu
from bvr.model.cpu import Dropout, drop, fold_into, folded_scale
from bvr.model.encoder_config import EncoderConfig


class Selection(NamedTuple):
    """Positions whose last-layer output is wanted, in row-major (batch, seq) order.

    Built by :meth:`Selection.from_mask`; ``slots`` places each selected token in a (batch, width) grid of queries so
    that attention stays batched although rows select different numbers of tokens.
    """

    rows: torch.Tensor
    """(n,) batch index of each selected token."""
    cols: torch.Tensor
    """(n,) sequence position of each selected token."""
    slots: torch.Tensor
    """(n,) index of the token among its row's selected tokens."""
    width: int
    """Most tokens selected in one row."""

    @classmethod
    def from_mask(cls, selected: torch.Tensor) -> Selection:
        """Selection of the True entries of a (batch, seq) boolean mask."""
        rows, cols = selected.nonzero(as_tuple=True)  # (n,), (n,): row-major, like selected-mask indexing
        slots = (selected.cumsum(dim=1) - 1)[rows, cols]
        width = int(slots.max()) + 1 if slots.numel() else 0
        return cls(rows, cols, slots, width)

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq, ...) -> (n, ...) at the selected positions."""
        return x[self.rows, self.cols]


MIN_PADDING = 0.05
"""Share of padded positions from which :meth:`Packing.from_mask` packs a batch: below it, the gathers and scatters
around attention cost about what packing saves on CPU (docs/benchmarks.md, "What each change gave on its own")."""


def packed_length(count: int) -> int:
    """``count`` real tokens rounded up to one of a few lengths per octave: a multiple of 2**(bits - 4), at least 64.

    Packed tensors then come in a few dozen sizes, which the C allocator reuses from step to step; with the exact
    count every batch's tensors have new sizes and glibc's heap fragments (a tiny pretraining's resident peak grew
    by half: docs/benchmarks.md). The rounding computes at most 1/8 more tokens, padding positions whose states are
    never read.

    >>> [packed_length(n) for n in (1, 64, 65, 700, 768, 3700)]
    [64, 64, 128, 704, 768, 3840]
    """
    step = max(64, 2 ** (count.bit_length() - 4))
    return -(-count // step) * step


class Packing(NamedTuple):
    """The real tokens of a padded batch, so that position-wise work runs on them alone.

    A layer's projections, feed-forward, LayerNorms and dropouts act on each position by itself, so they can run on
    the (n, hidden) real tokens instead of the (batch, seq, hidden) padded grid: with 60% padding (dynamic padding
    of SST-2 or CoNLL-2003 batches) that skips 60% of their GEMMs. Only attention needs the grid: its q, k and v are
    scattered into it (zeros at padding, which the mask hides) and its output gathered back. Built by
    :meth:`Packing.from_mask`; :class:`LayerStack` packs and unpacks.
    """

    index: torch.Tensor
    """(n,) flat positions of the real tokens in the (batch * seq) grid, row-major."""
    batch: int
    seq: int

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor | None) -> Packing | None:
        """Packing of the 1 entries of a (batch, seq) mask, plus the first padding positions that bring it to
        :func:`packed_length`; None when under :data:`MIN_PADDING` of the mask is padding.

        >>> mask = torch.ones(2, 64, dtype=torch.long)
        >>> mask[1, 4:] = 0  # 68 real tokens, packed as 128
        >>> packing = Packing.from_mask(mask)
        >>> len(packing.index), packing.index[-1].item()
        (128, 127)
        >>> Packing.from_mask(torch.ones(2, 3)) is None
        True
        """
        if attention_mask is None:
            return None
        real = attention_mask.flatten().bool()
        count = int(real.sum())
        if count > (1.0 - MIN_PADDING) * real.numel():
            return None
        fill = min(real.numel(), packed_length(count)) - count
        if fill:
            real = real.clone()
            real[real.logical_not().nonzero().squeeze(1)[:fill]] = True
        return cls(real.nonzero().squeeze(1), *attention_mask.shape)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq, ...) -> (n, ...), the real tokens in row-major order."""
        return x.flatten(0, 1).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """(n, ...) -> (batch, seq, ...), zeros at the padding left out of the packing."""
        grid = x.new_zeros(self.batch * self.seq, *x.shape[1:])
        return grid.index_copy(0, self.index, x).view(self.batch, self.seq, *x.shape[1:])


class SelfAttention(nn.Module):
    """Multi-head self-attention projections (HF ``attention.self``: query, key, value)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        self.attention_dropout = config.attention_dropout
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def fused_qkv(self, value_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """Weight (3 * hidden, hidden) and bias (3 * hidden,) of q, k and v in one, the query pre-scaled.

        Concatenating per call costs a few hundred KB and keeps HF's separate parameters, while the projection runs
        as one wide GEMM. Folding 1/sqrt(head_dim) into the query's weights scales (hidden, hidden) numbers instead of
        a (batch, heads, seq, head_dim) activation; ``value_scale`` folds attention dropout's 1 / (1 - p) into the
        values the same way (``dropout(probs) @ v == drop(probs) @ (v / (1 - p))``).
        """
        scale = self.head_dim**-0.5
        value_weight, value_bias = self.value.weight, self.value.bias
        if value_scale != 1.0:
            value_weight, value_bias = value_weight * value_scale, value_bias * value_scale
        weight = torch.cat((self.query.weight * scale, self.key.weight, value_weight))
        bias = torch.cat((self.query.bias * scale, self.key.bias, value_bias))
        return weight, bias

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, len, hidden) view -> (batch, heads, len, head_dim) view, no copy."""
        return x.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, heads, len, head_dim) -> (batch, len, hidden)."""
        return x.transpose(1, 2).flatten(2)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        selection: Selection | None = None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        """Attend over ``x`` (batch, seq, hidden); ``mask`` (batch, 1, 1, seq) is True at keys to attend to.

        Returns (batch, seq, hidden), or (n, hidden) for the queries of ``selection`` only. With a ``packing``, ``x``
        and the result are its (n, hidden) real tokens.
        """
        hidden = x.shape[-1]
        dropout_p = self.attention_dropout if self.training else 0.0
        value_scale = folded_scale(dropout_p, self.training, x)
        weight, bias = self.fused_qkv(value_scale)
        scaled = value_scale != 1.0  # attend drops without scaling: the values carry the scale
        if selection is None:
            qkv = F.linear(x, weight, bias)  # (batch, seq, 3 * hidden), or (n, 3 * hidden) packed
            if packing is not None:
                qkv = packing.unpack(qkv)
            # split's backward writes the three gradients straight into one (batch, seq, 3 * hidden) tensor.
            q, k, v = map(self._heads, qkv.split(hidden, dim=-1))
            out = self._merge(attend(q, k, v, mask, dropout_p, scaled))  # (batch, seq, hidden)
            return out if packing is None else packing.pack(out)
        k, v = map(self._heads, F.linear(x, weight[hidden:], bias[hidden:]).split(hidden, dim=-1))
        q = F.linear(selection.gather(x), weight[:hidden], bias[:hidden])  # (n, hidden)
        # Rows select different numbers of tokens: lay the queries out as (batch, width) so attention stays batched;
        # the zero queries filling the gaps attend harmlessly and are dropped.
        grid = q.new_zeros(x.shape[0], selection.width, hidden).index_put((selection.rows, selection.slots), q)
        out = self._merge(attend(self._heads(grid), k, v, mask, dropout_p, scaled))  # (batch, width, hidden)
        return out[selection.rows, selection.slots]  # (n, hidden)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    dropout_p: float,
    values_scaled: bool = False,
) -> torch.Tensor:
    """Softmax attention of pre-scaled queries (batch, heads, q_len, head_dim) over keys and values.

    SDPA, its dropout included, everywhere but in CPU training: off the CPU its flash and memory-efficient kernels
    apply (``mask`` is None where nothing is padded, as flash requires). With attention dropout on CPU, SDPA falls
    back to a generic path that also scans for fully masked rows; the explicit form below does the same arithmetic
    in fewer passes. With ``values_scaled`` (CPU only) the kept probabilities are not scaled: the caller folded
    1 / (1 - p) into ``v`` (:func:`folded_scale`).
    """
    if dropout_p == 0.0 or not cpu.cpu_kernels(q):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=1.0)
    scores = q @ k.transpose(-1, -2)  # (batch, heads, q_len, k_len)
    if mask is not None:
        # finfo.min rather than -inf: a row with no real key (an all-padding sequence) stays finite, as in SDPA.
        # In place: the matmul's backward does not need its output.
        scores = scores.masked_fill_(mask.logical_not(), torch.finfo(scores.dtype).min)
    probs = scores.softmax(dim=-1)
    return (drop if values_scaled else cpu.dropout)(probs, dropout_p, True) @ v


def layer_norm(config: EncoderConfig) -> nn.LayerNorm:
    return nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


class ResidualOutput(nn.Module):
    """Projection, dropout, residual add and, post-LayerNorm, the LayerNorm (HF ``attention.output`` and ``output``).

    Pre-LayerNorm blocks have no LayerNorm here: it sits before the sub-layer (``Attention.LayerNorm``,
    ``Intermediate.LayerNorm``), as in Hugging Face's ``RobertaPreLayerNorm``.
    """

    def __init__(self, in_size: int, config: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(in_size, config.hidden_size)
        self.LayerNorm = None if config.pre_norm else layer_norm(config)
        self.dropout = Dropout(config.dropout)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        p = self.dropout.p
        y = F.linear(x, *fold_into(p, self.training, x, self.dense.weight, self.dense.bias))
        y = drop(y, p, self.training) + residual  # (..., hidden)
        return y if self.LayerNorm is None else self.LayerNorm(y)


class Attention(nn.Module):
    """Self-attention with its output block (HF ``attention``: ``self`` and ``output``)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.LayerNorm = layer_norm(config) if config.pre_norm else None  # pre-LayerNorm: before attention
        self.self = SelfAttention(config)
        self.output = ResidualOutput(config.hidden_size, config)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        selection: Selection | None = None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        residual = x if selection is None else selection.gather(x)
        normed = x if self.LayerNorm is None else self.LayerNorm(x)  # keys and values from every position
        return self.output(self.self(normed, mask, selection, packing), residual)


class Intermediate(nn.Module):
    """First feed-forward projection and exact (erf) GELU (HF ``intermediate``)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.LayerNorm = layer_norm(config) if config.pre_norm else None  # pre-LayerNorm: before the feed-forward
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.LayerNorm is not None:
            x = self.LayerNorm(x)
        return F.gelu(self.dense(x))  # (..., intermediate)


class Layer(nn.Module):
    """One transformer layer (HF ``BertLayer``), post- or pre-LayerNorm.

    Given a :class:`Selection`, only the selected tokens are carried past the keys and values: their queries,
    attention output and feed-forward, (n, hidden). The result equals the full layer's at those tokens. Given a
    :class:`Packing`, the input and output are its (n, hidden) real tokens and only attention sees the padded grid.
    """

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.attention = Attention(config)
        self.intermediate = Intermediate(config)
        self.output = ResidualOutput(config.intermediate_size, config)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        selection: Selection | None = None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        x = self.attention(x, mask, selection, packing)
        return self.output(self.intermediate(x), x)  # (batch, seq, hidden) or (n, hidden)


class LayerStack(nn.Module):
    """The layers, held as ``layer.{i}`` (HF ``BertEncoder``)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(Layer(config) for _ in range(config.num_layers))

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        selection: Selection | None = None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        """Run all layers on (batch, seq, hidden); with a selection the last one computes only the selected tokens,
        (n, hidden).

        With a ``packing`` the layers run on its tokens alone (the last one too, unless there is a selection) and the
        result is unpacked: zeros at the padding left out, where unpacked layers would give the states of queries no
        one reads.
        """
        if packing is not None:
            x = packing.pack(x)
        for layer in self.layer[:-1]:
            x = layer(x, mask, packing=packing)
        if selection is not None:
            return self.layer[-1](x if packing is None else packing.unpack(x), mask, selection)
        x = self.layer[-1](x, mask, packing=packing)
        return x if packing is None else packing.unpack(x)

    def every_layer(
        self, x: torch.Tensor, mask: torch.Tensor | None, packing: Packing | None = None
    ) -> list[torch.Tensor]:
        """Run all layers and keep each one's output: ``num_layers`` tensors of (batch, seq, hidden), first to last
        (with a ``packing``, zeros at the padding left out, as :meth:`forward`).

        A separate method, not a flag on :meth:`forward`, so the training path keeps no intermediate states alive
        beyond what autograd holds anyway.
        """
        if packing is not None:
            x = packing.pack(x)
        states = []
        for layer in self.layer:
            x = layer(x, mask, packing=packing)
            states.append(x if packing is None else packing.unpack(x))
        return states
