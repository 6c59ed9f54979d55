"""Sentence and sentence-pair encoding (classification and regression tasks), with the tokenizer's own template."""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer

from bvr.tasks.readers.common import Example
from bvr.tokenization import plain_tokenizer


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
