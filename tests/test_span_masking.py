"""The span scheme (SpanBERT section 3.1): the span-length law, the exact budget, spans of whole words inside one
segment, the 80/10/10 split per span, and ``bvr data show`` with span masks. Purity, static and dynamic copies and
resumed runs are checked for every scheme in tests/test_masking.py and tests/test_pretrain.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from bvr.model.losses import IGNORE_INDEX
from bvr.pretraining import spans
from bvr.pretraining.prepare import prepare
from bvr.pretraining.show import render_examples
from bvr.pretraining.spans import span_length_cdf
from tests.test_masking import CLS, MASK, SEP, SPECIALS, VOCAB_SIZE, make_batch, mask, pieces_vocab, words_of
from tests.test_prepare import config, write_wiki_corpus


def truncated_geometric(p: float, longest: int) -> np.ndarray:
    """(longest,) P(length = l) for l = 1..longest: p (1 - p)^(l - 1), renormalised over 1..longest."""
    weights = np.array([p * (1 - p) ** (length - 1) for length in range(1, longest + 1)])
    return weights / weights.sum()


def runs(chosen: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs of True in a (seq,) bool row, as (start, stop)."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], chosen.astype(np.int8), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


def spans_of(ids: np.ndarray, index: int, vocab, *, seed: int = 1, copy: int = 0, mask_prob: float = 0.15,
             p: float = 0.2, longest: int = 10, asked: list | None = None) -> tuple[np.ndarray, list]:
    """One row's candidate positions and its accepted spans, as mask_batch draws them; ``asked`` collects the
    ranges of attempts drawn."""
    positions = np.flatnonzero(~np.isin(ids, SPECIALS))
    budget = max(1, round(len(positions) * mask_prob))
    alone = spans.span_draws(seed, index, copy)  # the draws mask_batch makes for this (seed, index, copy)

    def draws(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        if asked is not None:
            asked.append((lo, hi))
        return alone(lo, hi)

    starts = np.asarray(vocab.word_start)[ids[positions]]
    return positions, spans.choose_spans_row(positions, starts, draws, budget, span_length_cdf(p, longest))


# ----------------------------------------------------------------------------------------------------------------
# Span lengths
# ----------------------------------------------------------------------------------------------------------------


def test_the_length_law_has_spanberts_mean():
    law = truncated_geometric(0.2, 10)
    assert round(float(law @ np.arange(1, 11)), 1) == 3.8  # SpanBERT section 3.1
    np.testing.assert_allclose(np.diff(span_length_cdf(0.2, 10), prepend=0.0), law, rtol=1e-12)
    assert span_length_cdf(1.0, 4).tolist() == [1.0] * 4  # p = 1: every span is one word


@pytest.mark.parametrize(("p", "longest"), [(0.2, 10), (0.5, 3)])
def test_span_lengths_follow_the_truncated_geometric_law(p, longest):
    # One segment of 126 one-token words, budget 19 >= longest: the first span of a row is never rejected (nothing
    # is chosen yet) nor cut by the budget, and, when it starts at least `longest` words before the segment end,
    # never cut by it either; the start is drawn independently of the length, so those spans follow the law exactly.
    # (Later spans do not: longer spans are rejected more often, and spans cut by the budget are the longer ones.)
    vocab = pieces_vocab()
    row = np.array([CLS, *(3 * np.arange(2, 128)), SEP])  # multiples of 3 start words: 126 one-token words
    counts = np.zeros(longest, dtype=np.int64)
    for index in range(6000):
        positions, spans = spans_of(row, index, vocab, p=p, longest=longest)
        first, stop, length = spans[0]
        assert len(positions) == 126 and 1 <= length <= longest
        if first <= len(positions) - longest:
            assert stop - first == length  # the span covers exactly the words drawn
            counts[length - 1] += 1
    law = truncated_geometric(p, longest)
    n = counts.sum()
    assert n > 5000
    chi2 = (((counts - n * law) ** 2) / (n * law)).sum()
    assert chi2 < stats.chi2.ppf(1 - 1e-4, longest - 1)
    # The mean against the exact expectation, within five standard errors of the law's own spread.
    lengths = np.arange(1, longest + 1)
    mean, sd = law @ lengths, math.sqrt(law @ lengths**2 - (law @ lengths) ** 2)
    assert abs(counts @ lengths / n - mean) < 5 * sd / math.sqrt(n)


@pytest.mark.parametrize("mask_prob", [0.15, 0.6])
def test_mask_batch_chooses_exactly_the_sampled_spans(mask_prob):
    vocab = pieces_vocab()
    ids = make_batch(100, seed=4)
    indices, copies = np.arange(100) + 50, np.arange(100) % 3
    _, labels = mask(ids, vocab=vocab, scheme="span", indices=indices, copies=copies, mask_prob=mask_prob)
    asked: list[tuple[int, int]] = []
    for row in range(len(ids)):
        positions, spans = spans_of(ids[row], 50 + row, vocab, copy=row % 3, mask_prob=mask_prob, asked=asked)
        expected = np.zeros(ids.shape[1], dtype=bool)
        for first, stop, _ in spans:
            assert not expected[positions[first:stop]].any()  # accepted spans never overlap
            expected[positions[first:stop]] = True
        np.testing.assert_array_equal(labels[row] != IGNORE_INDEX, expected)
    # At 0.6 some rows need more attempts than mask_batch draws for the whole batch at once.
    assert any(lo > 0 for lo, _ in asked) == (mask_prob == 0.6)


# ----------------------------------------------------------------------------------------------------------------
# Which positions: the exact budget, whole words, one segment per span
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask_prob", [0.15, 0.4])
def test_span_budget_is_exact(mask_prob):
    ids = make_batch(500)
    _, labels = mask(ids, vocab=pieces_vocab(), scheme="span", mask_prob=mask_prob)
    n_candidates = (~np.isin(ids, SPECIALS)).sum(axis=1)
    expected = [max(1, round(n * mask_prob)) for n in n_candidates]
    assert (labels != IGNORE_INDEX).sum(axis=1).tolist() == expected


def test_spans_are_whole_words_from_word_starts_inside_one_segment():
    vocab = pieces_vocab()
    ids = make_batch(300, seed=6)
    _, labels = mask(ids, vocab=vocab, scheme="span", indices=np.arange(300))
    chosen = labels != IGNORE_INDEX
    cut = 0
    for row in range(len(ids)):
        words = words_of(ids[row], vocab)
        word_starts = {int(word[0]) for word in words}
        partial = [word for word in words if 0 < chosen[row, word].sum() < len(word)]
        # Every word is taken whole or not at all, but for the one the budget cut, which keeps its first pieces.
        assert len(partial) <= 1
        for word in partial:
            assert chosen[row, word].tolist() == sorted(chosen[row, word].tolist(), reverse=True)
        cut += len(partial)
        assert all(start in word_starts for start, _ in runs(chosen[row]))
        positions, spans = spans_of(ids[row], row, vocab)
        for first, stop, _ in spans:
            assert positions[stop - 1] - positions[first] == stop - 1 - first  # no special token inside
    assert cut > 30  # the fixture's multi-piece words do get cut by the budget


def test_a_span_is_cut_only_by_its_segment_end_or_the_budget():
    vocab = pieces_vocab()
    # Two segments of 20 one-token words each (multiples of 3 start words), ending at positions 20 and 41.
    ids = np.array([CLS, *(3 * np.arange(2, 22)), SEP, *(3 * np.arange(22, 42)), SEP])
    segment_ends = {20, 41}
    at_segment_end = 0
    for index in range(300):
        positions, spans = spans_of(ids, index, vocab, mask_prob=0.3)
        for number, (first, stop, length) in enumerate(spans):
            assert (positions[first] <= 20) == (positions[stop - 1] <= 20)  # both ends in one segment
            if stop - first < length:
                assert positions[stop - 1] in segment_ends or number == len(spans) - 1
                at_segment_end += positions[stop - 1] in segment_ends
    assert at_segment_end > 50


def test_a_row_that_cannot_meet_its_budget_ends():
    # Almost every token must be chosen and long spans keep overlapping: the attempt cap ends the row.
    ids = make_batch(20, seed=8)
    _, labels = mask(ids, vocab=pieces_vocab(), scheme="span", mask_prob=0.99, span_p=0.05)
    n_candidates = (~np.isin(ids, SPECIALS)).sum(axis=1)
    counts = (labels != IGNORE_INDEX).sum(axis=1)
    assert (counts <= np.maximum(1, np.rint(n_candidates * 0.99))).all() and (counts > 0.5 * n_candidates).all()


# ----------------------------------------------------------------------------------------------------------------
# Replacement per span
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("split", [(0.8, 0.1, 0.1), (0.5, 0.0, 0.5)])
def test_replacement_is_decided_per_span(split):
    ids = make_batch(5000, min_len=96, seed=2)  # about 12,000 spans
    masked, labels = mask(ids, vocab=pieces_vocab(), scheme="span", split=split, seed=5)
    classes, same_neighbours, neighbours = [], 0, 0
    for row in range(len(ids)):
        for start, stop in runs(labels[row] != IGNORE_INDEX):
            got, was = masked[row, start:stop], ids[row, start:stop]
            if (got == MASK).any():
                assert (got == MASK).all()
                classes.append(0)
            elif (got != was).any():
                assert not np.isin(got, SPECIALS).any()
                classes.append(1)
                same_neighbours += int((got[1:] == got[:-1]).sum())
                neighbours += stop - start - 1
            else:
                classes.append(2)
    shares = np.bincount(classes, minlength=3) / len(classes)
    assert len(classes) > 10_000
    # A random span whose every token redraws its own id is counted as unchanged: at most 1 in 995 of them.
    for observed, p in zip(shares, split, strict=True):
        if p == 0.0:
            assert observed == 0.0
        else:
            assert abs(observed - p) < 5 * math.sqrt(p * (1 - p) / len(classes)) + p / (VOCAB_SIZE - len(SPECIALS))
    if split[1]:
        # Each token of a random span draws its own id: neighbours agree about 1 time in 995, not always.
        assert neighbours > 1000 and same_neighbours / neighbours < 0.01


# ----------------------------------------------------------------------------------------------------------------
# bvr data show
# ----------------------------------------------------------------------------------------------------------------


def test_data_show_renders_span_masks(tmp_path):
    data_dir = write_wiki_corpus(tmp_path / "data", documents=40)
    cfg = config(data_dir, tmp_path / "out", "masking.scheme=span", "masking.mask_prob=0.3")
    text = render_examples(cfg, prepare(cfg, progress=False), count=4, epoch=1)
    assert "dynamic masking, epoch 1 (mask copy 1), span scheme;" in text
    rows = [line.split(" ") for line in text.split("\n") if line.startswith("[CLS]")]
    assert len(rows) == 4
    marked = [["{" in token for token in row] for row in rows]
    # Spans show as runs of marked tokens: a run of at least two marks, all [MASK] or none, in some row.
    longest = max(stop - start for row in marked for start, stop in runs(np.array(row)))
    assert longest >= 2
    for row, marks in zip(rows, marked, strict=True):
        for start, stop in runs(np.array(marks)):
            kinds = {token.startswith("[MASK]{") for token in row[start:stop]}
            assert len(kinds) == 1
    assert not any("[PAD]" in row for row in rows)  # rows stop at the attention mask
