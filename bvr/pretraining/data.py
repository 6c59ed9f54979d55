"""Pretraining batches: a sampler that yields ``(index, epoch)``, a dataset over the prepared Arrow sequences, and
the LightningDataModule that ties them to the masking collator.

Every batch is a function of (seed, epoch, position in the epoch, rank, world size): the order of an epoch is a
permutation seeded by (seed, epoch), each rank takes every ``world_size``-th sequence of it, and masks are a pure
function of (masking seed, sequence index, copy or epoch). Resuming therefore only has to know how many batches of
the current epoch were consumed (:meth:`PretrainingDataModule.state_dict`), and several processes see disjoint
sequences with the masks a single process would give them.

With ``training.tokens_per_batch`` the batches are filled up to a token budget instead (:class:`TokenBudgetSampler`,
RoBERTa's dynamic batch size), in the same seeded order.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator
from typing import Any

import datasets
import lightning as L
import numpy as np
import pyarrow.compute as pc
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from bvr.config import Config
from bvr.errors import BvrError
from bvr.pretraining.collator import PretrainingCollator
from bvr.pretraining.instances import count_tokens
from bvr.pretraining.masking import MaskRule
from bvr.tokenization import VocabInfo


class EpochSampler(Sampler[tuple[int, int]]):
    """Yields ``(sequence index, epoch)`` for one rank: a fresh seeded permutation per epoch, strided over ranks.

    The epoch's permutation is padded by wrapping around so every rank gets the same number of sequences (as
    ``DistributedSampler`` does); with one rank nothing is padded. ``skip`` drops the first sequences of the
    next iteration only: what a resumed run has already consumed.

    >>> sampler = EpochSampler(5, seed=0, shuffle=False, rank=1, world_size=2)
    >>> list(sampler)
    [(1, 0), (3, 0), (0, 0)]
    """

    def __init__(self, num_samples: int, *, seed: int, shuffle: bool = True, rank: int = 0, world_size: int = 1):
        if num_samples < 1:
            raise BvrError("no sequences to train on", where="data", hint="check the corpus and data.max_length")
        self.num_samples, self.seed, self.shuffle = num_samples, seed, shuffle
        self.rank, self.world_size = rank, world_size
        self.epoch, self.skip = 0, 0

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning at the start of every epoch."""
        self.epoch = epoch

    def __len__(self) -> int:
        return math.ceil(self.num_samples / self.world_size)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        order = epoch_order(self.num_samples, self.seed, self.epoch, self.shuffle)
        mine = np.resize(order, len(self) * self.world_size)[self.rank :: self.world_size]  # wrapped around to pad
        start, self.skip = self.skip, 0
        epoch = self.epoch
        return ((int(i), epoch) for i in mine[start:])


def epoch_order(num_samples: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """The seeded permutation of ``num_samples`` sequences for ``epoch`` (both samplers read the data in it), or
    their own order without ``shuffle``."""
    return np.random.default_rng([seed, epoch]).permutation(num_samples) if shuffle else np.arange(num_samples)


class TokenBudgetSampler(Sampler[list[tuple[int, int]]]):
    """Batches of ``(sequence index, epoch)`` holding up to ``budget`` tokens each: a batch sampler for one rank.

    The data is read as one stream: epoch 0's sequences in the seeded order :class:`EpochSampler` uses, then epoch
    1's, and so on; a batch takes sequences of the stream until the next would bring it past ``budget`` tokens
    (a sequence longer than the budget makes a batch of its own), so every batch is within one sequence of the
    budget, across epoch ends too. Rank ``r`` takes batches ``r, r + world_size, ...`` of the stream, so every rank
    gets as many batches and none shares a sequence within an epoch. Lightning runs the stream as one epoch of
    ``length`` batches (the masks still follow each sequence's own epoch); ``skip`` drops this rank's first
    batches of the next iteration only: what a resumed run has already consumed.

    >>> list(TokenBudgetSampler(np.array([3, 5, 2, 4]), budget=8, seed=0, length=3, shuffle=False))
    [[(0, 0), (1, 0)], [(2, 0), (3, 0)], [(0, 1), (1, 1)]]
    >>> list(TokenBudgetSampler(np.array([3, 5, 2]), budget=8, seed=0, length=3, shuffle=False))
    [[(0, 0), (1, 0)], [(2, 0), (0, 1)], [(1, 1), (2, 1)]]
    """

    def __init__(self, lengths: np.ndarray, budget: int, *, seed: int, length: int, shuffle: bool = True,
                 rank: int = 0, world_size: int = 1) -> None:
        if len(lengths) < 1:
            raise BvrError("no sequences to train on", where="data", hint="check the corpus and data.max_length")
        self.lengths, self.budget, self.seed, self.length = np.asarray(lengths), budget, seed, length
        self.shuffle, self.rank, self.world_size = shuffle, rank, world_size
        self.skip = 0

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning; the stream keeps its own epochs."""

    def __len__(self) -> int:
        return self.length

    def stream(self) -> Iterator[list[tuple[int, int]]]:
        """All ranks' batches, in order, without end."""
        batch: list[tuple[int, int]] = []
        total = 0
        for epoch in itertools.count():
            order = epoch_order(len(self.lengths), self.seed, epoch, self.shuffle)
            for index, tokens in zip(order.tolist(), self.lengths[order].tolist(), strict=True):
                if batch and total + tokens > self.budget:
                    yield batch
                    batch, total = [], 0
                batch.append((index, epoch))
                total += tokens

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        start, self.skip = self.skip, 0
        mine = itertools.islice(self.stream(), self.rank + start * self.world_size, None, self.world_size)
        return itertools.islice(mine, self.length - start)


class InstanceDataset(Dataset):
    """The prepared sequences (memory-mapped Arrow), addressed by ``(index, epoch)`` keys from :class:`EpochSampler`."""

    def __init__(self, instances: datasets.Dataset) -> None:
        self.instances = instances

    def __len__(self) -> int:
        return self.instances.num_rows

    def __getitem__(self, key: tuple[int, int]) -> dict[str, Any]:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: list[tuple[int, int]]) -> list[dict[str, Any]]:
        # One columnar read per batch instead of one per sequence.
        rows = self.instances[[index for index, _ in keys]]
        return [
            {
                "input_ids": rows["input_ids"][i],
                "token_type_ids": rows["token_type_ids"][i],
                "sentence_label": rows["sentence_label"][i],
                "index": index,
                "epoch": epoch,
            }
            for i, (index, epoch) in enumerate(keys)
        ]


def check_batch_fits(cfg: Config, train: datasets.Dataset) -> None:
    """Refuse an optimiser step larger than the training data, before training, naming the key, its value and how
    many sequences (or tokens) the data holds.

    The samplers would fill such a step with one pass over the data (``training.batch_size``) or with the same
    sequences several times (``training.tokens_per_batch``): the run would train on other batches than asked for,
    and its metrics would count an epoch per step.
    """
    t, sequences = cfg.training, train.num_rows
    if t.tokens_per_batch is None and t.batch_size > sequences:
        raise BvrError(f"{t.batch_size:,} sequences per optimiser step, but the prepared data holds only {sequences:,} "
                       "training sequences", where="training.batch_size",
                       hint=f"set it to at most {sequences:,}, or pretrain on a larger corpus")
    if t.tokens_per_batch is not None:
        tokens = count_tokens(train)
        if t.tokens_per_batch > tokens:
            raise BvrError(f"{t.tokens_per_batch:,} tokens per optimiser step, but the prepared data holds only "
                           f"{tokens:,} training tokens", where="training.tokens_per_batch",
                           hint=f"set it to at most {tokens:,}, or pretrain on a larger corpus")


def mask_rule(cfg: Config) -> MaskRule:
    """What the arm masks and how (``masking.mask_prob``, ``split``, ``scheme``, ``span_p``, ``span_max_words``)."""
    m = cfg.masking
    return MaskRule(m.mask_prob, tuple(m.split), m.scheme, m.span_p, m.span_max_words)


REFERENCE_SCHEME = "token"
REFERENCE_SPLIT = (0.8, 0.1, 0.1)
"""Validation masks BERT's way whatever an arm trains with: single tokens, 80% [MASK] / 10% random / 10% kept."""


def fixed_validation_collator(vocab: VocabInfo, cfg: Config) -> PretrainingCollator:
    """Validation masks are one fixed copy (static copy 0 under the masking seed) of the reference masks
    (:data:`REFERENCE_SCHEME`, :data:`REFERENCE_SPLIT`, the arm's ``mask_prob``), the same for every arm and every
    evaluation, so validation losses compare across arms that differ in masking mode, scheme or split: each arm
    predicts the same masked tokens of the same sequences. (Validated on its own masks, an arm that replaces 0%
    by random tokens, or masks whole spans, would face an easier or harder task than its neighbour.)"""
    rule = dataclasses.replace(mask_rule(cfg), scheme=REFERENCE_SCHEME, split=REFERENCE_SPLIT)
    return PretrainingCollator(vocab, mode="static", seed=cfg.masking.seed, dupe_factor=1, rule=rule)


def training_collator(vocab: VocabInfo, cfg: Config) -> PretrainingCollator:
    """The collator of the training data: the configured masking mode, copies and scheme."""
    m = cfg.masking
    return PretrainingCollator(vocab, mode=m.mode, seed=m.seed, dupe_factor=m.dupe_factor, rule=mask_rule(cfg))


class PretrainingDataModule(L.LightningDataModule):
    """Serves the prepared train and validation sequences of one configuration to a Lightning Trainer, masked for
    the tokenizer's ``vocab``."""

    def __init__(self, cfg: Config, instances: datasets.DatasetDict, vocab: VocabInfo) -> None:
        super().__init__()
        self.cfg, self.instances, self.vocab = cfg, instances, vocab
        self.train_sampler: EpochSampler | TokenBudgetSampler | None = None
        self.taken: tuple[int, int] | None = None
        """(epoch, batches of it this rank has trained on): the data's position, which a checkpoint keeps."""
        self._resume_skip: dict[str, int] | None = None

    def _world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def micro_batch(self) -> int:
        """Sequences per micro-batch: the configured batch (sequences per optimiser step) split over devices and
        accumulation."""
        t, world = self.cfg.training, self._world()[1]
        if t.batch_size % (world * t.grad_accum):
            raise BvrError(f"batch_size {t.batch_size} is not divisible by devices x grad_accum = {world} x "
                           f"{t.grad_accum}", where="training.batch_size",
                           hint="pick a batch size that splits evenly over devices and accumulation steps")
        return t.batch_size // (world * t.grad_accum)

    def token_budget(self) -> int | None:
        """Tokens per micro-batch with ``training.tokens_per_batch``: its share of one device and one accumulation
        step; None without it."""
        t = self.cfg.training
        if t.tokens_per_batch is None:
            return None
        budget = t.tokens_per_batch // (self._world()[1] * t.grad_accum)
        if budget < self.cfg.data.max_length:
            raise BvrError(f"{t.tokens_per_batch} tokens over {self._world()[1]} device(s) x grad_accum "
                           f"{t.grad_accum} leave {budget} per micro-batch, less than one sequence of "
                           f"data.max_length {self.cfg.data.max_length}", where="training.tokens_per_batch",
                           hint="raise it or lower grad_accum")
        return budget

    def train_dataloader(self) -> DataLoader:
        rank, world = self._world()
        train, t = self.instances["train"], self.cfg.training
        collator = training_collator(self.vocab, self.cfg)
        budget, resume, self._resume_skip = self.token_budget(), self._resume_skip, None
        if budget is not None:
            lengths = pc.list_value_length(train.data.table["input_ids"]).to_numpy()  # (sequences,)
            # One Lightning epoch covers the run (max_tokens may end it sooner); the stream has its own epochs.
            length = max(t.max_steps, t.val_every_steps) * t.grad_accum
            self.train_sampler = TokenBudgetSampler(lengths, budget, seed=t.seed, length=length, rank=rank,
                                                    world_size=world)
            sampling = {"batch_sampler": self.train_sampler}
        else:
            self.train_sampler = EpochSampler(train.num_rows, seed=t.seed, rank=rank, world_size=world)
            sampling = {"batch_size": self.micro_batch(), "sampler": self.train_sampler}
        if resume is not None:  # the state_dict() of a checkpoint: skip what this rank trained on of its epoch
            self.train_sampler.set_epoch(resume["epoch"])
            self.train_sampler.skip = resume["batches"] if budget is not None else resume["sequences"]
            batches = resume["batches"] if budget is not None else resume["sequences"] // self.micro_batch()
            self.taken = (resume["epoch"], batches)
        return self._loader(train, collator, **sampling)

    def val_dataloader(self) -> DataLoader:
        rank, world = self._world()
        # Unpadded strides: every validation sequence counted exactly once over all ranks.
        sampler = [(int(i), 0) for i in range(rank, self.instances["validation"].num_rows, world)]
        return self._loader(self.instances["validation"], fixed_validation_collator(self.vocab, self.cfg),
                            batch_size=self.micro_batch(), sampler=sampler)

    def _loader(self, split: datasets.Dataset, collator: PretrainingCollator, **sampling: Any) -> DataLoader:
        """A loader of ``split`` batched by ``sampling`` (a ``batch_sampler``, or a ``batch_size`` and ``sampler``)."""
        workers = self.cfg.training.num_workers
        return DataLoader(
            InstanceDataset(split),
            **sampling,
            collate_fn=collator,
            num_workers=workers,
            persistent_workers=workers > 0,
            # Its own generator: creating an iterator must not draw from the global RNG (dropout's), or a resumed
            # run would see different dropout masks than an uninterrupted one.
            generator=torch.Generator().manual_seed(self.cfg.training.seed),
        )

    def on_after_batch_transfer(self, batch: dict[str, Any], dataloader_idx: int) -> dict[str, Any]:
        """Count the training batch about to be trained on (Lightning moves one batch to the device right before
        its step): the position :meth:`state_dict` saves."""
        trainer = self.trainer
        if trainer is not None and trainer.training:
            epoch = trainer.current_epoch
            self.taken = (epoch, self.taken[1] + 1 if self.taken and self.taken[0] == epoch else 1)
        return batch

    # Resume: how many sequences (or token batches) of the current epoch this rank has trained on.
    def state_dict(self) -> dict[str, Any]:
        if self.train_sampler is None or self.taken is None:
            return {}
        epoch, batches = self.taken  # a checkpoint written after a step counts that step's batch
        if isinstance(self.train_sampler, TokenBudgetSampler):
            return {"epoch": epoch, "batches": batches}
        return {"epoch": epoch, "sequences": batches * self.micro_batch()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict:
            self._resume_skip = dict(state_dict)
