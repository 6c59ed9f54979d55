"""Train, save, load and describe the two tokenizer families: BERT's WordPiece and RoBERTa's byte-level BPE."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class VocabInfo:
    """What the data path needs to know about a trained tokenizer's vocabulary.

    Attributes:
        family: "bert" (WordPiece) or "roberta" (byte-level BPE).
        vocab_size: number of ids, specials included.
        pad_id: padding id.
        unk_id: unknown-token id.
        cls_id: id that opens a sequence ([CLS] or <s>).
        sep_id: id that closes a segment ([SEP] or </s>).
        mask_id: the mask token's id ([MASK] or <mask>).
        special_ids: every special token's id; masking never chooses them.
        word_start: (vocab_size,) bool, True where a token begins a word (for whole-word masking).
    """

    family: str
    vocab_size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    special_ids: tuple[int, ...]
    word_start: np.ndarray
