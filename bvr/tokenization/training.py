"""Training a tokenizer of either family on an iterable of texts."""

from __future__ import annotations

import itertools
import json

import numpy as np
from tokenizers import Tokenizer

from bvr.errors import BvrError
from bvr.progress import bars
from bvr.tokenization.families import Texts, family_spec
from bvr.tokenization.stats import count_ids


def _non_empty(texts: Texts, replay: bool) -> Texts:
    """``texts``, refused when empty; held in a list when it must be read twice but can be read only once."""
    if replay and iter(texts) is texts:
        texts = list(texts)
    items = iter(texts)
    if (first := next(items, None)) is None:
        raise BvrError("no text to train the tokenizer on", where="texts", hint="check that the corpus has documents")
    return texts if items is not texts else itertools.chain([first], items)


def train_tokenizer(family: str, texts: Texts, *, vocab_size: int | None = None, min_frequency: int = 2,
                    show_progress: bool = True) -> Tokenizer:
    """Train a tokenizer of one family from text; the same texts and settings give the same tokenizer.json. Its
    post-processor is set, so ``encode(a, b)`` adds the specials.

    ``texts`` are strings, or batches (lists) of strings, which cut the Python-to-Rust overhead on large corpora.
    "bert" reads them twice (the first pass fixes the alphabet): pass something that starts over when iterated
    again (a list, a dataset); a one-shot iterator is first copied into memory. ``vocab_size`` counts the specials
    (None: the family's default); training stops short of it only when the text has no more pairs seen
    ``min_frequency`` times, and the base alphabet is always kept, so a size below it comes out larger.
    ``show_progress`` draws on a terminal only (:func:`bvr.progress.bars`): elsewhere the `tokenizers` bars draw
    nothing but leave three blank lines.
    """
    spec = family_spec(family)
    size = spec.default_vocab_size if vocab_size is None else vocab_size
    if size < spec.min_vocab_size:
        raise BvrError(f"vocab_size {size} is too small for {spec.name}", where="vocab_size",
                       hint=f"use at least {spec.min_vocab_size} (the special tokens plus the base alphabet)")
    if min_frequency < 1:
        raise BvrError(f"min_frequency {min_frequency} is below 1", where="min_frequency", hint="use 1 or more")
    texts = _non_empty(texts, replay=spec.scans_texts)
    trainer = spec.trainer(size, min_frequency, bars(show_progress), texts)
    tokenizer = spec.build()
    tokenizer.train_from_iterator(texts, trainer=trainer)
    # Only the family's special tokens stay added tokens; the pinned ones stay ordinary vocabulary entries.
    keep, data = set(map(str, spec.special_tokens)), json.loads(tokenizer.to_str())
    data["added_tokens"] = [token for token in data["added_tokens"] if token["content"] in keep]
    tokenizer = Tokenizer.from_str(json.dumps(data))
    tokenizer.post_processor = spec.post_processor(tokenizer)
    return tokenizer


def token_counts(tokenizer: Tokenizer, texts: Texts) -> np.ndarray:
    """How often each id occurs in ``texts`` (strings or batches of strings), special tokens not added: (vocab,)."""
    counts = np.zeros(tokenizer.get_vocab_size(), dtype=np.int64)
    for batch in texts:
        count_ids(tokenizer, [batch] if isinstance(batch, str) else list(batch), counts)
    return counts


def count_at_percentile(counts: np.ndarray, percentile: float) -> int:
    """The count of the rarest token needed to cover ``percentile`` of the text: tokens ranked from most to least
    frequent, the first at which their running share of all occurrences reaches ``percentile``.

    >>> count_at_percentile(np.array([50, 0, 10, 7, 3]), 0.8)
    10
    >>> count_at_percentile(np.array([50, 0, 10, 7, 3]), 0.95)
    7
    """
    ranked = np.sort(counts)[::-1]
    covered = np.cumsum(ranked) / ranked.sum()  # share of the text covered by the tokens up to each rank
    return int(ranked[min(len(ranked) - 1, int(np.searchsorted(covered, percentile - 1e-12)))])


def size_by_frequency(family: str, texts: Texts, *, max_size: int, min_count: int, percentile: float = 0.95,
                      min_frequency: int = 2, granularity: int = 128) -> tuple[Tokenizer, dict[str, float]]:
    """The tokenizer of the largest vocabulary (up to ``max_size``, a multiple of ``granularity``) in which the
    tokens that make up ``percentile`` of ``texts`` each occur at least ``min_count`` times
    (:func:`count_at_percentile`, special tokens left out; ELC-BERT's rule: the 95th-percentile token seen about
    100 times); the smallest size when none passes. Bisection over sizes, training a tokenizer at each: a smaller
    vocabulary splits words into more frequent pieces, so the count at the percentile rises as the size falls.

    ``texts`` must start over when iterated again (a list, :class:`~bvr.pretraining.prepare.SentenceBatches`).
    Returns the tokenizer and a record of the search: the size chosen, its count at the percentile, the tries.
    """
    spec = family_spec(family)
    tries: dict[int, int] = {}

    def trained(size: int) -> Tokenizer:
        tokenizer = train_tokenizer(family, texts, vocab_size=size, min_frequency=min_frequency, show_progress=False)
        counts = token_counts(tokenizer, texts)
        specials = [tokenizer.token_to_id(str(token)) for token in spec.special_tokens]
        tries[size] = count_at_percentile(np.delete(counts, [i for i in specials if i is not None]), percentile)
        return tokenizer

    best, best_size = trained(max_size), max_size
    if tries[max_size] < min_count:
        # Bisection in units of granularity: low passes (or is the floor), high fails; each middle lies between.
        low, high = max(1, -(-spec.min_vocab_size // granularity)), -(-max_size // granularity)
        best, best_size = trained(low * granularity), low * granularity
        while high - low > 1:
            middle = (low + high) // 2
            candidate = trained(middle * granularity)
            if tries[middle * granularity] >= min_count:
                low, best, best_size = middle, candidate, middle * granularity
            else:
                high = middle
    record = {"rule_min_count": min_count, "rule_percentile": percentile, "rule_size": best.get_vocab_size(),
              "rule_count_at_percentile": tries[best_size], "rule_tries": len(tries)}
    return best, record
