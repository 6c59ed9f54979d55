"""One transformer encoder for both families, as in the BERT and RoBERTa papers.

BERT and RoBERTa share the architecture: token + position (+ segment) embeddings, a LayerNorm, then post-LayerNorm
layers of multi-head self-attention and an exact-erf GELU feed-forward. The families differ only in constants
(:class:`EncoderConfig`) and in how positions are numbered (:meth:`Embeddings.position_ids`).

Module and parameter names are those of Hugging Face's ``BertModel`` / ``RobertaModel`` (``embeddings.LayerNorm``,
``encoder.layer.0.attention.self.query``, ...), so a state dict moves between the two with no renaming
(:mod:`bvr.model.hf`). This module is plain torch: no Lightning, no files.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bvr.config import FAMILIES, ModelConfig, load_config
from bvr.errors import BvrError

SHAPE_KEYS = ("num_layers", "hidden_size", "num_heads", "intermediate_size")
"""The ``model`` keys a named preset (``experiments/presets/NAME.yaml``) sets for :meth:`EncoderConfig.from_name`."""

_FAMILY_DEFAULTS: dict[str, dict[str, float | int]] = {
    "bert": {"type_vocab_size": 2, "layer_norm_eps": 1e-12},
    "roberta": {"type_vocab_size": 1, "layer_norm_eps": 1e-5},
}

MAX_TOKENS = 512
"""Sequence length the presets' position embeddings are sized for (both papers)."""


def _check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise BvrError(message, where=f"model.{key}")


@dataclass
class EncoderConfig:
    """Shape and constants of an encoder; ``None`` fields take their family's value.

    Example:
        >>> cfg = EncoderConfig.from_name("tiny", "roberta", vocab_size=50_000, pad_token_id=1)
        >>> cfg.max_position_embeddings, cfg.max_tokens, cfg.type_vocab_size, cfg.layer_norm_eps
        (514, 512, 1, 1e-05)
    """

    family: str
    """'bert' (positions from 0, 2 token types, eps 1e-12) or 'roberta' (positions from pad+1, 1 type, eps 1e-5)."""
    vocab_size: int
    """Rows of the word embedding (and columns of the tied MLM decoder)."""
    hidden_size: int = 256
    """Width of the residual stream."""
    num_layers: int = 4
    """Transformer layers."""
    num_heads: int = 4
    """Attention heads; must divide hidden_size."""
    intermediate_size: int = 1024
    """Width of the feed-forward layer."""
    max_position_embeddings: int | None = None
    """Rows of the position embedding (None: 512 tokens, plus the padding offset for roberta)."""
    dropout: float = 0.1
    """Dropout on embeddings and residual branches."""
    attention_dropout: float = 0.1
    """Dropout on attention probabilities (training only)."""
    pad_token_id: int = 0
    """Padding id: its word-embedding row starts at zero and gets no gradient; roberta numbers positions after it."""
    type_vocab_size: int | None = None
    """Token types (segments): None gives 2 for bert, 1 for roberta."""
    layer_norm_eps: float | None = None
    """LayerNorm epsilon: None gives 1e-12 for bert, 1e-5 for roberta."""
    initializer_range: float = 0.02
    """Standard deviation of the normal initialisation of weights and embeddings."""

    def __post_init__(self) -> None:
        _check(self.family in FAMILIES, "family", f"'{self.family}' is not one of {', '.join(FAMILIES)}")
        defaults = _FAMILY_DEFAULTS[self.family]
        if self.type_vocab_size is None:
            self.type_vocab_size = int(defaults["type_vocab_size"])
        if self.layer_norm_eps is None:
            self.layer_norm_eps = float(defaults["layer_norm_eps"])
        if self.max_position_embeddings is None:
            self.max_position_embeddings = MAX_TOKENS + self.position_offset
        self._validate()

    def _validate(self) -> None:
        for key in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                    "max_position_embeddings", "type_vocab_size"):
            _check(getattr(self, key) > 0, key, f"must be positive, got {getattr(self, key)}")
        _check(self.hidden_size % self.num_heads == 0, "num_heads",
               f"{self.num_heads} heads do not divide hidden_size {self.hidden_size}")
        for key in ("dropout", "attention_dropout"):
            _check(0.0 <= getattr(self, key) < 1.0, key, f"must be in [0, 1), got {getattr(self, key)}")
        _check(0 <= self.pad_token_id < self.vocab_size, "pad_token_id",
               f"{self.pad_token_id} is not an id of a {self.vocab_size}-token vocabulary")
        _check(self.layer_norm_eps > 0, "layer_norm_eps", f"must be positive, got {self.layer_norm_eps}")
        _check(self.initializer_range > 0, "initializer_range", f"must be positive, got {self.initializer_range}")
        _check(self.max_tokens > 0, "max_position_embeddings",
               f"{self.max_position_embeddings} positions leave no room after roberta's offset {self.position_offset}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def position_offset(self) -> int:
        """Position id of the first token: 0 for bert, pad_token_id + 1 for roberta (fairseq's numbering)."""
        return self.pad_token_id + 1 if self.family == "roberta" else 0

    @property
    def max_tokens(self) -> int:
        """Longest sequence the position embeddings hold."""
        return self.max_position_embeddings - self.position_offset

    @classmethod
    def from_name(cls, name: str, family: str, vocab_size: int, pad_token_id: int, **overrides) -> EncoderConfig:
        """Build the encoder of a named preset (``tiny``, ``small``, ``base``, ``large``) for a family and vocabulary.

        The sizes (:data:`SHAPE_KEYS`) are those of the preset file ``experiments/presets/NAME.yaml``, read by
        :func:`bvr.config.load_config`; the other fields keep their defaults (the family's position count).

        Args:
            name: preset name, a file in ``experiments/presets``.
            family: 'bert' or 'roberta'.
            vocab_size: rows of the word embedding.
            pad_token_id: the tokenizer's padding id.
            **overrides: any other :class:`EncoderConfig` field.

        Raises:
            BvrError: for an unknown preset or an invalid value.
        """
        model = load_config(preset=name).model
        fields = {**{key: getattr(model, key) for key in SHAPE_KEYS}, **overrides}
        return cls(family=family, vocab_size=vocab_size, pad_token_id=pad_token_id, **fields)

    @classmethod
    def from_model_config(cls, model_cfg: ModelConfig, vocab_size: int, pad_token_id: int) -> EncoderConfig:
        """Build the encoder config of a run from its ``model`` section and its tokenizer's vocabulary."""
        keys = ("family", "num_layers", "hidden_size", "num_heads", "intermediate_size", "max_position_embeddings",
                "dropout", "attention_dropout")
        return cls(vocab_size=vocab_size, pad_token_id=pad_token_id, **{k: getattr(model_cfg, k) for k in keys})

    def to_dict(self) -> dict:
        """The resolved fields (family defaults filled in), for writing next to a checkpoint."""
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------------------------
# Dropout


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout, as ``F.dropout``, with a faster mask on CPU.

    torch's CPU dropout draws float Bernoulli noise, about twice as slow (forward and backward) as drawing int32
    bits, uniform on [0, 2**31), and keeping the elements whose bits are at least ``p * 2**31``: the same keep
    probability to 2**-31, and ~10% off a tiny-model training step. Off the CPU (CUDA's fused kernel)
    ``F.dropout`` is used.
    """
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    bits = torch.empty(x.shape, dtype=torch.int32).random_()  # uniform on [0, 2**31 - 1]
    scale = (bits >= round(p * 2**31)).to(x.dtype).mul_(1.0 / (1.0 - p))  # 0 or 1 / (1 - p), in x's dtype
    return x * scale


class Dropout(nn.Dropout):
    """``nn.Dropout`` through :func:`dropout` (same ``p``, same train/eval behaviour)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


# ---------------------------------------------------------------------------------------------------------------
# Embeddings


class Embeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout (HF ``BertEmbeddings`` names)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.family = config.family
        self.pad_token_id = config.pad_token_id
        # padding_idx as in HF: the pad row starts at zero and gets no gradient from lookups.
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        pos_pad = config.pad_token_id if config.family == "roberta" else None
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size, padding_idx=pos_pad)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.dropout)

    def position_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Position of each token: ``(1, seq)`` from 0 for bert; ``(batch, seq)`` for roberta.

        RoBERTa (fairseq) counts only non-pad tokens and starts at ``pad + 1``; pad tokens get ``pad`` itself, whose
        embedding row is the (zero-initialised, frozen) padding row.
        """
        if self.family == "bert":
            return torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        not_pad = input_ids.ne(self.pad_token_id).long()  # (batch, seq)
        return torch.cumsum(not_pad, dim=1) * not_pad + self.pad_token_id

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Embed ``input_ids`` (batch, seq) into (batch, seq, hidden)."""
        x = self.word_embeddings(input_ids) + self.position_embeddings(self.position_ids(input_ids))
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]  # type 0 everywhere: a broadcast add, no lookup
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))  # (batch, seq, hidden)


# ---------------------------------------------------------------------------------------------------------------
# Layers


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

    def fused_qkv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Weight (3 * hidden, hidden) and bias (3 * hidden,) of q, k and v in one, the query pre-scaled.

        Concatenating per call costs a few hundred KB and keeps HF's separate parameters, while the projection runs
        as one wide GEMM. Folding 1/sqrt(head_dim) into the query's weights scales (hidden, hidden) numbers instead of
        a (batch, heads, seq, head_dim) activation.
        """
        scale = self.head_dim**-0.5
        weight = torch.cat((self.query.weight * scale, self.key.weight, self.value.weight))
        bias = torch.cat((self.query.bias * scale, self.key.bias, self.value.bias))
        return weight, bias

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, len, hidden) view -> (batch, heads, len, head_dim) view, no copy."""
        return x.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, heads, len, head_dim) -> (batch, len, hidden)."""
        return x.transpose(1, 2).flatten(2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, selection: Selection | None = None) -> torch.Tensor:
        """Attend over ``x`` (batch, seq, hidden); ``mask`` (batch, 1, 1, seq) is True at keys to attend to.

        Returns (batch, seq, hidden), or (n, hidden) for the queries of ``selection`` only.
        """
        hidden = x.shape[-1]
        weight, bias = self.fused_qkv()
        dropout_p = self.attention_dropout if self.training else 0.0
        if selection is None:
            # split's backward writes the three gradients straight into one (batch, seq, 3 * hidden) tensor.
            q, k, v = map(self._heads, F.linear(x, weight, bias).split(hidden, dim=-1))
            return self._merge(attend(q, k, v, mask, dropout_p))  # (batch, seq, hidden)
        k, v = map(self._heads, F.linear(x, weight[hidden:], bias[hidden:]).split(hidden, dim=-1))
        q = F.linear(selection.gather(x), weight[:hidden], bias[:hidden])  # (n, hidden)
        # Rows select different numbers of tokens: lay the queries out as (batch, width) so attention stays batched;
        # the zero queries filling the gaps attend harmlessly and are dropped.
        grid = q.new_zeros(x.shape[0], selection.width, hidden).index_put((selection.rows, selection.slots), q)
        out = self._merge(attend(self._heads(grid), k, v, mask, dropout_p))  # (batch, width, hidden)
        return out[selection.rows, selection.slots]  # (n, hidden)


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout_p: float
) -> torch.Tensor:
    """Softmax attention of pre-scaled queries (batch, heads, q_len, head_dim) over keys and values.

    Without dropout this is SDPA (its fused kernels). With attention dropout SDPA falls back on CPU to a generic
    path that also scans for fully masked rows; the explicit form below does the same arithmetic in fewer passes.
    """
    if dropout_p == 0.0:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)
    scores = q @ k.transpose(-1, -2)  # (batch, heads, q_len, k_len)
    if mask is not None:
        # finfo.min rather than -inf: a row with no real key (an all-padding sequence) stays finite, as in SDPA.
        # In place: the matmul's backward does not need its output.
        scores = scores.masked_fill_(mask.logical_not(), torch.finfo(scores.dtype).min)
    return dropout(scores.softmax(dim=-1), dropout_p, training=True) @ v


class ResidualOutput(nn.Module):
    """Projection, dropout, residual add and post-LayerNorm (HF ``attention.output`` and ``output``)."""

    def __init__(self, in_size: int, config: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(in_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.dropout)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class Attention(nn.Module):
    """Self-attention with its output block (HF ``attention``: ``self`` and ``output``)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.self = SelfAttention(config)
        self.output = ResidualOutput(config.hidden_size, config)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, selection: Selection | None = None) -> torch.Tensor:
        residual = x if selection is None else selection.gather(x)
        return self.output(self.self(x, mask, selection), residual)


class Intermediate(nn.Module):
    """First feed-forward projection and exact (erf) GELU (HF ``intermediate``)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))  # (..., intermediate)


class Layer(nn.Module):
    """One post-LayerNorm transformer layer (HF ``BertLayer``).

    Given a :class:`Selection`, only the selected tokens are carried past the keys and values: their queries,
    attention output and feed-forward, (n, hidden). The result equals the full layer's at those tokens.
    """

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.attention = Attention(config)
        self.intermediate = Intermediate(config)
        self.output = ResidualOutput(config.intermediate_size, config)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, selection: Selection | None = None) -> torch.Tensor:
        x = self.attention(x, mask, selection)
        return self.output(self.intermediate(x), x)  # (batch, seq, hidden) or (n, hidden)


class LayerStack(nn.Module):
    """The layers, held as ``layer.{i}`` (HF ``BertEncoder``)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(Layer(config) for _ in range(config.num_layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, selection: Selection | None = None) -> torch.Tensor:
        """Run all layers; with a selection the last one computes only the selected tokens, (n, hidden)."""
        for layer in self.layer[:-1]:
            x = layer(x, mask)
        return self.layer[-1](x, mask, selection)

    def every_layer(self, x: torch.Tensor, mask: torch.Tensor | None) -> list[torch.Tensor]:
        """Run all layers and keep each one's output: ``num_layers`` tensors of (batch, seq, hidden), first to last.

        A separate method, not a flag on :meth:`forward`, so the training path keeps no intermediate states alive
        beyond what autograd holds anyway.
        """
        states = []
        for layer in self.layer:
            x = layer(x, mask)
            states.append(x)
        return states


class Pooler(nn.Module):
    """BERT's pooler: dense + tanh on the first token (HF ``pooler``)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, first: torch.Tensor) -> torch.Tensor:
        """(batch, hidden) states of the first token -> (batch, hidden) pooled."""
        return torch.tanh(self.dense(first))


def attention_mask_for_sdpa(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """Turn a (batch, seq) 1/0 padding mask into SDPA's boolean (batch, 1, 1, seq), or None if nothing is padded.

    Passing None when there is no padding lets SDPA take its unmasked (fastest) kernel. Pad *queries* still attend
    to the real tokens, as in HF, so every row has at least one key and no softmax row is empty.
    """
    if attention_mask is None or bool(attention_mask.all()):
        return None
    return attention_mask.bool()[:, None, None, :]


class Encoder(nn.Module):
    """The shared encoder (HF ``BertModel`` / ``RobertaModel`` names: embeddings, encoder.layer, pooler).

    Args:
        config: sizes and constants.
        add_pooler: build the dense + tanh pooler over the first token (BERT's NSP and classification input).
    """

    def __init__(self, config: EncoderConfig, add_pooler: bool = False) -> None:
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.encoder = LayerStack(config)
        self.pooler = Pooler(config) if add_pooler else None

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Encode a batch.

        Args:
            input_ids: (batch, seq) token ids.
            attention_mask: (batch, seq), 1 at real tokens and 0 at padding; None means no padding.
            token_type_ids: (batch, seq) segment ids; None means all 0.

        Returns:
            The last layer's hidden states, (batch, seq, hidden).
        """
        x = self.embeddings(input_ids, token_type_ids)  # (batch, seq, hidden)
        return self.encoder(x, attention_mask_for_sdpa(attention_mask))

    def forward_selected(
        self,
        input_ids: torch.Tensor,
        selected: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Last hidden states at the ``selected`` positions only: ``forward(...)[selected]``, computed sparsely.

        Every layer but the last needs all tokens (they are keys and values), but the last layer's output is read
        only where a loss looks: with 15% masking, computing its queries, attention and feed-forward at those tokens
        alone removes most of a layer's work. Used by :meth:`PretrainingModel.pretraining_loss`.

        Args:
            input_ids: (batch, seq) token ids.
            selected: (batch, seq) boolean, True where the output is wanted.
            attention_mask: (batch, seq), 1 at real tokens, 0 at padding; None means no padding.
            token_type_ids: (batch, seq) segment ids; None means all 0.

        Returns:
            (n_selected, hidden), rows in row-major (batch, seq) order.
        """
        x = self.embeddings(input_ids, token_type_ids)  # (batch, seq, hidden)
        return self.encoder(x, attention_mask_for_sdpa(attention_mask), Selection.from_mask(selected))

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> list[torch.Tensor]:
        """Every layer's hidden states, as Hugging Face's ``output_hidden_states``: for feature-based use (probes).

        Args:
            input_ids: (batch, seq) token ids.
            attention_mask: (batch, seq), 1 at real tokens and 0 at padding; None means no padding.
            token_type_ids: (batch, seq) segment ids; None means all 0.

        Returns:
            ``num_layers + 1`` tensors of (batch, seq, hidden): the embeddings' output, then each layer's output;
            the last is what :meth:`forward` returns.
        """
        x = self.embeddings(input_ids, token_type_ids)  # (batch, seq, hidden)
        return [x, *self.encoder.every_layer(x, attention_mask_for_sdpa(attention_mask))]

    def pool(self, hidden: torch.Tensor) -> torch.Tensor:
        """Pool (batch, seq, hidden) to (batch, hidden) through the pooler; an error if it was not built."""
        if self.pooler is None:
            raise RuntimeError("this encoder was built without a pooler (add_pooler=False)")
        return self.pooler(hidden[:, 0])  # (batch, hidden)


def compile_layers(encoder: Encoder) -> None:
    """Compile every layer but the last with ``torch.compile`` (inductor), in place.

    Training calls :meth:`PretrainingModel.pretraining_loss`, not ``forward``, so compiling the whole model would
    compile nothing that runs. A full layer has static shapes (batch, seq, hidden): inductor fuses its bias adds,
    GELU, dropout, residual adds and LayerNorms around the matmuls. The last layer runs only at the selected
    tokens, whose number changes every batch, and stays eager. Parameter names and state dicts are unchanged.
    """
    for layer in encoder.encoder.layer[:-1]:
        layer.compile(dynamic=False)


@torch.no_grad()
def init_weights(module: nn.Module, initializer_range: float) -> None:
    """BERT's initialisation, applied to every submodule (``model.apply``).

    Linear and embedding weights ~ N(0, initializer_range), biases 0, LayerNorm 1 and 0, and the padding row of
    every embedding that has one (word embeddings; roberta's position embeddings) set to 0, as HF does.
    """
    if isinstance(module, (nn.Linear, nn.Embedding)):
        module.weight.normal_(mean=0.0, std=initializer_range)
    if isinstance(module, nn.Linear) and module.bias is not None:
        module.bias.zero_()
    if isinstance(module, nn.Embedding) and module.padding_idx is not None:
        module.weight[module.padding_idx].zero_()
    if isinstance(module, nn.LayerNorm):
        module.weight.fill_(1.0)
        module.bias.zero_()
