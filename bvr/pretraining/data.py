"""Pretraining batches: a sampler that yields ``(index, epoch)``, a dataset over the prepared Arrow sequences, and
the LightningDataModule that ties them to the masking collator.

Every batch is a function of (seed, epoch, position in the epoch, rank, world size): the order of an epoch is a
permutation seeded by (seed, epoch), each rank takes every ``world_size``-th sequence of it, and masks are a pure
function of (masking seed, sequence index, copy or epoch). Resuming therefore only has to know how many batches of
the current epoch were consumed (:meth:`PretrainingDataModule.state_dict`), and several processes see disjoint
sequences with the masks a single process would give them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import datasets
import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from bvr.config import Config
from bvr.errors import BvrError
from bvr.pretraining.collator import PretrainingCollator
from bvr.pretraining.masking import mask_exposure
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

    def order(self, epoch: int) -> np.ndarray:
        """All ranks' sequence indices for ``epoch``, before striding."""
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.num_samples)
        else:
            order = np.arange(self.num_samples)
        padded = len(self) * self.world_size
        return np.resize(order, padded)  # wraps around when padding is needed

    def __iter__(self) -> Iterator[tuple[int, int]]:
        mine = self.order(self.epoch)[self.rank :: self.world_size]
        start, self.skip = self.skip, 0
        epoch = self.epoch
        return ((int(i), epoch) for i in mine[start:])


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
                "nsp_label": rows["nsp_label"][i],
                "index": index,
                "epoch": epoch,
            }
            for i, (index, epoch) in enumerate(keys)
        ]


@dataclass(frozen=True)
class BatchPlan:
    """How the configured batch (sequences per optimiser step) is split over devices and accumulation."""

    batch_size: int
    world_size: int
    grad_accum: int

    @property
    def micro_batch(self) -> int:
        return self.batch_size // (self.world_size * self.grad_accum)

    @classmethod
    def of(cls, batch_size: int, grad_accum: int, world_size: int) -> BatchPlan:
        if batch_size % (world_size * grad_accum):
            raise BvrError(
                f"batch_size {batch_size} is not divisible by devices x grad_accum = {world_size} x {grad_accum}",
                where="training.batch_size",
                hint="pick a batch size that splits evenly over devices and accumulation steps",
            )
        return cls(batch_size, world_size, grad_accum)


def _masking_options(cfg: Config) -> dict:
    """The collator arguments that training and validation share: what is masked and how."""
    m = cfg.masking
    return {"seed": m.seed, "mask_prob": m.mask_prob, "split": tuple(m.split), "scheme": m.scheme,
            "span_p": m.span_p, "span_max_words": m.span_max_words}


REFERENCE_SCHEME = "token"
REFERENCE_SPLIT = (0.8, 0.1, 0.1)
"""Validation masks BERT's way whatever an arm trains with: single tokens, 80% [MASK] / 10% random / 10% kept."""


def validation_differs(cfg: Config) -> bool:
    """Whether the arm trains on other masks than it is validated on (another scheme or split): its validation loss
    then measures the common reference task, not its own training task."""
    return cfg.masking.scheme != REFERENCE_SCHEME or tuple(cfg.masking.split) != REFERENCE_SPLIT


def fixed_validation_collator(vocab: VocabInfo, cfg: Config) -> PretrainingCollator:
    """Validation masks are one fixed copy (static copy 0 under the masking seed) of the reference masks
    (:data:`REFERENCE_SCHEME`, :data:`REFERENCE_SPLIT`, the arm's ``mask_prob``), the same for every arm and every
    evaluation, so validation losses compare across arms that differ in masking mode, scheme or split: each arm
    predicts the same masked tokens of the same sequences. (Validated on its own masks, an arm that replaces 0%
    by random tokens, or masks whole spans, would face an easier or harder task than its neighbour.)"""
    options = {**_masking_options(cfg), "scheme": REFERENCE_SCHEME, "split": REFERENCE_SPLIT}
    return PretrainingCollator(vocab, mode="static", dupe_factor=1, **options)


def training_collator(vocab: VocabInfo, cfg: Config) -> PretrainingCollator:
    """The collator of the training data: the configured masking mode, copies and scheme."""
    m = cfg.masking
    return PretrainingCollator(vocab, mode=m.mode, dupe_factor=m.dupe_factor, **_masking_options(cfg))


class PretrainingDataModule(L.LightningDataModule):
    """Serves the prepared sequences of one configuration to a Lightning Trainer.

    Args:
        cfg: the resolved configuration.
        instances: the prepared train and validation sequences.
        vocab: the tokenizer's vocabulary facts (for masking).
    """

    def __init__(self, cfg: Config, instances: datasets.DatasetDict, vocab: VocabInfo) -> None:
        super().__init__()
        self.cfg, self.instances, self.vocab = cfg, instances, vocab
        self.train_sampler: EpochSampler | None = None
        self._resume_skip: dict[str, int] | None = None

    def _world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def plan(self) -> BatchPlan:
        return BatchPlan.of(self.cfg.training.batch_size, self.cfg.training.grad_accum, self._world()[1])

    def train_dataloader(self) -> DataLoader:
        rank, world = self._world()
        self.train_sampler = EpochSampler(self.instances["train"].num_rows, seed=self.cfg.training.seed,
                                          rank=rank, world_size=world)
        if self._resume_skip is not None:
            self.train_sampler.set_epoch(self._resume_skip["epoch"])
            self.train_sampler.skip = self._resume_skip["sequences"]
            self._resume_skip = None
        return self._loader(self.instances["train"], self.train_sampler, training_collator(self.vocab, self.cfg))

    def val_dataloader(self) -> DataLoader:
        rank, world = self._world()
        # Unpadded strides: every validation sequence counted exactly once over all ranks.
        sampler = [(int(i), 0) for i in range(rank, self.instances["validation"].num_rows, world)]
        return self._loader(self.instances["validation"], sampler, fixed_validation_collator(self.vocab, self.cfg))

    def _loader(self, split: datasets.Dataset, sampler, collator: PretrainingCollator) -> DataLoader:
        workers = self.cfg.training.num_workers
        return DataLoader(
            InstanceDataset(split),
            batch_size=self.plan().micro_batch,
            sampler=sampler,
            collate_fn=collator,
            num_workers=workers,
            persistent_workers=workers > 0,
            # Its own generator: creating an iterator must not draw from the global RNG (dropout's), or a resumed
            # run would see different dropout masks than an uninterrupted one.
            generator=torch.Generator().manual_seed(self.cfg.training.seed),
        )

    # Resume: how many sequences of the current epoch this rank has consumed.
    def state_dict(self) -> dict[str, Any]:
        trainer = self.trainer
        if trainer is None or self.train_sampler is None:
            return {}
        # `processed` counts the batch being finished when a checkpoint is written inside on_train_batch_end.
        batches = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        return {"epoch": trainer.current_epoch, "sequences": batches * self.plan().micro_batch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict:
            self._resume_skip = dict(state_dict)

    def exposure(self, epochs: int) -> dict[str, int]:
        """How many distinct masks each sequence gets over ``epochs`` and how often each is seen."""
        return mask_exposure(self.cfg.masking.mode, epochs, self.cfg.masking.dupe_factor)
