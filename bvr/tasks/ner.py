"""CoNLL-2003 named-entity recognition between reading (:mod:`bvr.tasks.readers.conll`) and scoring
(:mod:`bvr.tasks.ner_metric`): :func:`encode_ner` labels the first sub-token of each pre-split word for either
tokenizer family, and :func:`predictions_to_tags` and :func:`labels_to_tags` turn a model's output back into tags.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from bvr.errors import BvrError
from bvr.model.losses import IGNORE_INDEX
from bvr.tasks.readers.conll import Sentence
from bvr.tokenization import plain_tokenizer

_WORD_PREFIX = {"bert": "", "roberta": " "}
"""What each family's words need in front so that every word is encoded as a word start: byte-level BPE marks a word
start by the space before it (``Ġ``; RoBERTa's ``add_prefix_space=True`` for pre-split input gives every word, the
first included, that space); WordPiece marks continuations instead and needs nothing."""


# --- sub-token alignment -------------------------------------------------------------------------------------


def align_labels(word_ids: Sequence[int | None], word_labels: Sequence[int]) -> list[int]:
    """Label each word's first sub-token; every later sub-token and every special gets :data:`IGNORE_INDEX`.

    ``word_ids`` holds per token the index of the word it came from; None (or a negative index) for specials.

    >>> align_labels([None, 0, 0, 1, None], [3, 5])
    [-100, 3, -100, 5, -100]
    """
    labels = []
    seen: set[int] = set()
    for word_id in word_ids:
        if word_id is None or word_id < 0 or word_id in seen:
            labels.append(IGNORE_INDEX)
        else:
            labels.append(word_labels[word_id])
            seen.add(word_id)
    return labels


_NER_KEYS = ("input_ids", "attention_mask", "token_type_ids", "labels", "word_ids", "truncated_words",
             "untokenized_words")


def encode_ner(tokenizer: Tokenizer, family: str, sentences: Iterable[Sentence | tuple[list[str], list[str]]],
               label_to_id: Mapping[str, int], max_length: int) -> dict[str, list]:
    """Tokenize pre-split sentences and label the first sub-token of each word.

    Each word is encoded as a word start (:data:`_WORD_PREFIX`). Sequences longer than ``max_length`` are cut; the
    words that lose all their tokens are counted in ``truncated_words``, and words the tokenizer turns into no token
    at all (WordPiece drops some control and zero-width characters) in ``untokenized_words``. Nothing is padded; the
    tokenizer's own truncation and padding settings are ignored. Per sentence: ``input_ids``, ``attention_mask``,
    ``token_type_ids``, ``labels`` (first sub-tokens carry the word's id, the rest :data:`IGNORE_INDEX`),
    ``word_ids`` (None for specials), ``truncated_words`` and ``untokenized_words`` (counts).
    """
    if family not in _WORD_PREFIX:
        raise BvrError(f"unknown tokenizer family {family!r}", where="family", hint=f"use one of {list(_WORD_PREFIX)}")
    tokenizer = plain_tokenizer(tokenizer)
    specials = tokenizer.num_special_tokens_to_add(is_pair=False)
    if max_length <= specials:
        raise BvrError(f"max_length {max_length} leaves no room for a token", where="max_length")
    sentences = [(list(tokens), list(tags)) for tokens, tags, *_ in sentences]
    words = [[_WORD_PREFIX[family] + token for token in tokens] for tokens, _ in sentences]
    encodings = tokenizer.encode_batch(words, is_pretokenized=True, add_special_tokens=False) if words else []
    features: dict[str, list] = {key: [] for key in _NER_KEYS}
    for (tokens, tags), encoding in zip(sentences, encodings, strict=True):
        if unknown := sorted(set(tags) - set(label_to_id)):
            raise BvrError(f"tags {unknown} are not in the label list", where="labels", hint="build it from all splits")
        tokenized = {i for i in encoding.word_ids if i is not None}
        encoding.truncate(max_length - specials)  # then the specials are added: the whole fits max_length
        encoding = tokenizer.post_process(encoding)
        kept = {i for i in encoding.word_ids if i is not None}
        values = (encoding.ids, encoding.attention_mask, encoding.type_ids,
                  align_labels(encoding.word_ids, [label_to_id[tag] for tag in tags]), encoding.word_ids,
                  len(tokenized - kept), len(tokens) - len(tokenized))
        for key, value in zip(_NER_KEYS, values, strict=True):
            features[key].append(value)
    return features


# --- model output back to tags -------------------------------------------------------------------------------


def _as_numpy(values: Any) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().numpy()
    return np.asarray(values)


def labels_to_tags(labels: Any, id_to_label: Sequence[str] | Mapping[int, str]) -> list[list[str]]:
    """Gold word tags from (batch, seq) aligned labels: per row, the tags of its labelled positions in order."""
    rows = _as_numpy(labels)
    return [[id_to_label[int(label)] for label in row[row != IGNORE_INDEX]] for row in rows]


def predictions_to_tags(logits: Any, labels_with_ignore: Any,
                        id_to_label: Sequence[str] | Mapping[int, str]) -> list[list[str]]:
    """Predicted word tags from (batch, seq, num_labels) logits: the arg-max label at each word's first sub-token.

    Positions where the (batch, seq) gold labels hold :data:`IGNORE_INDEX` are skipped, so the predictions line up
    with :func:`labels_to_tags` of the same labels.
    """
    predicted = _as_numpy(logits).argmax(axis=-1)  # (batch, seq)
    labels = _as_numpy(labels_with_ignore)
    return [[id_to_label[int(label)] for label in row[gold != IGNORE_INDEX]]
            for row, gold in zip(predicted, labels, strict=True)]
