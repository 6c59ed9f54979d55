"""Batches filled up to a token budget (``training.tokens_per_batch``, RoBERTa's dynamic batch size): each batch
within its budget and within one sequence of it (across epoch ends too), every sequence once per data epoch in the
fixed-size sampler's order, the same batches for a seed, disjoint ranks in step, and a resumed iteration that
continues where the first stopped."""

from __future__ import annotations

import numpy as np
import pytest

from bvr.pretraining.data import EpochSampler, TokenBudgetSampler

LENGTHS = np.random.default_rng(0).integers(10, 129, size=500)  # doc-sentences-like: (500,) lengths up to 128


def test_batches_fill_the_budget_to_within_one_sequence_across_epoch_ends():
    batches = list(TokenBudgetSampler(LENGTHS, 1024, seed=0, length=300))
    totals = [sum(int(LENGTHS[i]) for i, _ in batch) for batch in batches]
    assert max(totals) <= 1024
    for batch, following in zip(batches[:-1], batches[1:], strict=True):
        first = following[0][0]
        assert sum(int(LENGTHS[i]) for i, _ in batch) + LENGTHS[first] > 1024  # closed only when the next overflowed
    assert any(batch[0][1] != batch[-1][1] for batch in batches)  # a batch spans an epoch end
    assert min(totals) > 1024 - 128


def test_a_sequence_longer_than_the_budget_is_a_batch_of_its_own():
    batches = list(TokenBudgetSampler(np.array([4, 20, 4]), 10, seed=0, length=3, shuffle=False))
    assert batches == [[(0, 0)], [(1, 0)], [(2, 0), (0, 1)]]


def test_the_stream_reads_epochs_in_the_fixed_batch_order_and_is_deterministic():
    sampler = TokenBudgetSampler(LENGTHS, 1024, seed=3, length=400)
    batches = list(sampler)
    assert batches == list(TokenBudgetSampler(LENGTHS, 1024, seed=3, length=400))
    assert batches != list(TokenBudgetSampler(LENGTHS, 1024, seed=4, length=400))
    keys = [key for batch in batches for key in batch]
    epochs = [epoch for _, epoch in keys]
    assert epochs == sorted(epochs) and max(epochs) >= 2
    fixed = EpochSampler(len(LENGTHS), seed=3)
    for epoch in range(max(epochs)):  # every finished epoch: the fixed-size sampler's order, each sequence once
        fixed.set_epoch(epoch)
        assert [i for i, e in keys if e == epoch] == [i for i, _ in fixed]


def test_ranks_take_disjoint_batches_in_step():
    one = list(TokenBudgetSampler(LENGTHS, 1024, seed=0, length=60))
    ranks = [list(TokenBudgetSampler(LENGTHS, 1024, seed=0, length=30, rank=r, world_size=2)) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == 30
    assert ranks[0] == one[0::2] and ranks[1] == one[1::2]


@pytest.mark.parametrize("world_size", [1, 2])
def test_skip_resumes_where_the_first_iteration_stopped(world_size):
    full = list(TokenBudgetSampler(LENGTHS, 1024, seed=0, length=50, rank=world_size - 1, world_size=world_size))
    resumed = TokenBudgetSampler(LENGTHS, 1024, seed=0, length=50, rank=world_size - 1, world_size=world_size)
    resumed.skip = 17
    assert list(resumed) == full[17:]
    assert list(resumed) == full  # the skip applies to one iteration only
