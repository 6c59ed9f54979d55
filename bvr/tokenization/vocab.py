"""What the data path needs to know about a tokenizer's vocabulary: its special ids and word starts."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from bvr.tokenization.families import added_special_ids, family_spec, special_token_ids


@dataclass(frozen=True)
class VocabInfo:
    """What the data path needs to know about a trained tokenizer's vocabulary (:func:`vocab_info`).

    Attributes:
        vocab_size: number of ids, specials included.
        cls_id: id that opens a sequence ([CLS] or <s>); ``sep_id`` closes a segment ([SEP] or </s>).
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


def vocab_info(tokenizer: Tokenizer, family: str) -> VocabInfo:
    """The :class:`VocabInfo` of a tokenizer of ``family``.

    ``word_start`` marks the tokens that begin a word, for whole-word masking. Specials always do. WordPiece: every
    token not starting with ``##``. Byte-level BPE: a token whose first byte is whitespace (``Ġ`` is the byte-level
    space) or ASCII punctuation, which the GPT-2 pre-tokenizer always splits off, so punctuation is its own word as
    it is under BertPreTokenizer. The vocabulary cannot tell a word opening a text (which has no ``Ġ``) from the
    rest of a word; such a token counts as a continuation, so callers wanting it should also mark position 0.
    """
    spec = family_spec(family)
    ids = special_token_ids(tokenizer, spec)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    word_start = np.zeros(size, dtype=bool)  # (vocab_size,)
    for token, i in tokenizer.get_vocab(with_added_tokens=True).items():
        word_start[i] = spec.word_start(token)
    special_ids = tuple(sorted(set(ids.values()) | added_special_ids(tokenizer)))
    word_start[list(special_ids)] = True
    role = {name: ids[token] for name, token in spec.roles.items()}
    return VocabInfo(family=spec.name, vocab_size=size, pad_id=role["pad_token"], unk_id=role["unk_token"],
                     cls_id=role["cls_token"], sep_id=role["sep_token"], mask_id=role["mask_token"],
                     special_ids=special_ids, word_start=word_start)
