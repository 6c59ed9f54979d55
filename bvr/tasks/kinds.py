"""Task kinds: everything one kind of task adds to the shared encoder and fine-tuning loop, in one object.

A :class:`Kind` says how a split's examples are encoded into feature columns, which of those columns its batches
carry and how list-valued ones are padded, and supplies the head, the loss, the evaluation and the trivial
baseline; :data:`KINDS` maps each kind of :data:`~bvr.tasks.registry.TASK_KINDS` to its object:

========================  ============================================  ===========================  ==================
kind                      head                                          loss                         evaluation
========================  ============================================  ===========================  ==================
classification            first token: dense + tanh, dropout, linear    cross-entropy                make_metrics
regression (STS-B)        the same, one output                          mean squared error           make_metrics
tagging (CoNLL-2003)      per token: dropout, linear                    cross-entropy, -100 skipped  EntityF1
span (SQuAD)              per token: linear to start and end scores     mean of start and end CE     squad_scores
========================  ============================================  ===========================  ==================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from bvr.config import DataSettings
from bvr.model.encoder import Encoder
from bvr.model.losses import IGNORE_INDEX, cross_entropy
from bvr.tasks.batching import PAD_VALUES
from bvr.tasks.evaluators import (
    ClassificationEvaluator,
    Evaluator,
    RegressionEvaluator,
    SpanEvaluator,
    TaggingEvaluator,
)
from bvr.tasks.glue_metrics import baseline_note, majority_baseline
from bvr.tasks.heads import SequenceHead, TokenHead, take_pooler
from bvr.tasks.ner import encode_ner
from bvr.tasks.readers.common import Example
from bvr.tasks.readers.squad_json import references, squad_version
from bvr.tasks.registry import TaskSpec
from bvr.tasks.splits import TaskData
from bvr.tasks.squad.metric import squad_scores
from bvr.tasks.squad.windows import encode_squad
from bvr.tokenization import plain_tokenizer

HELDOUT = "heldout"
"""The evaluation split held out of SQuAD v2.0's training side to choose the null threshold on
(:func:`bvr.tasks.data.load_task_data`)."""
SELECTION = "selection"
"""The evaluation split held out of the training examples to choose a fine-tuning grid's point on
(``finetune.selection_examples``; :func:`bvr.tasks.data.load_task_data`): never trained on, never reported."""


class Kind:
    """What one task kind adds to the shared encoder and fine-tuning loop (see the module docstring)."""

    # Feature columns its batches carry (the attention mask is rebuilt from the lengths).
    columns: tuple[str, ...] = ("input_ids", "token_type_ids", "labels")
    pad_values: Mapping[str, int | None] = PAD_VALUES  # how its list-valued columns are padded (see collate)
    evaluator_type: type[Evaluator]  # scores one split, built from the task's spec (the span kind builds its own)

    def encode(self, spec: TaskSpec, tokenizer: Tokenizer, family: str, examples: list,
               settings: DataSettings) -> dict[str, list]:
        """One split's examples as feature columns, for a tokenizer of ``family`` ('bert' or 'roberta')."""
        raise NotImplementedError

    def head(self, encoder: Encoder, data: TaskData) -> nn.Module:
        """A new head for ``encoder`` (which it may take the pooler from)."""
        raise NotImplementedError

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def evaluator(self, data: TaskData, split: str) -> Evaluator:
        return self.evaluator_type(data.spec)

    def evaluators(self, data: TaskData) -> dict[str, Evaluator]:
        return {split: self.evaluator(data, split) for split in data.evals}

    def baseline(self, data: TaskData) -> dict[str, float]:
        """Scores of the trivial baseline on every evaluation split, keyed ``split/metric``; empty if none."""
        return {}

    def baseline_note(self, data: TaskData) -> str | None:
        """One sentence saying what the baseline predicts."""
        return None


def encode_sentences(tokenizer: Tokenizer, examples: Sequence[Example], max_length: int) -> dict[str, list]:
    """Encode GLUE sentences or pairs with the tokenizer's own template (BERT ``[CLS] a [SEP] b [SEP]`` with token
    types 0 then 1; RoBERTa ``<s> a </s></s> b </s>``), cutting the longer text first to fit ``max_length``: per
    example ``input_ids``, ``token_type_ids``, ``labels`` (class ids or scores) and ``truncated`` (bool).
    """
    truncating = plain_tokenizer(tokenizer)  # a copy: truncation is tokenizer state; it never pads
    truncating.enable_truncation(max_length, strategy="longest_first")
    inputs = [(ex.text_a, ex.text_b) if ex.text_b is not None else ex.text_a for ex in examples]
    encodings = truncating.encode_batch(inputs) if inputs else []
    return {"input_ids": [encoding.ids for encoding in encodings],
            "token_type_ids": [encoding.type_ids for encoding in encodings],
            "labels": [example.label for example in examples],
            "truncated": [bool(encoding.overflowing) for encoding in encodings]}


class ClassificationKind(Kind):
    """One label per example, from the first token."""

    evaluator_type = ClassificationEvaluator

    def encode(self, spec: TaskSpec, tokenizer: Tokenizer, family: str, examples: list,
               settings: DataSettings) -> dict[str, list]:
        return encode_sentences(tokenizer, examples, settings.max_length)

    def head(self, encoder: Encoder, data: TaskData) -> nn.Module:
        return SequenceHead(encoder.config, data.spec.num_labels, take_pooler(encoder))

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(logits.float(), batch["labels"])

    def baseline(self, data: TaskData) -> dict[str, float]:
        train = data.train_labels()
        return {f"{name}/{metric}": value for name, split in data.evals.items()
                for metric, value in majority_baseline(data.spec, train, [ex.label for ex in split.examples]).items()}

    def baseline_note(self, data: TaskData) -> str | None:
        return baseline_note(data.spec, data.train_labels())


class RegressionKind(ClassificationKind):
    """One score per example (STS-B), from the first token; the baseline predicts the training mean."""

    evaluator_type = RegressionEvaluator

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.mse_loss(logits.float(), batch["labels"].float())


class TaggingKind(Kind):
    """One label per word, read at each word's first sub-token."""

    pad_values = {**PAD_VALUES, "labels": IGNORE_INDEX}  # token labels: padding is never scored
    evaluator_type = TaggingEvaluator

    def encode(self, spec: TaskSpec, tokenizer: Tokenizer, family: str, examples: list,
               settings: DataSettings) -> dict[str, list]:
        label_to_id = {label: index for index, label in enumerate(spec.label_names or ())}
        return encode_ner(tokenizer, family, examples, label_to_id, settings.max_length)

    def head(self, encoder: Encoder, data: TaskData) -> nn.Module:
        return TokenHead(encoder.config, data.spec.num_labels)

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten())

    def baseline(self, data: TaskData) -> dict[str, float]:
        # Tagging every word "O" (the majority tag) finds no entity: precision, recall and F1 are all 0.
        return {f"{split}/{metric}": 0.0 for split in data.evals for metric in ("f1", "precision", "recall")}

    def baseline_note(self, data: TaskData) -> str | None:
        return "tags every word 'O' (the majority tag), so it finds no entity"


def _version(data: TaskData) -> str:
    """The task's SQuAD version, by the rule the reader applies to a file."""
    return squad_version(example for split in (data.train, *data.evals.values()) for example in split.examples)


class SpanKind(Kind):
    """An answer span in a context: start and end scores at every token of every window."""

    columns = ("input_ids", "token_type_ids", "start_positions", "end_positions")

    def encode(self, spec: TaskSpec, tokenizer: Tokenizer, family: str, examples: list,
               settings: DataSettings) -> dict[str, list]:
        return encode_squad(tokenizer, examples, max_length=settings.max_length, stride=settings.stride)

    def head(self, encoder: Encoder, data: TaskData) -> nn.Module:
        return TokenHead(encoder.config, 2, dropout=False)  # start and end scores

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        start, end = logits.float().unbind(-1)  # (batch, seq) each
        return (F.cross_entropy(start, batch["start_positions"]) + F.cross_entropy(end, batch["end_positions"])) / 2

    def evaluator(self, data: TaskData, split: str) -> Evaluator:
        return SpanEvaluator(data.spec, data.evals[split], _version(data), data.settings.null_threshold)

    def evaluators(self, data: TaskData) -> dict[str, Evaluator]:
        """Every split's evaluator; with a held-out split, the others take their null threshold from its."""
        evaluators = super().evaluators(data)
        for split, evaluator in evaluators.items():
            if HELDOUT in evaluators and split != HELDOUT:
                evaluator.threshold_from = evaluators[HELDOUT]
        return evaluators

    def baseline(self, data: TaskData) -> dict[str, float]:
        # Answering nothing: 0 on v1.1; on v2.0 it scores the share of unanswerable questions.
        version, out = _version(data), {}
        for split, encoded in data.evals.items():
            refs = references(encoded.examples)
            scores = squad_scores({qid: "" for qid in refs}, refs, version)
            out.update({f"{split}/exact_match": float(scores["exact"]), f"{split}/f1": float(scores["f1"])})
        return out

    def baseline_note(self, data: TaskData) -> str | None:
        return "answers nothing (the empty string) for every question"


KINDS: dict[str, Kind] = {"classification": ClassificationKind(), "regression": RegressionKind(),
                          "tagging": TaggingKind(), "span": SpanKind()}
