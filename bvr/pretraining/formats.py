"""The four input formats of RoBERTa (section 4.2): tokenized documents in, pretraining instances out.

A shard is a sequence of documents; a document is a sequence of sentences; a sentence is a 1-D array of token
ids without specials. :func:`create_instances` turns a shard into columns ``input_ids`` (int32 arrays),
``token_type_ids`` (int8 arrays) and ``sentence_label``, the sentence label of the objective (NSP: 0 = IsNext,
1 = NotNext; SOP: 0 = in order, 1 = swapped; -100 = none, ignored by the loss), every sequence at most
``max_length`` long with the family's specials around it (:class:`Template`). The pair formats are in
:mod:`bvr.pretraining.pairs`, the packed ones here.

- ``segment-pair`` (BERT's): whole sentences accumulate into a chunk until it reaches a target length (the pair
  budget, or with probability ``short_seq_prob`` a random shorter one, so that pretraining also sees short
  inputs). The target is drawn once per document, as BERT's ``create_pretraining_data.py`` sets
  ``target_seq_length``, so ``short_seq_prob`` is the share of documents, not of chunks, whose pairs aim short.
  The chunk is cut at a random sentence boundary into A and B. With NSP, half the time B is replaced by a span
  starting at a random sentence of another document and the chunk's unused sentences are read again (NotNext).
  With SOP (ALBERT, Lan et al. 2020, section 4.1.2), half the time A and B swap places (label 1), B never from
  another document.
- ``sentence-pair``: A is one sentence; B is the next sentence (IsNext) or, with NSP and probability 0.5, a
  random sentence of another document (NotNext, the unused next sentence read again as the next A). With SOP the
  two consecutive sentences are swapped half the time.
- ``full-sentences``: whole sentences packed contiguously up to the budget, crossing document boundaries with
  ``Template.doc_sep_id`` between documents (it counts toward the length).
- ``doc-sentences``: the same, but a sequence never crosses a document boundary.

Decisions worth knowing:

- Truncation. A pair over its budget loses tokens from the longer segment, one at a time, front or back by a fair
  coin (BERT's rule), in closed form: a truncated IsNext pair is still in order, not always adjacent. SOP swaps
  before truncating, so the first segment keeps the larger half whatever the label (no length cue to the order).
- Lone units. A chunk of one sentence (``segment-pair``) or a document's last sentence (``sentence-pair``) that is
  to get its true continuation is cut at a random token into A and B; a lone one-token unit is left out. BERT's
  script gives such a unit a NotNext B, which on our short Wikipedia documents made 57% of the pairs NotNext;
  deciding the label first keeps 50/50. With SOP a cut unit is swapped by the same coin as any other pair.
- Single-document shards (a split's tail) make only IsNext pairs rather than stop a run; the prepared data's label
  counts show the imbalance.
- Long sentences. In the packed formats a sentence over the budget starts a new sequence and is split across as
  many as it needs; its last piece is packed with what follows. Nothing is dropped.
- Document ends (``doc-sentences``). A document's last, usually short, sequence is neither dropped (a bias against
  document endings) nor padded here. Short sequences mean fewer tokens per step than ``full-sentences`` (mean
  length 96.7 against 112.0 at max_length 128 on 3,000 Wikipedia documents), which RoBERTa corrected by
  "dynamically increasing the batch size": ``training.tokens_per_batch``
  (:class:`bvr.pretraining.data.TokenBudgetSampler`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from bvr.errors import BvrError
from bvr.ignore_index import IGNORE_INDEX
from bvr.pretraining.instances import IN_ORDER, IS_NEXT, Columns, Template
from bvr.pretraining.pairs import Pairing, segment_pairs, sentence_pairs

FORMATS = ("segment-pair", "sentence-pair", "full-sentences", "doc-sentences")
PAIR_FORMATS = ("segment-pair", "sentence-pair")
OBJECTIVES = ("none", "nsp", "sop")
_OBJECTIVE_NAMES = {"nsp": "next-sentence prediction", "sop": "sentence-order prediction"}


def create_instances(documents: Sequence[Sequence[np.ndarray]], fmt: str, *, max_length: int, objective: str,
                     template: Template, rng: random.Random, short_seq_prob: float = 0.1) -> dict[str, list]:
    """Turns a shard of tokenized documents into pretraining instances in one input format (:data:`FORMATS`): the
    columns the module docstring describes, one entry per instance.

    Empty documents and empty sentences are ignored; ``max_length`` counts the specials. ``objective``
    (:data:`OBJECTIVES`): ``nsp`` samples NotNext pairs, ``sop`` swaps consecutive segments; both need a pair format.
    ``rng`` is the only source of randomness: the same state gives the same output. ``short_seq_prob``
    (``segment-pair`` only) is the probability that a document's chunks aim at a random shorter length (drawn once
    per document, as BERT). Settings that cannot make instances are refused (:func:`_check_arguments`).
    """
    _check_arguments(fmt, max_length=max_length, objective=objective, template=template, short_seq_prob=short_seq_prob)
    docs = []  # as int32 sentence arrays, without empty sentences or empty documents
    for doc in documents:
        sentences = [np.asarray(s, dtype=np.int32) for s in doc if len(s) > 0]
        if any(s.ndim != 1 for s in sentences):
            raise ValueError("every sentence must be a 1-D array of token ids")
        if sentences:
            docs.append(sentences)
    out = Columns(template)
    label = {"none": IGNORE_INDEX, "nsp": IS_NEXT, "sop": IN_ORDER}[objective]
    pairing = Pairing(label=label, not_next=objective == "nsp" and len(docs) >= 2, swap=objective == "sop")
    if fmt == "segment-pair":
        segment_pairs(docs, max_length - template.pair_overhead, pairing, rng, short_seq_prob, out)
    elif fmt == "sentence-pair":
        sentence_pairs(docs, max_length - template.pair_overhead, pairing, rng, out)
    else:
        _pack(docs, max_length - template.single_overhead, fmt == "full-sentences", template.doc_sep_id, out)
    return out.as_dict()


def _check_arguments(fmt: str, *, max_length: int, objective: str, template: Template, short_seq_prob: float) -> None:
    """Refuses settings that cannot make instances, naming the config key to change."""
    if fmt not in FORMATS:
        raise BvrError(f"unknown input format {fmt!r}", where="data.input_format",
                       hint=f"choose one of {', '.join(FORMATS)}")
    if objective not in OBJECTIVES:
        raise BvrError(f"unknown sentence objective {objective!r}", where="data.sentence_objective",
                       hint=f"choose one of {', '.join(OBJECTIVES)}")
    if objective != "none" and fmt not in PAIR_FORMATS:
        raise BvrError(
            f"input format {fmt!r} has one segment per sequence and cannot carry {_OBJECTIVE_NAMES[objective]}",
            where="data.sentence_objective", hint=f"set it to none, or use a pair format ({', '.join(PAIR_FORMATS)})")
    overhead = template.pair_overhead if fmt in PAIR_FORMATS else template.single_overhead
    if max_length < overhead + 2:
        raise BvrError(
            f"max_length {max_length} leaves fewer than 2 tokens beside the {overhead} special tokens of {fmt!r}",
            where="data.max_length", hint=f"use at least {overhead + 2}")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise BvrError(f"short_seq_prob {short_seq_prob} is not a probability", where="data.short_seq_prob")


# -------------------------------------------------------------------------------------------- packed formats


def _pack(docs: list[list[np.ndarray]], budget: int, cross_documents: bool, doc_sep_id: int, out: Columns) -> None:
    """FULL-SENTENCES (``cross_documents``) or DOC-SENTENCES: whole sentences packed up to ``budget`` tokens."""
    separator = np.array([doc_sep_id], dtype=np.int32)
    pieces: list[np.ndarray] = []
    length = 0
    for doc in docs:
        if pieces and cross_documents:
            if length + 1 + len(doc[0]) <= budget:
                pieces.append(separator)
                length += 1
            else:
                # The document starts the next sequence; a separator there would stand next to nothing.
                out.add_single(pieces)
                pieces, length = [], 0
        for sentence in doc:
            if length + len(sentence) <= budget:
                pieces.append(sentence)
                length += len(sentence)
                continue
            if pieces:
                out.add_single(pieces)
            # A sentence longer than the budget fills whole sequences; its tail opens the next one.
            n_full = (len(sentence) - 1) // budget
            for k in range(n_full):
                out.add_single([sentence[k * budget : (k + 1) * budget]])
            pieces = [sentence[n_full * budget :]]
            length = len(pieces[0])
        if pieces and not cross_documents:
            out.add_single(pieces)
            pieces, length = [], 0
    if pieces:
        out.add_single(pieces)
