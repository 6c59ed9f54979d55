"""Training a tokenizer of either family on an iterable of texts."""

from __future__ import annotations

import itertools
import json

from tokenizers import Tokenizer

from bvr.errors import BvrError
from bvr.tokenization.families import Texts, TokenizerFamily, family_spec


def _check_training_args(family: TokenizerFamily, vocab_size: int, min_frequency: int) -> None:
    if vocab_size < family.min_vocab_size:
        raise BvrError(
            f"vocab_size {vocab_size} is too small for {family.name}",
            where="vocab_size",
            hint=f"use at least {family.min_vocab_size} (the special tokens plus the base alphabet)",
        )
    if min_frequency < 1:
        raise BvrError(f"min_frequency {min_frequency} is below 1", where="min_frequency", hint="use 1 or more")


def _non_empty(texts: Texts, replay: bool) -> Texts:
    """``texts``, refused when empty; held in a list when it must be read twice but can be read only once."""
    if replay and iter(texts) is texts:
        texts = list(texts)
    items = iter(texts)
    if (first := next(items, None)) is None:
        raise BvrError("no text to train the tokenizer on", where="texts", hint="check that the corpus has documents")
    return texts if items is not texts else itertools.chain([first], items)


def _release_pins(tokenizer: Tokenizer, family: TokenizerFamily) -> Tokenizer:
    """Keep only the family's special tokens as added tokens; pinned ones stay ordinary vocabulary entries."""
    keep = set(map(str, family.special_tokens))
    data = json.loads(tokenizer.to_str())
    data["added_tokens"] = [token for token in data["added_tokens"] if token["content"] in keep]
    return Tokenizer.from_str(json.dumps(data))


def train_tokenizer(
    family: str,
    texts: Texts,
    *,
    vocab_size: int | None = None,
    min_frequency: int = 2,
    show_progress: bool = True,
    length: int | None = None,
) -> Tokenizer:
    """Train a tokenizer of one family from text; the same texts and settings give the same tokenizer.json.

    Args:
        family: a key of :data:`~bvr.tokenization.families.FAMILIES` ("bert" or "roberta").
        texts: strings, or batches (lists) of strings; batches cut the Python-to-Rust overhead on large corpora.
            "bert" reads them twice (the first pass fixes the alphabet): pass something that starts over when
            iterated again (a list, a dataset); a one-shot iterator is first copied into memory.
        vocab_size: ids in the result, specials included; the family's default when None. Training stops short of
            it only when the text has no more pairs seen ``min_frequency`` times; the base alphabet is always
            kept, so a size below it comes out larger.
        min_frequency: how often a pair must occur to be merged.
        show_progress: draw the `tokenizers` progress bars.
        length: how many items ``texts`` holds, for the progress bar only.

    Returns:
        The trained tokenizer, with the family's post-processor set, so ``encode(a, b)`` adds the specials.

    Raises:
        BvrError: the family is unknown, the sizes are out of range, or ``texts`` is empty.
    """
    spec = family_spec(family)
    size = spec.default_vocab_size if vocab_size is None else vocab_size
    _check_training_args(spec, size, min_frequency)
    texts = _non_empty(texts, replay=spec.scans_texts)
    trainer = spec.trainer(size, min_frequency, show_progress, texts)
    tokenizer = spec.build()
    tokenizer.train_from_iterator(texts, trainer=trainer, length=length)
    tokenizer = _release_pins(tokenizer, spec)
    tokenizer.post_processor = spec.post_processor(tokenizer)
    return tokenizer
