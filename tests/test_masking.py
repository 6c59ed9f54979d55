"""Masking: exact counts, the replacement split, static versus dynamic copies, and reproducibility (the span
scheme's own laws are in tests/test_span_masking.py)."""

from __future__ import annotations

import doctest
import hashlib
import math

import numpy as np
import pytest
import torch

from bvr.config import MASKING_SCHEMES
from bvr.errors import BvrError
from bvr.model.losses import IGNORE_INDEX
from bvr.pretraining import collator, masking
from bvr.pretraining.collator import PretrainingCollator
from bvr.pretraining.masking import (
    SCHEMES,
    MaskRule,
    mask_batch,
    mask_copy,
    mask_exposure,
    uniform,
)
from bvr.tokenization import VocabInfo

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIALS = (PAD, UNK, CLS, SEP, MASK)
VOCAB_SIZE = 1000


def make_vocab(word_start: np.ndarray | None = None) -> VocabInfo:
    """A hand-built WordPiece-like vocabulary; by default every token starts a word."""
    if word_start is None:
        word_start = np.ones(VOCAB_SIZE, dtype=bool)
    return VocabInfo(
        family="bert",
        vocab_size=VOCAB_SIZE,
        pad_id=PAD,
        unk_id=UNK,
        cls_id=CLS,
        sep_id=SEP,
        mask_id=MASK,
        special_ids=SPECIALS,
        word_start=word_start,
    )


def pieces_vocab() -> VocabInfo:
    """Ids divisible by 3 start a word, the rest are continuation pieces, so words have varied lengths."""
    return make_vocab(np.arange(VOCAB_SIZE) % 3 == 0)


def make_batch(n: int, seq: int = 128, *, seed: int = 0, min_len: int = 8) -> np.ndarray:
    """(n, seq) segment pairs ``[CLS] a [SEP] b [SEP]`` of random lengths, padded with PAD."""
    rng = np.random.default_rng(seed)
    ids = np.full((n, seq), PAD, dtype=np.int64)
    for row in range(n):
        length = int(rng.integers(min_len, seq + 1))
        ids[row, :length] = rng.integers(len(SPECIALS), VOCAB_SIZE, size=length)
        ids[row, [0, length // 2, length - 1]] = (CLS, SEP, SEP)
    return ids


def mask(ids: np.ndarray, *, indices=None, copies=None, vocab=None, seed: int = 1, **options):
    """mask_batch with indices 0..n-1 and copy 0 unless given; ``options`` are the :class:`MaskRule`'s."""
    n = ids.shape[0]
    indices = np.arange(n) if indices is None else np.asarray(indices)
    copies = np.zeros(n, dtype=np.int64) if copies is None else np.asarray(copies)
    return mask_batch(ids, indices, copies, vocab or make_vocab(), seed=seed, rule=MaskRule(**options))


def candidates_of(ids: np.ndarray) -> np.ndarray:
    return ~np.isin(ids, SPECIALS)


def example(ids: list[int], index: int, epoch: int = 0, sentence_label: int = 0) -> dict:
    types = [0] * len(ids)
    return {"input_ids": ids, "token_type_ids": types, "sentence_label": sentence_label, "index": index, "epoch": epoch}


# ----------------------------------------------------------------------------------------------------------------
# The hash RNG
# ----------------------------------------------------------------------------------------------------------------


def test_uniform_is_a_broadcast_pure_function():
    grid = uniform(5, np.arange(4)[:, None], np.arange(6)[None, :])
    assert grid.shape == (4, 6) and grid.dtype == np.float64
    assert float(uniform(5, 3, 2)) == grid[3, 2]
    assert not np.array_equal(grid, uniform(6, np.arange(4)[:, None], np.arange(6)[None, :]))
    assert float(uniform(5, 1, 2)) != float(uniform(5, 2, 1))
    assert float(uniform(-1, -7)) == float(uniform(2**64 - 1, np.int64(-7)))  # seeds and keys wrap modulo 2**64


def test_uniform_looks_uniform():
    u = uniform(0, np.arange(1_000_000))
    assert ((u >= 0) & (u < 1)).all()
    # The mean of 1e6 U(0,1) draws has standard deviation 0.00029; allow five.
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / u.size)
    counts = np.bincount((u * 10).astype(int), minlength=10)
    assert np.abs(counts - u.size / 10).max() < 5 * math.sqrt(u.size * 0.1 * 0.9)
    # Neighbouring counters must not be correlated.
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01


def test_uniform_rejects_float_keys():
    with pytest.raises(TypeError):
        uniform(0, np.array([0.5]))


# ----------------------------------------------------------------------------------------------------------------
# Which positions are chosen
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask_prob", [0.15, 0.4])
def test_exact_budget_per_sequence_and_rate_overall(mask_prob):
    ids = make_batch(500)
    _, labels = mask(ids, mask_prob=mask_prob)
    n_candidates = candidates_of(ids).sum(axis=1)
    chosen = (labels != IGNORE_INDEX).sum(axis=1)
    expected = np.array([max(1, round(n * mask_prob)) for n in n_candidates])
    np.testing.assert_array_equal(chosen, expected)
    # Rounding moves each sequence by at most half a token, so the overall rate is within that of mask_prob.
    assert abs(chosen.sum() / n_candidates.sum() - mask_prob) < 0.5 * len(ids) / n_candidates.sum()


def test_short_sequences_get_one_mask_and_empty_ones_none():
    ids = np.array([[CLS, 10, SEP, PAD], [CLS, SEP, PAD, PAD], [CLS, SEP, 11, SEP]])
    _, labels = mask(ids)
    assert (labels != IGNORE_INDEX).sum(axis=1).tolist() == [1, 0, 1]


def test_specials_and_padding_never_chosen_and_labels_exact():
    ids = make_batch(300)
    before = ids.copy()
    masked, labels = mask(ids)
    np.testing.assert_array_equal(ids, before)  # input untouched
    chosen = labels != IGNORE_INDEX
    assert not (chosen & ~candidates_of(ids)).any()
    np.testing.assert_array_equal(labels[chosen], ids[chosen])
    np.testing.assert_array_equal(masked[~chosen], ids[~chosen])
    assert masked.dtype == labels.dtype == np.int64


def test_random_replacements_are_never_special():
    ids = make_batch(300)
    masked, labels = mask(ids, split=(0.0, 1.0, 0.0))
    chosen = labels != IGNORE_INDEX
    assert not np.isin(masked[chosen], SPECIALS).any()
    assert len(np.unique(masked[chosen])) > 0.9 * (VOCAB_SIZE - len(SPECIALS))  # spread over the vocabulary


# BERT Table 8 rows as (MASK, SAME, RND), written here in our order (mask, random, unchanged), plus all-unchanged.
SPLITS = [(0.8, 0.1, 0.1), (1.0, 0.0, 0.0), (0.8, 0.2, 0.0), (0.8, 0.0, 0.2), (0.0, 0.8, 0.2), (0.0, 1.0, 0.0)]
SPLITS += [(0.0, 0.0, 1.0)]


@pytest.mark.parametrize("split", SPLITS)
def test_replacement_split(split):
    ids = make_batch(7000, min_len=96)  # about 110k chosen tokens
    masked, labels = mask(ids, split=split, seed=3)
    chosen = labels != IGNORE_INDEX
    n = int(chosen.sum())
    assert n > 100_000
    became_mask = (masked[chosen] == MASK).mean()
    changed = ((masked[chosen] != ids[chosen]) & (masked[chosen] != MASK)).mean()
    # A random replacement equals the original token 1 time in (VOCAB_SIZE - specials); those look unchanged.
    expected_changed = split[1] * (1 - 1 / (VOCAB_SIZE - len(SPECIALS)))
    for observed, p in ((became_mask, split[0]), (changed, expected_changed)):
        if p in (0.0, 1.0):
            assert observed == p  # a zero or whole share is exact
        else:
            assert abs(observed - p) < 5 * math.sqrt(p * (1 - p) / n)  # five binomial standard deviations


# ----------------------------------------------------------------------------------------------------------------
# Static and dynamic copies
# ----------------------------------------------------------------------------------------------------------------


def vocab_for(scheme: str) -> VocabInfo:
    """Multi-piece words where they change the choice (whole-word); one-token words for spans, whose layouts
    over a row of ~40 multi-piece words are few enough (about two spans) for two of 50 masks to coincide."""
    return pieces_vocab() if scheme == "whole-word" else make_vocab()


def masks_over_epochs(mode: str, epochs: int, dupe_factor: int = 10, scheme: str = "token") -> np.ndarray:
    """(epochs, seq) labels of one sequence (index 7) masked at each epoch."""
    ids = np.repeat(make_batch(1, min_len=128), epochs, axis=0)
    copies = [mask_copy(mode, epoch, dupe_factor) for epoch in range(epochs)]
    return mask(ids, indices=np.full(epochs, 7), copies=copies, vocab=vocab_for(scheme), scheme=scheme)[1]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_static_repeats_dupe_factor_masks(scheme):
    labels = masks_over_epochs("static", 50, scheme=scheme)
    np.testing.assert_array_equal(labels[:10], labels[10:20])
    np.testing.assert_array_equal(labels[3], labels[43])
    assert len({row.tobytes() for row in labels[:10]}) == 10  # the ten copies differ from each other
    assert len({row.tobytes() for row in labels}) == 10  # and there are exactly ten over fifty epochs


@pytest.mark.parametrize("scheme", SCHEMES)
def test_dynamic_masks_differ_every_epoch(scheme):
    labels = masks_over_epochs("dynamic", 50, scheme=scheme)
    assert len({row.tobytes() for row in labels}) == 50


@pytest.mark.parametrize(
    ("mode", "epochs", "dupe_factor", "expected"),
    [
        ("static", 40, 10, (10, 4, 4)),  # RoBERTa Table 1
        ("static", 45, 10, (10, 4, 5)),
        ("static", 3, 10, (3, 1, 1)),
        ("dynamic", 40, 10, (40, 1, 1)),
        ("dynamic", 0, 10, (0, 0, 0)),
    ],
)
def test_mask_exposure(mode, epochs, dupe_factor, expected):
    keys = ("distinct_masks", "min_times_seen", "max_times_seen")
    assert mask_exposure(mode, epochs, dupe_factor) == dict(zip(keys, expected, strict=True))


def test_mask_copy():
    assert [mask_copy("static", e, 4) for e in range(6)] == [0, 1, 2, 3, 0, 1]
    assert [mask_copy("dynamic", e, 4) for e in range(6)] == list(range(6))


# ----------------------------------------------------------------------------------------------------------------
# Reproducibility: the same (seed, index, copy) gives the same mask wherever the sequence goes
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
def test_independent_of_batch_order_padding_and_workers(scheme):
    ids = make_batch(64, seq=96)
    indices = np.arange(1000, 1064)
    copies = np.arange(64) % 3
    options = {"vocab": pieces_vocab(), "scheme": scheme}
    reference = mask(ids, indices=indices, copies=copies, **options)

    order = np.random.default_rng(0).permutation(64)
    shuffled = mask(ids[order], indices=indices[order], copies=copies[order], **options)
    for got, want in zip(shuffled, reference, strict=True):
        np.testing.assert_array_equal(got, want[order])

    # Padded further, as when a longer neighbour shares the batch.
    wide = np.pad(ids, ((0, 0), (0, 40)), constant_values=PAD)
    for got, want in zip(mask(wide, indices=indices, copies=copies, **options), reference, strict=True):
        np.testing.assert_array_equal(got[:, :96], want)

    # Split between two workers.
    parts = (slice(0, 20), slice(20, 64))
    halves = [mask(ids[part], indices=indices[part], copies=copies[part], **options) for part in parts]
    for got, want in zip(zip(*halves, strict=True), reference, strict=True):
        np.testing.assert_array_equal(np.concatenate(got), want)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_seed_index_and_copy_each_change_the_mask(scheme):
    ids = np.repeat(make_batch(1, min_len=128), 4, axis=0)
    options = {"vocab": vocab_for(scheme), "scheme": scheme}
    base = mask(ids, indices=[0, 1, 0, 0], copies=[0, 0, 1, 0], seed=1, **options)[1]
    other_seed = mask(ids, indices=[0, 1, 0, 0], copies=[0, 0, 1, 0], seed=2, **options)[1]
    assert not np.array_equal(base[0], base[1])  # index
    assert not np.array_equal(base[0], base[2])  # copy
    np.testing.assert_array_equal(base[0], base[3])
    assert not np.array_equal(base[0], other_seed[0])  # seed


# ----------------------------------------------------------------------------------------------------------------
# Whole-word masking
# ----------------------------------------------------------------------------------------------------------------


def words_of(row: np.ndarray, vocab: VocabInfo) -> list[np.ndarray]:
    """Positions of each word: a word starts at a word-start token or right after a special token."""
    words: list[list[int]] = []
    previous_special = True
    for position, token in enumerate(row):
        if token in SPECIALS:
            previous_special = True
            continue
        if previous_special or vocab.word_start[token]:
            words.append([])
        words[-1].append(position)
        previous_special = False
    return [np.array(word) for word in words]


def test_whole_word_never_splits_a_word_and_stays_within_one_word():
    vocab = pieces_vocab()
    ids = make_batch(200)
    masked, labels = mask(ids, vocab=vocab, scheme="whole-word")
    chosen = labels != IGNORE_INDEX
    np.testing.assert_array_equal(labels[chosen], ids[chosen])
    for row in range(len(ids)):
        words = words_of(ids[row], vocab)
        budget = max(1, round(sum(map(len, words)) * 0.15))
        taken = [chosen[row, word].all() for word in words]
        assert all(chosen[row, word].all() or not chosen[row, word].any() for word in words)
        count = int(chosen[row].sum())
        assert count <= budget
        # Every word left out was too long for what remained of the budget.
        assert all(len(word) > budget - count for word, took in zip(words, taken, strict=True) if not took)
    assert len({len(word) for word in words_of(ids[0], vocab)}) > 1  # the fixture does have multi-piece words


def test_whole_word_with_single_token_words_equals_token_masking():
    ids = make_batch(100)
    for got, want in zip(mask(ids, scheme="whole-word"), mask(ids), strict=True):
        np.testing.assert_array_equal(got, want)


def test_whole_word_continuation_after_special_starts_a_new_word():
    vocab = pieces_vocab()
    # 6 starts a word; 7, 8 continue it; after [SEP], 10 (a continuation id) must not join the word before [SEP].
    ids = np.array([[CLS, 6, 7, 8, SEP, 10, SEP]])
    for seed in range(20):
        chosen = mask(ids, vocab=vocab, scheme="whole-word", mask_prob=0.5, seed=seed)[1] != IGNORE_INDEX
        # Budget round(4 * 0.5) = 2: the three-piece word never fits, so only the lone piece can be chosen.
        assert chosen[0].tolist() == [False] * 5 + [True, False]


# ----------------------------------------------------------------------------------------------------------------
# The token and whole-word schemes give the masks they gave as masking.whole_word false and true
# ----------------------------------------------------------------------------------------------------------------

# make_batch(3, seq=24, seed=5), masked with indices 11..13, copies 0..2, seed 9, mask_prob 0.3 and pieces_vocab()
# by the code before masking.scheme existed (whole_word=False, then True): masked ids and chosen positions.
PINNED_IDS = [
    [2, 27, 808, 471, 517, 632, 289, 979, 58, 3, 386, 573, 411, 135, 50, 6, 53, 153, 3, 0, 0, 0, 0, 0],
    [2, 751, 238, 285, 437, 3, 974, 181, 898, 798, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [2, 629, 495, 667, 3, 664, 65, 959, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
]
PINNED = {
    "token": (
        [
            [2, 27, 808, 4, 4, 632, 289, 979, 4, 3, 386, 573, 411, 4, 50, 6, 4, 153, 3, 0, 0, 0, 0, 0],
            [2, 751, 238, 285, 437, 3, 974, 181, 898, 4, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            [2, 629, 495, 667, 3, 664, 65, 4, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ],
        [[3, 4, 8, 13, 16], [2, 9], [3, 7]],
    ),
    "whole-word": (
        [
            [2, 27, 808, 471, 517, 632, 289, 979, 58, 3, 4, 4, 4, 4, 4, 6, 53, 153, 3, 0, 0, 0, 0, 0],
            [2, 751, 238, 285, 437, 3, 974, 181, 898, 4, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            [2, 629, 495, 667, 3, 664, 65, 959, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ],
        [[10, 11, 12, 13, 14], [9], [1]],
    ),
}
# SHA-256 of masked_ids.tobytes() + labels.tobytes() for make_batch(64, seed=2), indices 500..563, copies
# 0, 1, 2, 3, ..., seed 3 and pieces_vocab(), by the same code: 678 and 671 chosen tokens, 63 and 64 of them random.
PINNED_DIGESTS = {
    "token": "5183173ad528776371a850f43ae415d57604b61a59305027de3680aefed5f944",
    "whole-word": "13788ce62e01a7cb8c50da0d32ca1744322c40479f1e0f47af3d1dbcadc0538d",
}


@pytest.mark.parametrize("scheme", ["token", "whole-word"])
def test_token_and_whole_word_masks_are_unchanged(scheme):
    ids = np.array(PINNED_IDS)
    np.testing.assert_array_equal(ids, make_batch(3, seq=24, seed=5))
    masked, labels = mask(
        ids, indices=[11, 12, 13], copies=[0, 1, 2], vocab=pieces_vocab(), seed=9, mask_prob=0.3, scheme=scheme
    )
    assert masked.tolist() == PINNED[scheme][0]
    assert [np.flatnonzero(row != IGNORE_INDEX).tolist() for row in labels] == PINNED[scheme][1]

    ids = make_batch(64, seq=128, seed=2)
    masked, labels = mask(
        ids, indices=np.arange(500, 564), copies=np.arange(64) % 4, vocab=pieces_vocab(), seed=3, scheme=scheme
    )
    assert hashlib.sha256(masked.tobytes() + labels.tobytes()).hexdigest() == PINNED_DIGESTS[scheme]


# ----------------------------------------------------------------------------------------------------------------
# The collator
# ----------------------------------------------------------------------------------------------------------------


def test_collator_pads_and_carries_fields():
    collate = PretrainingCollator(make_vocab(), mode="dynamic", seed=0, pad_to_multiple_of=8)
    examples = [example([CLS, 5, 6, SEP, 7, 8, 9, SEP, 10, SEP], 3, sentence_label=1), example([CLS, 11, SEP], 9)]
    examples[0]["token_type_ids"] = [0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    batch = collate(examples)
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "labels", "sentence_labels", "indices"}
    assert all(tensor.dtype == torch.long for tensor in batch.values())
    assert batch["input_ids"].shape == (2, 16)
    assert batch["attention_mask"].sum(dim=1).tolist() == [10, 3]
    assert batch["attention_mask"][1].tolist() == [1] * 3 + [0] * 13
    assert (batch["input_ids"][1, 3:] == PAD).all()
    assert batch["token_type_ids"][0].tolist() == [0] * 4 + [1] * 6 + [0] * 6
    assert (batch["labels"][batch["attention_mask"] == 0] == IGNORE_INDEX).all()
    assert batch["sentence_labels"].tolist() == [1, 0] and batch["indices"].tolist() == [3, 9]


def test_collator_without_rounding_pads_to_the_longest():
    collate = PretrainingCollator(make_vocab(), mode="dynamic", seed=0, pad_to_multiple_of=None)
    assert collate([example([CLS, 5, 6, SEP], 0), example([CLS, 5, SEP], 1)])["input_ids"].shape == (2, 4)


def test_collator_masks_follow_index_and_epoch_not_batch():
    vocab = make_vocab()
    rows = make_batch(6, seq=64, min_len=40)
    seqs = [row[row != PAD].tolist() for row in rows]
    static = PretrainingCollator(vocab, mode="static", seed=4, dupe_factor=3)
    alone = static([example(seqs[0], 0, epoch=1)])
    later = static([example(seqs[5], 5, epoch=4), example(seqs[0], 0, epoch=4)])  # epoch 4 is copy 1 again
    length = len(seqs[0])
    for key in ("input_ids", "labels"):
        assert torch.equal(alone[key][0, :length], later[key][1, :length])
    dynamic = PretrainingCollator(vocab, mode="dynamic", seed=4)
    assert not torch.equal(
        dynamic([example(seqs[0], 0, epoch=1)])["labels"], dynamic([example(seqs[0], 0, epoch=4)])["labels"]
    )


def test_collator_doctest():
    assert doctest.testmod(collator).failed == 0 and doctest.testmod(masking).failed == 0


# ----------------------------------------------------------------------------------------------------------------
# Errors a user can fix
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask_prob", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_bad_mask_prob(mask_prob):
    with pytest.raises(BvrError, match=r"^masking\.mask_prob: mask_prob must lie strictly between 0 and 1"):
        mask(make_batch(2), mask_prob=mask_prob)
    with pytest.raises(BvrError, match=r"masking\.mask_prob"):
        PretrainingCollator(make_vocab(), mode="static", seed=0, rule=MaskRule(mask_prob=mask_prob))


@pytest.mark.parametrize("split", [(0.5, 0.5, 0.5), (1.1, -0.1, 0.0), (0.8, 0.1), (0.8, 0.1, 0.1 + 2e-6)])
def test_bad_split(split):
    with pytest.raises(BvrError, match=r"^masking\.split: split must be three non-negative shares") as caught:
        mask(make_batch(2), split=split)
    assert "(0.8, 0.1, 0.1)" in str(caught.value)  # the hint names BERT's split


def test_split_within_tolerance_is_accepted():
    mask(make_batch(2), split=(0.8, 0.1, 0.1 + 5e-7))


def test_bad_scheme_and_span_options():
    assert SCHEMES == MASKING_SCHEMES  # the config accepts exactly the schemes masking knows
    with pytest.raises(
        BvrError,
        match=r"^masking\.scheme: unknown masking scheme 'words'\. use one of token, "
        r"whole-word, span",
    ):
        mask(make_batch(2), scheme="words")
    with pytest.raises(BvrError, match=r"^masking\.span_p: span_p must lie in \(0, 1\], got 0\.0"):
        PretrainingCollator(make_vocab(), mode="static", seed=0, rule=MaskRule(scheme="span", span_p=0.0))
    with pytest.raises(BvrError, match=r"^masking\.span_max_words: span_max_words must be at least 1, got 0"):
        mask(make_batch(2), scheme="span", span_max_words=0)


def test_bad_mode_dupe_factor_ids_and_padding_multiple():
    with pytest.raises(BvrError, match=r"^masking\.mode: unknown masking mode 'random'\. use one of static, dynamic"):
        mask_copy("random", 0, 10)
    with pytest.raises(BvrError, match=r"^masking\.dupe_factor"):
        PretrainingCollator(make_vocab(), mode="static", seed=0, dupe_factor=0)
    with pytest.raises(BvrError, match=r"^masking\.input_ids: .*another tokenizer"):
        mask(np.array([[CLS, VOCAB_SIZE, SEP]]))
    with pytest.raises(BvrError, match=r"^masking\.pad_to_multiple_of"):
        PretrainingCollator(make_vocab(), mode="static", seed=0, pad_to_multiple_of=0)


def test_every_arm_is_validated_on_the_same_reference_masks():
    """Arms that train on whole words, spans or another split are validated on the token-level 80/10/10 masks
    (same mask_prob and seed), so their validation losses score the same masked tokens; the default arm's
    validation masks are the ones it always had."""
    from bvr.config import load_config
    from bvr.pretraining.data import fixed_validation_collator, training_collator
    from bvr.pretraining.run import validation_differs

    vocab = pieces_vocab()
    rows = make_batch(8, seq=64, min_len=40)
    batch = [example(row[row != PAD].tolist(), i) for i, row in enumerate(rows)]
    default = load_config(preset="tiny")
    reference = fixed_validation_collator(vocab, default)(batch)
    own = PretrainingCollator(vocab, mode="static", dupe_factor=1, seed=default.masking.seed,  # the arm's own masks
                              rule=MaskRule(mask_prob=default.masking.mask_prob))(batch)
    assert all(torch.equal(reference[k], own[k]) for k in ("input_ids", "labels"))
    assert not validation_differs(default)
    for override in ("masking.scheme=whole-word", "masking.scheme=span", "masking.split=[1.0,0.0,0.0]"):
        cfg = load_config(preset="tiny", overrides=[override])
        assert validation_differs(cfg), override
        validated = fixed_validation_collator(vocab, cfg)(batch)
        assert all(torch.equal(validated[k], reference[k]) for k in ("input_ids", "labels")), override
        trained = training_collator(vocab, cfg)(batch)
        assert not torch.equal(trained["input_ids"], reference["input_ids"]), override  # it trains on its own
