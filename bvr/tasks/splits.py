"""A task's splits, read and encoded (:class:`SplitData`, :class:`TaskData`): what every task kind and evaluator
reads, kept apart from :mod:`bvr.tasks.data`, which loads them with the kinds, so that the kinds import these types
without a circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bvr.config import DataSettings
from bvr.tasks.registry import TaskSpec


@dataclass
class SplitData:
    """One split ('train', 'dev', ...: metric keys start with its name), read (after any cap) and encoded: one
    feature per example, or per window for span tasks."""

    name: str
    examples: list[Any]
    features: dict[str, list]

    def __len__(self) -> int:
        return len(self.features["input_ids"])


@dataclass
class TaskData:
    """A task's splits, encoded for one tokenizer, with what the user should see about them: ``reports``, one line
    per file read (rows read and skipped), then one per cap or truncation; ``split_note``, how the training and
    evaluation parts were drawn from one file, and any held-out slice, or None; ``settings``, the data settings it
    was loaded with (SQuAD v2.0's null threshold among them)."""

    spec: TaskSpec
    family: str
    pad_id: int
    train: SplitData
    evals: dict[str, SplitData]
    reports: list[str] = field(default_factory=list)
    split_note: str | None = None
    settings: DataSettings = field(default_factory=DataSettings)

    def train_labels(self) -> list[int | float]:
        """The training examples' labels (classification and regression), for the majority baseline."""
        return [example.label for example in self.train.examples]
