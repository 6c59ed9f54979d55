"""The fast path: the reference layers' function (:mod:`bvr.model.layers`) computed in fewer passes.

``Encoder(config)`` builds :class:`FastEmbeddings` and :class:`FastLayerStack` (of :class:`FastLayer`), subclasses
of the reference modules with the same state dict whose ``forward`` methods take these shortcuts (each measured in
docs/benchmarks.md, "What each change gave on its own"; tests/test_fast.py holds the two paths equal):

- q, k and v as one GEMM, the query pre-scaled (:func:`fused_qkv`);
- SDPA, but for CPU training with attention dropout (:func:`attend`);
- a cheaper dropout on the CPU, its scale folded into the map before it (:mod:`bvr.model.cpu`);
- with 5% or more of a batch padding, position-wise ops on the real tokens alone (:class:`Packing`);
- the last layer only where a loss reads its output (:class:`Selection`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from bvr.model import cpu
from bvr.model.cpu import drop, fold_into, folded_scale
from bvr.model.layers import Embeddings, Layer, LayerStack, ResidualOutput, SelfAttention, key_mask


class Selection(NamedTuple):
    """Positions whose last-layer output is wanted, in row-major (batch, seq) order (:meth:`Selection.from_mask`).
    ``slots`` places each in a (batch, width) grid of queries, so attention stays batched."""

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
        slots = (selected.cumsum(dim=1) - 1)[rows, cols]  # (n,)
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

    Packed tensors then come in a few dozen sizes, which the C allocator reuses; with the exact count glibc's heap
    fragments (a tiny pretraining's resident peak grew by half: docs/benchmarks.md). At most 1/8 more tokens run.

    >>> [packed_length(n) for n in (1, 64, 65, 700, 768, 3700)]
    [64, 64, 128, 704, 768, 3840]
    """
    step = max(64, 2 ** (count.bit_length() - 4))
    return -(-count // step) * step


class Packing(NamedTuple):
    """The real tokens of a padded batch, so that position-wise work (projections, feed-forward, LayerNorms,
    dropouts) runs on the (n, hidden) real tokens alone: with 60% padding (SST-2 or CoNLL-2003 batches) that skips
    60% of their GEMMs. Only attention needs the grid: q, k and v are scattered into it (zeros at padding, which the
    mask hides) and its output gathered back."""

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
        real = attention_mask.flatten().bool()  # (batch * seq,)
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
        grid = x.new_zeros(self.batch * self.seq, *x.shape[1:])  # (batch * seq, ...)
        return grid.index_copy(0, self.index, x).view(self.batch, self.seq, *x.shape[1:])


# --- Attention -------------------------------------------------------------------------------------------------


def fused_qkv(attention: SelfAttention, value_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight (3 * hidden, hidden) and bias (3 * hidden,) of q, k and v in one, the query pre-scaled.

    Concatenating per call keeps HF's separate parameters while the projection runs as one wide GEMM. Folding
    1/sqrt(head_dim) into the query's weights scales (hidden, hidden) numbers instead of a (batch, heads, seq, seq)
    activation; ``value_scale`` folds attention dropout's 1 / (1 - p) into the values the same way
    (``dropout(probs) @ v == drop(probs) @ (v / (1 - p))``).
    """
    scale = attention.head_dim**-0.5
    value_weight, value_bias = attention.value.weight, attention.value.bias
    if value_scale != 1.0:
        value_weight, value_bias = value_weight * value_scale, value_bias * value_scale
    weight = torch.cat((attention.query.weight * scale, attention.key.weight, value_weight))  # (3 * hidden, hidden)
    bias = torch.cat((attention.query.bias * scale, attention.key.bias, value_bias))  # (3 * hidden,)
    return weight, bias


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout_p: float,
           values_scaled: bool = False) -> torch.Tensor:
    """Softmax attention of pre-scaled queries (batch, heads, q_len, head_dim) over keys and values.

    SDPA, its dropout included, but in CPU training with attention dropout, where SDPA's generic path also scans for
    fully masked rows and the explicit form below takes fewer passes. With ``values_scaled`` (CPU only) the kept
    probabilities are not scaled: the caller folded 1 / (1 - p) into ``v`` (:func:`~bvr.model.cpu.folded_scale`).
    """
    if dropout_p == 0.0 or not cpu.cpu_kernels(q):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=1.0)
    scores = q @ k.transpose(-1, -2)  # (batch, heads, q_len, k_len)
    if mask is not None:
        # In place: the matmul's backward does not need its output.
        scores = scores.masked_fill_(mask.logical_not(), torch.finfo(scores.dtype).min)
    probs = scores.softmax(dim=-1)  # (batch, heads, q_len, k_len)
    return (drop if values_scaled else cpu.dropout)(probs, dropout_p, True) @ v  # (batch, heads, q_len, head_dim)


def self_attention(attention: SelfAttention, x: torch.Tensor, mask: torch.Tensor | None,
                   selection: Selection | None = None, packing: Packing | None = None) -> torch.Tensor:
    """:meth:`SelfAttention.forward` of ``x`` (batch, seq, hidden), fused and pre-scaled: (batch, seq, hidden), or
    (n, hidden) for the queries of ``selection`` only. With a ``packing``, ``x`` and the result are its real tokens."""
    hidden = x.shape[-1]
    dropout_p = attention.dropout.p if attention.training else 0.0
    value_scale = folded_scale(dropout_p, attention.training, x)
    weight, bias = fused_qkv(attention, value_scale)
    scaled = value_scale != 1.0  # attend drops without scaling: the values carry the scale
    if selection is None:
        qkv = F.linear(x, weight, bias)  # (batch, seq, 3 * hidden), or (n, 3 * hidden) packed
        if packing is not None:
            qkv = packing.unpack(qkv)  # (batch, seq, 3 * hidden)
        # split's backward writes the three gradients straight into one (batch, seq, 3 * hidden) tensor.
        q, k, v = map(attention.split_heads, qkv.split(hidden, dim=-1))  # (batch, heads, seq, head_dim) each
        out = attend(q, k, v, mask, dropout_p, scaled).transpose(1, 2).flatten(2)  # (batch, seq, hidden)
        return out if packing is None else packing.pack(out)
    kv = F.linear(x, weight[hidden:], bias[hidden:])  # (batch, seq, 2 * hidden)
    k, v = map(attention.split_heads, kv.split(hidden, dim=-1))  # (batch, heads, seq, head_dim) each
    q = F.linear(selection.gather(x), weight[:hidden], bias[:hidden])  # (n, hidden)
    # Rows select different numbers of tokens: lay the queries out as (batch, width) so attention stays batched;
    # the zero queries filling the gaps attend harmlessly and are dropped.
    grid = q.new_zeros(x.shape[0], selection.width, hidden).index_put((selection.rows, selection.slots), q)
    out = attend(attention.split_heads(grid), k, v, mask, dropout_p, scaled)  # (batch, heads, width, head_dim)
    return out.transpose(1, 2).flatten(2)[selection.rows, selection.slots]  # (n, hidden)


def residual_output(block: ResidualOutput, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """:meth:`ResidualOutput.forward`, dropout's scale folded into the projection (on CPU)."""
    p = block.dropout.p
    y = F.linear(x, *fold_into(p, block.training, x, block.dense.weight, block.dense.bias))  # (..., hidden)
    y = drop(y, p, block.training) + residual  # (..., hidden)
    return y if block.LayerNorm is None else block.LayerNorm(y)


# --- Modules ---------------------------------------------------------------------------------------------------


class FastEmbeddings(Embeddings):
    """:class:`Embeddings` with type 0 as a broadcast add and dropout's scale folded into the LayerNorm."""

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        x = self.word_embeddings(input_ids) + self.position_embeddings(self.position_ids(input_ids))  # (b, s, h)
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]  # type 0 everywhere: a broadcast add, no lookup
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        p, norm = self.dropout.p, self.LayerNorm
        if norm is None:  # model.embedding_norm=false
            return cpu.dropout(x, p, self.training)
        weight, bias = fold_into(p, self.training, x, norm.weight, norm.bias)  # dropout's scale in the affine map
        return drop(F.layer_norm(x, norm.normalized_shape, weight, bias, norm.eps), p, self.training)


class FastLayer(Layer):
    """:class:`Layer` through :func:`self_attention` and :func:`residual_output`. Given a :class:`Selection`, only the
    selected tokens are carried past the keys and values, (n, hidden); given a :class:`Packing`, the input and output
    are its (n, hidden) real tokens."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, selection: Selection | None = None,
                packing: Packing | None = None) -> torch.Tensor:
        attention = self.attention
        residual = x if selection is None else selection.gather(x)  # (batch, seq, hidden), or (n, hidden)
        normed = x if attention.LayerNorm is None else attention.LayerNorm(x)  # keys and values from every position
        x = residual_output(attention.output, self_attention(attention.self, normed, mask, selection, packing),
                            residual)
        return residual_output(self.output, self.intermediate(x), x)  # (batch, seq, hidden) or (n, hidden)


class FastLayerStack(LayerStack):
    """:class:`LayerStack` of :class:`FastLayer`, packed (:class:`Packing`) and selective (:class:`Selection`)."""

    layer_class = FastLayer

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                selected: torch.Tensor | None = None) -> torch.Tensor:
        """As :meth:`LayerStack.forward`. Packed, the states at the padding left out of the packing are zeros:
        unpacked layers would give the states of queries no one reads there."""
        mask, packing = key_mask(attention_mask), Packing.from_mask(attention_mask)
        if packing is not None:
            x = packing.pack(x)  # (n, hidden)
        for layer in self.layer[:-1]:
            x = layer(x, mask, packing=packing)
        if selected is not None:
            x = x if packing is None else packing.unpack(x)  # (batch, seq, hidden): keys and values
            return self.layer[-1](x, mask, Selection.from_mask(selected))  # (n_selected, hidden)
        x = self.layer[-1](x, mask, packing=packing)
        return x if packing is None else packing.unpack(x)  # (batch, seq, hidden)

    def every_layer(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """As :meth:`LayerStack.every_layer`, packed as :meth:`forward`."""
        mask, packing = key_mask(attention_mask), Packing.from_mask(attention_mask)
        if packing is not None:
            x = packing.pack(x)  # (n, hidden)
        states = []
        for layer in self.layer:
            x = layer(x, mask, packing=packing)
            states.append(x if packing is None else packing.unpack(x))  # (batch, seq, hidden)
        return states
