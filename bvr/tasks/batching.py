"""Batching encoded features: padded collation (:func:`collate`, to each batch's longest row), the dataset rows it
collates, and length-grouped shuffling for training (:class:`LengthGroupedSampler`, seeded, so a seed still gives
the same run; evaluation runs longest first), so that little of a batch is padding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

PAD_VALUES: dict[str, int | None] = {
    "input_ids": None,  # the tokenizer's padding id
    "attention_mask": 0,
    "token_type_ids": 0,
}
"""How each list-valued column is padded; None: with the tokenizer's padding id. A task kind adds its own list
columns (tagging: token labels, padded with the ignored label)."""


class LengthGroupedSampler(Sampler[int]):
    """A seeded shuffle whose batches hold examples of similar length, so that padding to the longest costs little:
    each epoch the examples are shuffled (by ``seed`` and the epoch), cut into groups of ``group`` batches, each
    group sorted by length (longest first) and cut into batches, and the batches of all groups shuffled again (a
    short last batch stays last; give the DataLoader the same ``batch_size``). Every example comes once per epoch;
    which examples share a batch stays random beyond their length; the same seed and epoch give the same order
    (Lightning calls :meth:`set_epoch` before each epoch).

    >>> order = list(LengthGroupedSampler([5, 1, 4, 2, 3, 6], batch_size=2, seed=0, group=3))
    >>> sorted(order)
    [0, 1, 2, 3, 4, 5]
    >>> order == list(LengthGroupedSampler([5, 1, 4, 2, 3, 6], batch_size=2, seed=0, group=3))
    True
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int, group: int = 50) -> None:
        self.lengths = np.asarray(lengths)
        self.batch_size, self.seed, self.group = batch_size, seed, group
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        order = rng.permutation(len(self.lengths))
        size = self.batch_size * self.group
        batches = []
        for start in range(0, len(order), size):
            chunk = order[start:start + size]
            chunk = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
            batches += [chunk[i:i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        # Only the last group can end in a short batch: it stays last, so that the DataLoader, which cuts this order
        # into consecutive runs of batch_size, cuts exactly these batches.
        short = [batches.pop()] if batches and len(batches[-1]) < self.batch_size else []
        for batch in [*(batches[i] for i in rng.permutation(len(batches))), *short]:
            yield from batch.tolist()


class FeatureDataset(Dataset):
    """Rows of column-wise features: ``{column: value}`` plus ``index``, the row's position in the split."""

    def __init__(self, features: Mapping[str, list], columns: Sequence[str]) -> None:
        missing = [column for column in columns if column not in features]
        if missing:
            raise ValueError(f"features lack the columns {missing}")
        self.features = features
        self.columns = tuple(columns)

    def __len__(self) -> int:
        return len(self.features[self.columns[0]])

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"index": index, **{column: self.features[column][index] for column in self.columns}}


def collate(rows: Sequence[Mapping[str, Any]], pad_id: int,
            pad_values: Mapping[str, int | None] = PAD_VALUES) -> dict[str, torch.Tensor]:
    """Stack rows into tensors, padding list-valued columns to the longest row with ``pad_values`` (a column it
    does not name, or names with None, is padded with ``pad_id``; see :data:`PAD_VALUES`).

    The attention mask is 1 over each row's tokens and 0 over its padding. Scalars (sequence labels, span
    positions, indices) are stacked as they are: ints as int64, floats (regression labels) as float32.

    >>> batch = collate([{"input_ids": [5, 6, 7], "labels": 1}, {"input_ids": [8], "labels": 0}], pad_id=0)
    >>> batch["input_ids"].tolist(), batch["attention_mask"].tolist(), batch["labels"].tolist()
    ([[5, 6, 7], [8, 0, 0]], [[1, 1, 1], [1, 0, 0]], [1, 0])
    """
    width = max(len(row["input_ids"]) for row in rows)
    batch = {"attention_mask": torch.tensor([[1] * len(row["input_ids"]) + [0] * (width - len(row["input_ids"]))
                                             for row in rows])}
    for key in rows[0]:
        values = [row[key] for row in rows]
        if isinstance(values[0], (list, tuple)):
            pad = pad_values.get(key)
            pad = pad_id if pad is None else pad
            batch[key] = torch.tensor([list(value) + [pad] * (width - len(value)) for value in values])
        else:
            batch[key] = torch.tensor(values, dtype=torch.float32 if isinstance(values[0], float) else torch.long)
    return batch
