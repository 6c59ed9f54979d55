"""Masked-language-model masking for BERT (static) and RoBERTa (dynamic), as pure functions.

Every random choice here is a hash of ``(seed, stream, sequence index, copy, position)`` (the span sampler's of
an attempt number instead of a position), never a draw from a stateful generator. The mask a sequence gets
therefore does not depend on which batch, DataLoader worker or process it lands in, on how far its batch was
padded, or on whether training was resumed: the same ``(seed, index, copy)`` always gives the same mask.

The two masking regimes differ only in which *copy* a sequence is masked with at a given epoch (:func:`mask_copy`):

- static (BERT): the data is masked ``dupe_factor`` times before training; epoch ``e`` reuses copy
  ``e % dupe_factor``, so over 40 epochs with 10 copies each mask is seen 4 times (RoBERTa, section 4.1).
- dynamic (RoBERTa): a new mask each time the sequence is fed, so the copy is the epoch itself.

Every scheme spends the same budget: ``max(1, round(n * mask_prob))`` of the ``n`` candidate (non-special,
non-padding) tokens, by Python's round-half-to-even as in BERT's code. A *word* is a run of candidates that begins
at a ``vocab.word_start`` token or right after a special token (a word never crosses [CLS] or [SEP]). The three
schemes (:data:`SCHEMES`) differ in which positions they choose and in how ``split`` replaces them:

- ``token`` (BERT's ``create_masked_lm_predictions``): exactly the budget of single tokens, those with the smallest
  hash keys; ``split`` decides per token between ``mask_id``, a random non-special id and the original id.
- ``whole-word`` (BERT's whole-word masking): whole words in the key order of their first token, a word that would
  overshoot the budget skipped, so the count ends within one word of the budget. BERT still decides the
  replacement per token (each token of a chosen word draws its own class); we keep that so this arm differs from
  ``token`` only in which positions are chosen.
- ``span`` (SpanBERT, Joshi et al. 2020, section 3.1): spans of whole words until the budget is spent. Each attempt
  draws a length in words from a geometric law (``span_p``, 0.2) truncated to 1..``span_max_words`` (10; mean 3.8
  words) and a start among the word starts; a span that would overlap a chosen token is redrawn, and the last one
  is cut so the count is exactly the budget. ``split`` then decides per *span* (a maximal run of chosen positions,
  as SpanBERT merges intervals): all its tokens become ``mask_id``, all random ids, or all stay. SpanBERT's code
  anchors a span at any token and lets it run over earlier spans; here every span is whole words and the budget is
  met exactly (:mod:`bvr.pretraining.spans`). Attempts are capped at ``SPAN_ATTEMPTS_PER_TOKEN`` times the budget,
  which binds only when ``mask_prob`` is close to 1. Drawn lengths follow the law, seen spans do not: redraws favour
  short spans and cuts shorten long ones (rows of 126 one-token words at 0.15: uncut spans average 3.3 words).

The collator that applies these masks to batches is :class:`bvr.pretraining.collator.PretrainingCollator`."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from bvr.errors import BvrError
from bvr.model.losses import IGNORE_INDEX
from bvr.pretraining.hashing import STREAM_CHOOSE, STREAM_CLASS, STREAM_TOKEN, uniform
from bvr.pretraining.spans import choose_spans, span_class_draw, span_length_cdf
from bvr.tokenization import VocabInfo

MODES = ("static", "dynamic")
SCHEMES = ("token", "whole-word", "span")

# --- Static versus dynamic ------------------------------------------------------------------------------------
# --------------------------------------------------------------------------------------------------------------


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise BvrError(f"unknown masking mode {mode!r}", where="masking.mode", hint=f"use one of {', '.join(MODES)}")


def check_dupe_factor(dupe_factor: int) -> None:
    if dupe_factor < 1:
        raise BvrError(f"dupe_factor must be at least 1, got {dupe_factor}", where="masking.dupe_factor",
                       hint="BERT used 10 static copies")


def mask_copy(mode: str, epoch: int, dupe_factor: int) -> int:
    """Which mask a sequence gets at zero-based ``epoch``: the copy number to pass to :func:`mask_batch`. Static
    (BERT) reuses ``dupe_factor`` masks fixed before training in turn; dynamic (RoBERTa) gives a fresh mask every
    time the sequence is fed, and ignores ``dupe_factor``."""
    check_mode(mode)
    if mode == "dynamic":
        return epoch
    check_dupe_factor(dupe_factor)
    return epoch % dupe_factor


def mask_exposure(mode: str, epochs: int, dupe_factor: int) -> dict[str, int]:
    """How many distinct masks each sequence sees over ``epochs`` passes, and how often each, for logging.

    ``min_times_seen`` and ``max_times_seen`` range over the masks actually used. Static, 40 epochs, 10 copies: 10
    masks seen 4 times each (RoBERTa Table 1). Dynamic (``dupe_factor`` ignored): ``epochs`` masks seen once each.
    """
    check_mode(mode)
    if epochs < 0:
        raise BvrError(f"epochs must not be negative, got {epochs}", where="masking.epochs")
    if mode == "dynamic":
        distinct = epochs
    else:
        check_dupe_factor(dupe_factor)
        distinct = min(epochs, dupe_factor)
    if distinct == 0:
        return {"distinct_masks": 0, "min_times_seen": 0, "max_times_seen": 0}
    return {"distinct_masks": distinct, "min_times_seen": epochs // distinct, "max_times_seen": -(-epochs // distinct)}


# --- Masking --------------------------------------------------------------------------------------------------
# --------------------------------------------------------------------------------------------------------------


def _specials(vocab: VocabInfo) -> tuple[np.ndarray, np.ndarray]:
    """(vocab_size,) bool, True at special ids, and the ids a random replacement may take (every other id)."""
    # pad and mask are added in case a hand-built VocabInfo leaves them out of special_ids.
    return _special_tables(vocab.vocab_size, tuple(sorted(set(vocab.special_ids) | {vocab.pad_id, vocab.mask_id})))


@lru_cache(maxsize=8)
def _special_tables(vocab_size: int, special_ids: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_specials`, read-only; cached because the collator asks for them every batch."""
    table = np.zeros(vocab_size, dtype=bool)
    table[list(special_ids)] = True
    pool = np.flatnonzero(~table)
    table.setflags(write=False)
    pool.setflags(write=False)
    return table, pool


def _choose_tokens(keys: np.ndarray, candidates: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """(batch, seq) bool: per row, the ``budget`` candidates with the smallest keys."""
    keys = np.where(candidates, keys, np.inf)  # (batch, seq); non-candidates sort last
    order = np.argsort(keys, axis=1, kind="stable")  # (batch, seq)
    taken = np.arange(keys.shape[1])[None, :] < budget[:, None]  # (batch, seq), by rank
    chosen = np.zeros_like(candidates)
    np.put_along_axis(chosen, order, taken, axis=1)
    return chosen


def _words(positions: np.ndarray, starts_word: np.ndarray) -> np.ndarray:
    """Word number of each candidate position: a word begins at a word-start token or after a gap (a special
    token), so a continuation piece right after [CLS] or [SEP] never joins a word across it."""
    gap = np.diff(positions, prepend=-2) != 1  # (n,)
    return np.cumsum(starts_word | gap) - 1  # (n,)


def _choose_words(
    input_ids: np.ndarray, keys: np.ndarray, candidates: np.ndarray, budget: np.ndarray, word_start: np.ndarray
) -> np.ndarray:
    """(batch, seq) bool: whole words chosen per row, as the module docstring says (a Python loop per row; only this
    mode needs one)."""
    chosen = np.zeros_like(candidates)
    for row in range(input_ids.shape[0]):
        positions = np.flatnonzero(candidates[row])
        if not len(positions):
            continue
        word = _words(positions, word_start[input_ids[row, positions]])  # (n,)
        first = np.flatnonzero(np.diff(word, prepend=-1))  # (n_words,) index of each word's first token
        lengths = np.diff(np.append(first, len(word)))  # (n_words,)
        taken = np.zeros(len(first), dtype=bool)
        total = 0
        for w in np.argsort(keys[row, positions[first]], kind="stable"):
            if total + lengths[w] <= budget[row]:
                taken[w] = True
                total += lengths[w]
                if total == budget[row]:
                    break
        chosen[row, positions[taken[word]]] = 1
    return chosen


def _replace(
    input_ids: np.ndarray, chosen: np.ndarray, draws: tuple[np.ndarray, np.ndarray], vocab: VocabInfo, split: tuple
) -> np.ndarray:
    """Masked copy of ``input_ids``: chosen positions become [MASK], a random non-special id, or stay."""
    class_draw, token_draw = draws  # (batch, seq) each
    # Thresholds on the class draw; a zero share is never drawn, even when the shares sum to 1 only within rounding.
    to_mask, to_random, to_keep = split
    below_mask = to_mask if to_random + to_keep > 0 else np.inf
    below_random = to_mask + to_random if to_keep > 0 else np.inf
    pool = _specials(vocab)[1]  # (n_pool,)
    random_ids = pool[np.minimum((token_draw * len(pool)).astype(np.int64), len(pool) - 1)]  # (batch, seq)
    masked = input_ids.copy()
    to_mask = chosen & (class_draw < below_mask)
    to_random = chosen & (class_draw >= below_mask) & (class_draw < below_random)
    masked[to_mask] = vocab.mask_id
    masked[to_random] = random_ids[to_random]
    return masked


@dataclass(frozen=True)
class MaskRule:
    """What is masked and how (the module docstring), checked when made (a bad value is refused naming its
    ``masking.`` key)."""

    mask_prob: float = 0.15  # the share of candidate tokens to predict
    split: tuple[float, float, float] = (0.8, 0.1, 0.1)  # chosen tokens (spans) to [MASK], random, left unchanged
    scheme: str = "token"  # one of SCHEMES
    span_p: float = 0.2  # the span scheme's lengths in words: geometric with this parameter,
    span_max_words: int = 10  # and at most this long

    def __post_init__(self) -> None:
        split = tuple(self.split)
        object.__setattr__(self, "split", split)
        if not 0.0 < self.mask_prob < 1.0:
            raise BvrError(f"mask_prob must lie strictly between 0 and 1, got {self.mask_prob}",
                           where="masking.mask_prob", hint="BERT and RoBERTa use 0.15")
        if len(split) != 3 or any(not share >= 0.0 for share in split) or abs(sum(split) - 1.0) > 1e-6:
            raise BvrError(
                f"split must be three non-negative shares ([MASK], random, unchanged) summing to 1, got {split}",
                where="masking.split", hint="BERT uses (0.8, 0.1, 0.1)")
        if self.scheme not in SCHEMES:
            raise BvrError(f"unknown masking scheme {self.scheme!r}", where="masking.scheme",
                           hint=f"use one of {', '.join(SCHEMES)}")
        if not 0.0 < self.span_p <= 1.0:
            raise BvrError(f"span_p must lie in (0, 1], got {self.span_p}", where="masking.span_p",
                           hint="SpanBERT uses 0.2")
        if self.span_max_words < 1:
            raise BvrError(f"span_max_words must be at least 1, got {self.span_max_words}",
                           where="masking.span_max_words", hint="SpanBERT uses 10")


MASK_RULE = MaskRule()
"""BERT's: 15% of the tokens, 80% [MASK] / 10% random / 10% kept."""


def mask_batch(input_ids: np.ndarray, indices: np.ndarray, copies: np.ndarray, vocab: VocabInfo, *, seed: int,
               rule: MaskRule = MASK_RULE) -> tuple[np.ndarray, np.ndarray]:
    """Mask a padded batch for masked-language modelling; a pure function of (seed, index, copy, position).

    ``input_ids`` is (batch, seq), padded with ``vocab.pad_id`` (ids outside the vocabulary are refused); ``indices``
    gives each sequence's index in the dataset and ``copies`` its copy number (:func:`mask_copy`), (batch,) each;
    ``seed`` is the run's masking seed; ``rule`` decides how many candidates (non-special, non-padding positions) are
    chosen, which, and what they become (the module docstring). Returns new (batch, seq) int64 arrays
    ``(masked_ids, labels)``, the labels holding the original id at chosen positions and -100 elsewhere.
    """
    input_ids = np.asarray(input_ids, dtype=np.int64)  # (batch, seq)
    if input_ids.size and (input_ids.min() < 0 or input_ids.max() >= vocab.vocab_size):
        raise BvrError(
            f"token ids range over [{input_ids.min()}, {input_ids.max()}] but the vocabulary has {vocab.vocab_size}",
            where="masking.input_ids", hint="the instances were made with another tokenizer; prepare the data again")
    rows = np.asarray(indices, dtype=np.int64)[:, None]  # (batch, 1)
    copy = np.asarray(copies, dtype=np.int64)[:, None]  # (batch, 1)
    cols = np.arange(input_ids.shape[1])[None, :]  # (1, seq)

    candidates = ~_specials(vocab)[0][input_ids]  # (batch, seq)
    n = candidates.sum(axis=1)  # (batch,)
    # max(1, round(n * p)), or 0 with no candidates; np.rint rounds half to even, as Python's round in BERT's code.
    budget = np.where(n > 0, np.maximum(1, np.rint(n * rule.mask_prob)).astype(np.int64), 0)  # (batch,)
    word_start = np.asarray(vocab.word_start, dtype=bool)  # (vocab_size,)
    if rule.scheme == "span":
        cdf = span_length_cdf(float(rule.span_p), int(rule.span_max_words))
        chosen = choose_spans(input_ids, candidates, budget, word_start, (seed, rows, copy), cdf)
        class_draw = span_class_draw(chosen, seed, rows, copy)  # (batch, seq)
    else:
        keys = uniform(seed, STREAM_CHOOSE, rows, copy, cols)  # (batch, seq)
        if rule.scheme == "whole-word":
            chosen = _choose_words(input_ids, keys, candidates, budget, word_start)
        else:
            chosen = _choose_tokens(keys, candidates, budget)
        class_draw = uniform(seed, STREAM_CLASS, rows, copy, cols)  # (batch, seq)

    draws = (class_draw, uniform(seed, STREAM_TOKEN, rows, copy, cols))
    masked = _replace(input_ids, chosen, draws, vocab, rule.split)
    labels = np.where(chosen, input_ids, IGNORE_INDEX)  # (batch, seq)
    return masked, labels
