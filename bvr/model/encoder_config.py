"""The shape and constants of an encoder (:class:`EncoderConfig`): sizes, family defaults (token types, LayerNorm
epsilon, position numbering) and the named presets' sizes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bvr.config import FAMILIES, NORMS, TOKEN_TYPE_INITS, ModelConfig, load_config
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
    norm: str = "post"
    """'post' (LayerNorm after each residual add, BERT) or 'pre' (before each sub-layer, plus a final one)."""
    token_type_init: str = "normal"
    """Initialisation of the token-type embeddings: 'normal' (BERT, like every embedding) or 'zero'."""
    embedding_norm: bool = True
    """A LayerNorm on the sum of the embeddings (False: the sum as it is; pre-LayerNorm only)."""
    head_transform: bool = True
    """The MLM head's dense + GELU + LayerNorm before the decoder (False: none; pre-LayerNorm only)."""

    def __post_init__(self) -> None:
        _check(self.family in FAMILIES, "family", f"'{self.family}' is not one of {', '.join(FAMILIES)}")
        _check(self.norm in NORMS, "norm", f"'{self.norm}' is not one of {', '.join(NORMS)}")
        _check(self.token_type_init in TOKEN_TYPE_INITS, "token_type_init",
               f"'{self.token_type_init}' is not one of {', '.join(TOKEN_TYPE_INITS)}")
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
        for key in ("embedding_norm", "head_transform"):
            _check(getattr(self, key) or self.pre_norm, key, "False needs norm='pre'")
        _check(self.max_tokens > 0, "max_position_embeddings",
               f"{self.max_position_embeddings} positions leave no room after roberta's offset {self.position_offset}")

    @property
    def pre_norm(self) -> bool:
        """LayerNorms before each sub-layer (and one after the last layer) rather than after each residual add."""
        return self.norm == "pre"

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
                "dropout", "attention_dropout", "norm", "token_type_init", "embedding_norm", "head_transform")
        return cls(vocab_size=vocab_size, pad_token_id=pad_token_id, **{k: getattr(model_cfg, k) for k in keys})

    def to_dict(self) -> dict:
        """The resolved fields (family defaults filled in), for writing next to a checkpoint."""
        return dataclasses.asdict(self)
