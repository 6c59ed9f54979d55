"""SpanBERT's span scheme (:mod:`bvr.pretraining.masking` describes it): span lengths in words from a truncated
geometric law, starts at word starts, overlaps redrawn, the last span cut to the budget."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

from bvr.pretraining.hashing import STREAM_SPAN_CLASS, STREAM_SPAN_LENGTH, STREAM_SPAN_START, uniform

SPAN_ATTEMPTS_PER_TOKEN = 20
"""The span scheme gives up on a row after this many attempts per token of its budget."""
SpanDraws = Callable[[int, int], tuple[np.ndarray, np.ndarray]]
"""``draws(lo, hi)``: the span sampler's (length, start) uniform draws of attempts ``lo`` to ``hi - 1``."""


@lru_cache(maxsize=8)
def span_length_cdf(span_p: float, span_max_words: int) -> np.ndarray:
    """Cumulative distribution of span lengths in words, (span_max_words,) read-only float64 whose entry ``l - 1`` is
    P(length <= l), the last exactly 1: geometric with success probability ``span_p`` (SpanBERT: 0.2), truncated at
    ``span_max_words`` (SpanBERT: 10) and renormalised.

    Example:
        >>> cdf = span_length_cdf(0.2, 10)
        >>> round(float(cdf[0]), 4), round(float(np.diff(cdf, prepend=0.0) @ np.arange(1, 11)), 2)  # P(1), mean
        (0.2241, 3.8)
    """
    weights = span_p * (1.0 - span_p) ** np.arange(span_max_words)  # (span_max_words,)
    cdf = np.cumsum(weights / weights.sum())
    cdf[-1] = 1.0  # no draw in [0, 1) may fall past the last length through rounding
    cdf.setflags(write=False)
    return cdf


def _span_chunk(budget: int) -> int:
    """Attempts the span sampler draws at once for a row with this budget."""
    return budget + 8


def span_draws(seed: int, index: int | np.ndarray, copy: int | np.ndarray) -> SpanDraws:
    """The span sampler's draws for one sequence: ``draws(lo, hi)`` gives the (length, start) uniform draws of
    attempts ``lo`` to ``hi - 1``; (batch, 1) ``index`` and ``copy`` give them for every row at once."""

    def draws(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        attempts = np.arange(lo, hi)
        return (
            uniform(seed, STREAM_SPAN_LENGTH, index, copy, attempts),
            uniform(seed, STREAM_SPAN_START, index, copy, attempts),
        )

    return draws


def choose_spans_row(positions: np.ndarray, starts_word: np.ndarray, draws: SpanDraws, budget: int,
                     length_cdf: np.ndarray) -> list[tuple[int, int, int]]:
    """SpanBERT's span sampler on one row's candidates: ``positions``, (n,) increasing, and ``starts_word``, (n,)
    whether each one's id starts a word; ``draws`` from :func:`span_draws`, ``length_cdf`` from
    :func:`span_length_cdf`. The accepted spans in the order drawn, as ``(first, stop, length)``: candidates
    ``first:stop`` and the length in words that was drawn (more than the span covers when a segment end or the
    budget cut it)."""
    gap = np.diff(positions, prepend=-2) != 1  # (n,) a special token (or the row start) comes before
    first = np.flatnonzero(starts_word | gap)  # (n_words,) the same word starts as masking._words
    segment = np.cumsum(gap)[first]  # (n_words,) segment (run of candidates between specials) of each word
    bounds = np.append(first, len(positions)).tolist()  # word w covers candidates bounds[w]:bounds[w + 1]
    segment_stop = np.searchsorted(segment, segment, side="right").tolist()  # one past the last word of w's segment
    n_words = len(segment_stop)
    taken = bytearray(n_words)  # whole words are taken, except in the last span, after which the loop ends
    spans: list[tuple[int, int, int]] = []
    total, attempt, cap = 0, 0, SPAN_ATTEMPTS_PER_TOKEN * budget
    chunk = _span_chunk(budget)  # attempts drawn at once; most rows need fewer than budget / 3
    while total < budget and attempt < cap:
        if attempt % chunk == 0:
            length_draw, start_draw = draws(attempt, min(attempt + chunk, cap))
            lengths = (np.searchsorted(length_cdf, length_draw, side="right") + 1).tolist()
            starts = np.minimum((start_draw * n_words).astype(np.int64), n_words - 1).tolist()
        length, start = lengths[attempt % chunk], starts[attempt % chunk]
        attempt += 1
        stop = min(start + length, segment_stop[start])
        if any(taken[start:stop]):
            continue  # overlaps a chosen span: draw again
        taken[start:stop] = b"\x01" * (stop - start)
        first = bounds[start]
        end = min(bounds[stop], first + budget - total)
        spans.append((first, end, length))
        total += end - first
    return spans


def choose_spans(input_ids: np.ndarray, candidates: np.ndarray, budget: np.ndarray, word_start: np.ndarray,
                 keys: tuple[int, np.ndarray, np.ndarray], length_cdf: np.ndarray) -> np.ndarray:
    """(batch, seq) bool: spans chosen per row; ``keys`` is (seed, (batch, 1) indices, (batch, 1) copies)."""
    seed, rows, copy = keys
    # Every row's first chunk of attempts in one go, (batch, width) each: the few rows that need more draw them alone.
    width = _span_chunk(int(budget.max(initial=0)))
    block = span_draws(seed, rows, copy)(0, width)
    chosen = np.zeros_like(candidates)
    for row in range(input_ids.shape[0]):
        positions = np.flatnonzero(candidates[row])
        if not len(positions):
            continue
        alone = span_draws(seed, rows[row, 0], copy[row, 0])

        def draws(lo: int, hi: int, row: int = row, alone: SpanDraws = alone) -> tuple[np.ndarray, np.ndarray]:
            return (block[0][row, lo:hi], block[1][row, lo:hi]) if hi <= width else alone(lo, hi)

        starts_word = word_start[input_ids[row, positions]]
        for first, stop, _ in choose_spans_row(positions, starts_word, draws, budget[row], length_cdf):
            chosen[row, positions[first:stop]] = True
    return chosen


def span_class_draw(chosen: np.ndarray, seed: int, rows: np.ndarray, copy: np.ndarray) -> np.ndarray:
    """(batch, seq) the class draw of each chosen position's span (maximal run of chosen positions), keyed by the
    span's first position, so all its tokens share one class."""
    cols = np.arange(chosen.shape[1])[None, :]  # (1, seq)
    opens = chosen & ~np.pad(chosen[:, :-1], ((0, 0), (1, 0)))  # (batch, seq) a run starts here
    first = np.maximum.accumulate(np.where(opens, cols, 0), axis=1)  # (batch, seq) start of the run so far
    return uniform(seed, STREAM_SPAN_CLASS, rows, copy, first)
