"""One transformer encoder for both families, as in the BERT and RoBERTa papers: token + position (+ segment)
embeddings, a LayerNorm, then post-LayerNorm layers of multi-head self-attention and an exact-erf GELU feed-forward
(with ``norm='pre'``, LayerNorms before each sub-layer and one after the last). The families differ only in
constants (:class:`EncoderConfig`) and in how positions are numbered (:meth:`Embeddings.position_ids`).

Module and parameter names are those of Hugging Face's ``BertModel`` / ``RobertaModel``, so a state dict moves
between the two with no renaming (:mod:`bvr.model.hf`). The layers are in :mod:`bvr.model.layers` (as BERT computes
them) and :mod:`bvr.model.fast` (what runs by default: the same function in fewer passes)."""

from __future__ import annotations

import torch
from torch import nn

from bvr.model.encoder_config import EncoderConfig
from bvr.model.fast import FastEmbeddings, FastLayerStack
from bvr.model.layers import Embeddings, LayerStack


class Pooler(nn.Module):
    """BERT's pooler: dense + tanh on the first token (HF ``pooler``)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, first: torch.Tensor) -> torch.Tensor:
        """(batch, hidden) states of the first token -> (batch, hidden) pooled."""
        return torch.tanh(self.dense(first))


class Encoder(nn.Module):
    """The shared encoder (HF ``BertModel`` / ``RobertaModel`` names: embeddings, encoder.layer, pooler).

    ``add_pooler``: the dense + tanh pooler over the first token. ``fast`` False runs the reference modules of
    :mod:`bvr.model.layers` (the same function, slower). Each method reads ``input_ids`` (batch, seq);
    ``attention_mask`` (batch, seq), 1 at real tokens and 0 at padding, None for none; ``token_type_ids``, None for 0.
    """

    def __init__(self, config: EncoderConfig, add_pooler: bool = False, fast: bool = True) -> None:
        super().__init__()
        self.config = config
        # The one seam between the reference path and the fast one: which classes the embeddings and layers are.
        self.embeddings = (FastEmbeddings if fast else Embeddings)(config)
        self.encoder = (FastLayerStack if fast else LayerStack)(config)
        # Pre-LayerNorm: the residual stream is normalised once more after the last layer (HF's RobertaPreLayerNorm).
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.pre_norm else None
        self.pooler = Pooler(config) if add_pooler else None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The last layer's hidden states, (batch, seq, hidden). Positions under padding hold no one's state: zeros or
        what their queries attended to (as in Hugging Face's models), depending on whether the batch ran packed
        (:class:`~bvr.model.fast.Packing`: 5% or more of it padding). Read the real tokens only."""
        x = self.embeddings(input_ids, token_type_ids)  # (batch, seq, hidden)
        return self.final_norm(self.encoder(x, attention_mask))  # (batch, seq, hidden)

    def forward_selected(self, input_ids: torch.Tensor, selected: torch.Tensor,
                         attention_mask: torch.Tensor | None = None,
                         token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Last hidden states at the ``selected`` (batch, seq) boolean positions only: ``forward(...)[selected]``,
        (n_selected, hidden) in row-major order. Every layer but the last needs all tokens (keys and values), but with
        15% masking the last layer's work at the selected tokens alone is a fraction of it (in the fast path; the
        reference path computes every position and picks)."""
        x = self.embeddings(input_ids, token_type_ids)  # (batch, seq, hidden)
        return self.final_norm(self.encoder(x, attention_mask, selected))  # (n_selected, hidden)

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      token_type_ids: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Every layer's hidden states, as Hugging Face's ``output_hidden_states``, for feature-based use (probes):
        ``num_layers + 1`` tensors of (batch, seq, hidden), the embeddings' output, then each layer's; the last is
        what :meth:`forward` returns (padding as there; pre-LayerNorm, after the final LayerNorm)."""
        x = self.embeddings(input_ids, token_type_ids)  # (batch, seq, hidden)
        *states, last = self.encoder.every_layer(x, attention_mask)  # (batch, seq, hidden) each
        return [x, *states, self.final_norm(last)]

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        """The last layer's output as the encoder returns it: through the final LayerNorm in a pre-LayerNorm encoder."""
        return x if self.LayerNorm is None else self.LayerNorm(x)


def compile_layers(encoder: Encoder) -> None:
    """Compile every layer but the last with ``torch.compile`` (inductor), in place; state dicts are unchanged.

    Training calls :meth:`PretrainingModel.pretraining_loss`, not ``forward``, so compiling the whole model would
    compile nothing that runs. A full layer has static shapes, so inductor fuses its elementwise work around the
    matmuls; the last layer runs only at the selected tokens, whose number changes every batch, and stays eager.
    """
    for layer in encoder.encoder.layer[:-1]:
        layer.compile(dynamic=False)


@torch.no_grad()
def initialize(module: nn.Module, config: EncoderConfig) -> None:
    """Initialise ``module`` (an encoder, or a model holding one) in place: BERT's :func:`init_weights` everywhere,
    then with ``token_type_init='zero'`` the token-type embeddings at zero (the same draws, other values)."""
    module.apply(lambda m: init_weights(m, config.initializer_range))
    if config.token_type_init == "zero":
        for embeddings in (m for m in module.modules() if isinstance(m, Embeddings)):
            embeddings.token_type_embeddings.weight.zero_()


@torch.no_grad()
def init_weights(module: nn.Module, initializer_range: float) -> None:
    """BERT's initialisation of one submodule (``model.apply``): Linear and embedding weights ~ N(0, initializer_range),
    biases 0, LayerNorm 1 and 0, and every embedding's padding row (if any) 0, as HF does."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        module.weight.normal_(mean=0.0, std=initializer_range)
    if isinstance(module, nn.Linear) and module.bias is not None:
        module.bias.zero_()
    if isinstance(module, nn.Embedding) and module.padding_idx is not None:
        module.weight[module.padding_idx].zero_()
    if isinstance(module, nn.LayerNorm):
        module.weight.fill_(1.0)
        module.bias.zero_()
