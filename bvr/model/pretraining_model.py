"""The model pretraining trains: the encoder joined to its heads (:mod:`bvr.model.heads`), and its losses.

:class:`PretrainingModel` is laid out like Hugging Face's ``BertForPreTraining``, ``BertForMaskedLM`` and
``RobertaForMaskedLM`` (the encoder under ``bert`` or ``roberta``, heads under ``cls`` or ``lm_head``), so its
``state_dict()`` keys are HF's. The MLM head predicts only at the masked positions (*sparse prediction*): the
vocabulary-sized projection, softmax and their gradients cost ~15% of the dense version.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from bvr.model.encoder import Encoder, initialize
from bvr.model.encoder_config import EncoderConfig
from bvr.model.heads import BertPretrainingHeads, RobertaLMHead, SpanBoundaryHead, span_boundaries
from bvr.model.layers import Embeddings
from bvr.model.losses import IGNORE_INDEX, accuracy, cross_entropy, linear_cross_entropy


@dataclass
class PretrainingOutput:
    """What :meth:`PretrainingModel.forward` returns."""

    hidden: torch.Tensor
    """Last hidden states, (batch, seq, hidden)."""
    mlm_logits: torch.Tensor
    """(n_masked, vocab) at the labelled positions, or (batch, seq, vocab) when no labels were given."""
    mlm_targets: torch.Tensor | None
    """(n_masked,) labels matching ``mlm_logits`` rows; None when no labels were given."""
    sentence_logits: torch.Tensor | None
    """(batch, 2) next-sentence logits (index 0: IsNext, as BERT); None without an NSP head."""


@dataclass
class PretrainingLoss:
    """Losses and detached metrics of one batch (:meth:`PretrainingModel.pretraining_loss`)."""

    loss: torch.Tensor
    """mlm_loss + sentence_loss + sbo_loss, of those the model has (what to backpropagate)."""
    mlm_loss: torch.Tensor
    """Mean cross-entropy over the masked tokens."""
    sentence_loss: torch.Tensor | None
    """Mean next-sentence cross-entropy over the labels that are not -100; None without NSP."""
    mlm_accuracy: torch.Tensor
    """Share of masked tokens predicted exactly (detached)."""
    sentence_accuracy: torch.Tensor | None
    """Share of next-sentence labels predicted (detached); None without NSP."""
    n_masked: int
    """Number of predicted tokens in the batch."""
    n_sentence: int = 0
    """Number of next-sentence labels counted (not -100); 0 without NSP."""
    sbo_loss: torch.Tensor | None = None
    """Mean span-boundary cross-entropy over the masked tokens; None without SBO."""
    sbo_accuracy: torch.Tensor | None = None
    """Share of masked tokens the span-boundary head predicts exactly (detached); None without SBO."""


class PretrainingModel(nn.Module):
    """Encoder + MLM head (+ pooler and NSP head, + span-boundary head), with HF's parameter names.

    ``config.sbo`` adds SpanBERT's span-boundary head (under ``sbo``). ``sentence_head``: the pooler and the 2-way
    classifier of NSP or SOP on the pooled first token. ``pooler``: the pooler without the NSP head (a ``BertModel``
    folder's stored pooler, loaded for fine-tuning).
    """

    def __init__(self, config: EncoderConfig, sentence_head: bool = False, fast: bool = True,
                 pooler: bool = False) -> None:
        super().__init__()
        self.config = config
        self.sentence_head = sentence_head
        self.sbo_enabled = config.sbo
        self.has_mlm_head = True
        """False when loaded from an encoder-only folder: the MLM head is then untrained (see ``load_hf``)."""
        encoder = Encoder(config, add_pooler=sentence_head or pooler, fast=fast)
        self.add_module(config.family, encoder)  # 'bert.' or 'roberta.': HF's base_model_prefix
        embedding = encoder.embeddings.word_embeddings
        if config.family == "bert":
            self.cls = BertPretrainingHeads(config, embedding, sentence_head)
        else:
            self.lm_head = RobertaLMHead(config, embedding)
            if sentence_head:
                self.cls = BertPretrainingHeads(config, None, sentence_head=True)
        if config.sbo:  # registered last: the encoder and MLM head are initialised as without it
            self.sbo = SpanBoundaryHead(config, embedding)
        initialize(self, config)

    @property
    def encoder(self) -> Encoder:
        """The encoder, whatever the family's attribute name."""
        return getattr(self, self.config.family)

    @property
    def mlm_head(self) -> nn.Module:
        """The MLM head: ``cls.predictions`` (bert) or ``lm_head`` (roberta); maps (..., hidden) to (..., vocab)."""
        return self.cls.predictions if self.config.family == "bert" else self.lm_head

    def _sentence_from_first(self, first: torch.Tensor) -> torch.Tensor:
        """(batch, hidden) first-token states -> (batch, 2) next-sentence logits."""
        if not self.sentence_head:
            raise RuntimeError("this model was built without a sentence head (sentence_head=False)")
        return self.cls.seq_relationship(self.encoder.pooler(first))

    def _sparse_states(self, input_ids: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor | None,
                       token_type_ids: torch.Tensor | None) -> tuple:
        """Last-layer states where a loss reads them (the last layer runs only there): ``(states, targets,
        sentence_logits, boundaries)``, the (n_masked, hidden) states at the masked tokens and their (n_masked,)
        labels, the (batch, 2) logits of the NSP/SOP head (None without it) and with SBO the (n_masked, hidden) left
        and right span-boundary states and (n_masked,) offsets in the span (None without it)."""
        masked = labels.ne(IGNORE_INDEX)  # (batch, seq)
        if not (self.sentence_head or self.sbo_enabled):
            states = self.encoder.forward_selected(input_ids, masked, attention_mask, token_type_ids)
            return states, labels[masked], None, None
        selected = masked.clone()
        if self.sentence_head:
            selected[:, 0] = True  # the pooler reads the first token
        if self.sbo_enabled:
            rows, columns = masked.nonzero().unbind(1)  # (n_masked,) each, row-major like labels[masked]
            left, right = (edge[masked] for edge in span_boundaries(labels))  # (n_masked,) each
            selected[rows, left] = True
            selected[rows, right] = True
        states = self.encoder.forward_selected(input_ids, selected, attention_mask, token_type_ids)  # (n_sel, hidden)
        # Rows come in row-major order: a position's row in `states` is the count of selected positions before it.
        where = selected.flatten().cumsum(0).sub_(1).view_as(selected)  # (batch, seq)
        sentence_logits = self._sentence_from_first(states[where[:, 0]]) if self.sentence_head else None  # (batch, 2)
        boundaries = None
        if self.sbo_enabled:
            boundaries = (states[where[rows, left]], states[where[rows, right]], columns - left - 1)
        return states[where[masked]], labels[masked], sentence_logits, boundaries

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None) -> PretrainingOutput:
        """Encode and apply the heads (inputs as :meth:`Encoder.forward`'s). With ``labels`` (batch, seq), ``-100``
        where nothing is predicted, the MLM logits are computed at the labelled positions only (sparse prediction,
        rows in row-major order); None gives dense logits at every position."""
        hidden = self.encoder(input_ids, attention_mask, token_type_ids)  # (batch, seq, hidden)
        if labels is None:
            logits, targets = self.mlm_head(hidden), None
        else:
            selected = labels.ne(IGNORE_INDEX)  # (batch, seq)
            logits, targets = self.mlm_head(hidden[selected]), labels[selected]  # (n_masked, vocab), (n_masked,)
        sentence = self._sentence_from_first(hidden[:, 0]) if self.sentence_head else None  # (batch, 2)
        return PretrainingOutput(hidden=hidden, mlm_logits=logits, mlm_targets=targets, sentence_logits=sentence)

    def pretraining_loss(self, input_ids: torch.Tensor, labels: torch.Tensor,
                         attention_mask: torch.Tensor | None = None, token_type_ids: torch.Tensor | None = None,
                         sentence_labels: torch.Tensor | None = None) -> PretrainingLoss:
        """MLM (+ NSP or SOP, + SBO) losses of a collated batch (the arguments are the collator's batch keys);
        ``sentence_labels`` (batch,) is needed iff the model has a sentence head, and ignored otherwise."""
        if self.sentence_head and sentence_labels is None:
            raise ValueError("the model has a sentence head: pretraining_loss needs sentence_labels")
        states, targets, sentence_logits, boundaries = self._sparse_states(input_ids, labels, attention_mask,
                                                                           token_type_ids)
        head = self.mlm_head
        mlm_loss, mlm_acc = linear_cross_entropy(head.features(states), head.decoder.weight, head.bias, targets)
        loss = mlm_loss
        sentence_loss = sentence_acc = sbo_loss = sbo_acc = None
        n_sentence = 0
        if sentence_logits is not None:
            sentence_loss = cross_entropy(sentence_logits, sentence_labels)
            sentence_acc = accuracy(sentence_logits, sentence_labels)
            n_sentence = int(sentence_labels.ne(IGNORE_INDEX).sum())
            loss = loss + sentence_loss
        if boundaries is not None:
            sbo = self.sbo
            sbo_loss, sbo_acc = linear_cross_entropy(sbo.features(*boundaries), sbo.decoder.weight, sbo.bias, targets)
            loss = loss + sbo_loss
        return PretrainingLoss(loss, mlm_loss, sentence_loss, mlm_acc, sentence_acc, n_masked=targets.numel(),
                               n_sentence=n_sentence, sbo_loss=sbo_loss, sbo_accuracy=sbo_acc)


def count_parameters(model: nn.Module) -> dict[str, int]:
    """Parameters of a model, split into embeddings (word + position + token-type) and the rest; shared tensors (the
    tied decoder) count once, the MLM output bias as non-embedding. At the tiny size the vocabulary is most of it."""
    total = sum(p.numel() for p in model.parameters())  # parameters() yields shared tensors once
    embedding = sum(
        table.weight.numel()
        for module in model.modules()
        if isinstance(module, Embeddings)
        for table in (module.word_embeddings, module.position_embeddings, module.token_type_embeddings)
    )
    return {"total": total, "embedding": embedding, "non_embedding": total - embedding}
