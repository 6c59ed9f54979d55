"""The encoder's one config, each knob declared, documented and checked here once: :class:`ModelConfig`, the
``model`` section, and :class:`EncoderConfig`, the same knobs with what the tokenizer and the family fix, which the
modules (and a Hugging Face ``config.json``, :mod:`bvr.model.hf_config`) are built from. No torch, nothing of
:mod:`bvr.config`: it sits below both (ARCHITECTURE.md).

>>> section = ModelConfig(family="roberta")
>>> cfg = EncoderConfig.from_model(section, vocab_size=50_000, pad_token_id=1)
>>> cfg.max_position_embeddings, cfg.max_tokens, section.max_tokens, cfg.type_vocab_size, cfg.layer_norm_eps
(512, 510, 510, 1, 1e-05)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bvr.errors import check, check_choice

FAMILIES = ("bert", "roberta")
NORMS = ("post", "pre")
"""Where each layer's LayerNorms sit: after the residual add (BERT, RoBERTa) or before each sub-layer, with a final
LayerNorm after the last layer (pre-LayerNorm: GPT-2, fairseq's ``normalize_before``, cramming)."""
TOKEN_TYPE_INITS = ("normal", "zero")
"""How the token-type (segment) embeddings start: drawn like every other embedding (BERT) or at zero."""
PAD_TOKEN_IDS = {"bert": 0, "roberta": 1}
"""Each family's padding id in its own tokenizer's vocabulary: BERT's ``[PAD]`` comes first, RoBERTa's ``<pad>``
after ``<s>``."""
_FAMILY_DEFAULTS: dict[str, dict[str, float | int]] = {
    "bert": {"type_vocab_size": 2, "layer_norm_eps": 1e-12},
    "roberta": {"type_vocab_size": 1, "layer_norm_eps": 1e-5},
}


@dataclass
class ModelConfig:
    """The encoder as a run configures it: the ``model`` section (sizes, family, layout, initialisation, dropout)."""

    family: str = "bert"
    """'bert' (2 token types, eps 1e-12, positions from 0) or 'roberta' (1 type, eps 1e-5, positions from pad+1)."""
    num_layers: int = 4
    """Transformer layers."""
    hidden_size: int = 256
    """Width of the residual stream."""
    num_heads: int = 4
    """Attention heads; must divide hidden_size."""
    intermediate_size: int = 1024
    """Width of the feed-forward layer."""
    max_position_embeddings: int = 512
    """Rows of the position embedding; roberta's first pad_token_id + 1 of them hold no token (:attr:`max_tokens`)."""
    dropout: float = 0.1
    """Dropout on embeddings and residual branches."""
    attention_dropout: float = 0.1
    """Dropout on attention probabilities (training only)."""
    norm: str = "post"
    """'post' (BERT: LayerNorm after each residual add) or 'pre' (before attention and the feed-forward, one more
    after the last layer: trains stably at higher learning rates; Hugging Face's RobertaPreLayerNorm for roberta)."""
    token_type_init: str = "normal"
    """'normal' (BERT: drawn like the other embeddings) or 'zero'. Drawn, the type-0 vector is one offset shared by
    every token, as large as its own embedding: a small pre-LayerNorm encoder stays on the unigram plateau
    (docs/recipes.md)."""
    embedding_norm: bool = True
    """A LayerNorm on the sum of the embeddings (BERT, RoBERTa). With model.norm=pre, false feeds the sum to the
    first layer as it is (GPT-2's layout): then about as small as what each layer adds, so what attention brings
    from the context is not drowned by each token's own embedding at unit scale (docs/recipes.md)."""
    head_transform: bool = True
    """The MLM head's dense + GELU + LayerNorm before the tied decoder (BERT, RoBERTa). With model.norm=pre, false
    lets the decoder read the encoder's last LayerNorm directly (docs/recipes.md)."""
    sbo: bool = False
    """SpanBERT's span-boundary objective beside MLM: each masked token is also predicted from the two tokens just
    outside its span and its position in it (a pretraining head only, left out of exported folders)."""

    def __post_init__(self) -> None:
        check_choice(self.family, FAMILIES, "model.family")
        check_choice(self.norm, NORMS, "model.norm")
        check_choice(self.token_type_init, TOKEN_TYPE_INITS, "model.token_type_init")
        for key in ("embedding_norm", "head_transform"):
            check(getattr(self, key) or self.pre_norm, f"model.{key}",
                  "false needs model.norm=pre (a post-LayerNorm encoder normalises its input with these)")
        for key in ("num_layers", "hidden_size", "num_heads", "intermediate_size", "max_position_embeddings"):
            check(getattr(self, key) > 0, f"model.{key}", f"must be positive, got {getattr(self, key)}")
        check(self.hidden_size % self.num_heads == 0, "model.num_heads",
              f"{self.num_heads} heads do not divide hidden_size {self.hidden_size}")
        for key in ("dropout", "attention_dropout"):
            check(0.0 <= getattr(self, key) < 1.0, f"model.{key}", f"must be in [0, 1), got {getattr(self, key)}")

    @property
    def pre_norm(self) -> bool:
        """LayerNorms before each sub-layer (and one after the last layer) rather than after each residual add."""
        return self.norm == "pre"

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def position_offset(self) -> int:
        """Position id of the first token: 0 for bert; for roberta, whose positions are numbered after the padding id
        (fairseq's numbering, kept by Hugging Face), the padding id + 1, here the family's own (no tokenizer yet)."""
        return PAD_TOKEN_IDS[self.family] + 1 if self.family == "roberta" else 0

    @property
    def max_tokens(self) -> int:
        """Longest sequence the position embeddings hold."""
        return self.max_position_embeddings - self.position_offset


@dataclass(kw_only=True)
class EncoderConfig(ModelConfig):
    """A :class:`ModelConfig` with what its tokenizer and family fix (``None`` fields: the family's value)."""

    vocab_size: int
    """Rows of the word embedding (and columns of the tied MLM decoder): the tokenizer's."""
    pad_token_id: int | None = None
    """Padding id (None: the family's own, :data:`PAD_TOKEN_IDS`): its word-embedding row starts at zero and gets no
    gradient; roberta numbers positions after it."""
    type_vocab_size: int | None = None
    """Token types (segments): None gives 2 for bert, 1 for roberta."""
    layer_norm_eps: float | None = None
    """LayerNorm epsilon: None gives 1e-12 for bert, 1e-5 for roberta."""
    initializer_range: float = 0.02
    """Standard deviation of the normal initialisation of weights and embeddings."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for key, value in {"pad_token_id": PAD_TOKEN_IDS[self.family], **_FAMILY_DEFAULTS[self.family]}.items():
            if getattr(self, key) is None:
                setattr(self, key, value)
        for key in ("vocab_size", "type_vocab_size"):
            check(getattr(self, key) > 0, f"model.{key}", f"must be positive, got {getattr(self, key)}")
        check(0 <= self.pad_token_id < self.vocab_size, "model.pad_token_id",
              f"{self.pad_token_id} is not an id of a {self.vocab_size}-token vocabulary")
        check(self.layer_norm_eps > 0, "model.layer_norm_eps", f"must be positive, got {self.layer_norm_eps}")
        check(self.initializer_range > 0, "model.initializer_range", f"must be positive, got {self.initializer_range}")
        check(self.max_tokens > 0, "model.max_position_embeddings",
              f"{self.max_position_embeddings} positions leave no room after roberta's offset {self.position_offset}")

    @property
    def position_offset(self) -> int:
        """As :attr:`ModelConfig.position_offset`, for this vocabulary's padding id."""
        return self.pad_token_id + 1 if self.family == "roberta" else 0

    @classmethod
    def from_model(cls, model: ModelConfig, vocab_size: int, pad_token_id: int) -> EncoderConfig:
        """The encoder of a run's ``model`` section for its tokenizer's vocabulary and padding id."""
        knobs = {field.name: getattr(model, field.name) for field in dataclasses.fields(ModelConfig)}
        return cls(**knobs, vocab_size=vocab_size, pad_token_id=pad_token_id)
