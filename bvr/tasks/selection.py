"""Choosing a fine-tuning grid's point on the held-out selection split, and what the choice records.

A grid (``finetune.learning_rate`` or ``finetune.epochs`` a list) fine-tunes every point over the same seeds, each
scored after its last epoch on :data:`~bvr.tasks.kinds.SELECTION` (training examples held out of training). The
point whose seeds have the best median there is chosen (the earliest among equals) and its seeds' scores on the
task's evaluation split are reported: :func:`select` reads nothing else, so the reported split never decides. The
choice is made per model (in an ablation, per arm and pretraining seed), as BERT and RoBERTa choose the learning rate
per model and task; it keeps the pretraining seeds, the report's unit of replication, independent of one another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bvr.config import GridPoint
from bvr.tasks.kinds import SELECTION
from bvr.tasks.results import SeedResult


def choose(scores: Sequence[Sequence[float]]) -> int:
    """The index of the point whose seeds' median score is highest; the earliest among equals.

    >>> choose([[0.5, 0.7], [0.8, 0.6], [0.7, 0.7]])
    1
    >>> choose([[0.6], [0.6]])
    0
    """
    medians = [float(np.median(values)) for values in scores]
    return max(range(len(medians)), key=lambda i: (medians[i], -i))


@dataclass
class PointResult:
    point: GridPoint
    seeds: list[SeedResult]


@dataclass
class Selection:
    """What a grid's choice records: each point's selection scores and the chosen one."""

    metric: str  # the selection split's key, ``selection/accuracy``
    # Per point, in grid order: ``learning_rate``, ``epochs``, ``name``, ``scores`` (per seed, in the seeds' order)
    # and their ``median``.
    points: list[dict[str, Any]]
    chosen: int
    note: str | None  # how the selection split was drawn (its size, share and seed)

    @property
    def chosen_point(self) -> dict[str, Any]:
        return self.points[self.chosen]

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "points": self.points, "chosen": self.chosen, "note": self.note}


def select(results: Sequence[PointResult], metric: str, note: str | None) -> Selection:
    """Choose among ``results`` by :func:`choose` over each seed's final-epoch score on the selection split, and
    nothing else of it."""
    key = f"{SELECTION}/{metric}"
    scores = [[seed.scores[key] for seed in result.seeds] for result in results]
    points = [{**result.point.to_dict(), "name": result.point.name, "scores": values,
               "median": float(np.median(values))} for result, values in zip(results, scores, strict=True)]
    return Selection(key, points, choose(scores), note)
