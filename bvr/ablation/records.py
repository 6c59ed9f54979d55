"""What the manifest keeps of each unit of an ablation (:class:`Record`), and :func:`read_records`, which reads one
section of a manifest."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from bvr.ablation.checked import known_fields, mismatch
from bvr.errors import BvrError

Status = Literal["missing", "done", "failed"]


class Record:
    """What the manifest keeps of one unit's work: its status, MLflow run ids, timings and scores. Subclasses are
    dataclasses whose fields are in the order of their JSON objects."""

    arm: str
    label: str
    pretrain_seed: int
    status: Status
    run_id: str | None
    error: str | None

    _DEFAULTS: dict[str, Any] = {"pretrain_seed": 0, "task": None}
    _REQUIRED: tuple[str, ...] = ("arm", "status")
    _KEY: tuple[str, ...] = ("label",)

    @property
    def key(self) -> tuple[Any, ...]:
        """Which unit (and seed) the record is of: no two records of one kind in a manifest share it."""
        return tuple(getattr(self, name) for name in self._KEY)

    def update(self, **changes: Any) -> None:
        """Set several fields at once (unknown names are refused)."""
        names = {f.name for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        for key, value in changes.items():
            if key not in names:
                raise AttributeError(f"{type(self).__name__} has no field '{key}'")
            setattr(self, key, value)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        """The record a manifest's JSON object holds (``label`` defaults to the arm, ``pretrain_seed`` to 0)."""
        return cls(**known_fields(cls, {**cls._DEFAULTS, "label": data["arm"], **data}))


@dataclass
class PretrainRecord(Record):
    """A pretrained arm at one pretraining seed (the control has none: it is initialised, not trained)."""

    arm: str
    label: str
    pretrain_seed: int
    status: Status = "missing"
    run_id: str | None = None
    run_dir: str | None = None
    error: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    """The run's final metrics, as the runner copied them."""


@dataclass
class EvaluationRecord(Record):
    """One model's zero-shot BLiMP score (task None) or frozen-feature probe on a task, over every probe seed."""

    _REQUIRED = ("arm", "kind", "status")
    _KEY = ("label", "kind", "task")

    arm: str
    label: str
    pretrain_seed: int
    kind: str
    """``blimp`` or ``probe`` (:class:`UnitKind`'s values)."""
    task: str | None
    status: Status = "missing"
    run_id: str | None = None
    main_key: str | None = None
    score: float | None = None
    seeds: dict[str, float] = field(default_factory=dict)
    """Probe seed (as text) -> score."""
    baseline: float | None = None
    seconds: float | None = None
    error: str | None = None


@dataclass
class FinetuneRecord(Record):
    """One model fine-tuned on one task with one fine-tuning seed."""

    _REQUIRED = ("arm", "task", "seed", "status")
    _KEY = ("label", "task", "seed")

    arm: str
    label: str
    pretrain_seed: int
    task: str
    seed: int
    status: Status = "missing"
    run_id: str | None = None
    parent_run_id: str | None = None
    """The task's MLflow run, the seed runs' parent."""
    main_key: str | None = None
    score: float | None = None
    collapsed: bool | None = None
    seconds: float | None = None
    baseline: dict[str, float] = field(default_factory=dict)
    """Headline key -> the trivial baseline's score."""
    grid_point: str | None = None
    """A fine-tuning grid's point chosen for this model and task (``lr 1e-03, 2 epochs``); None without a grid."""
    selection: list[dict[str, Any]] | None = None
    """A grid: this seed's score on the selection split at every point (``learning_rate``, ``epochs``, ``name``,
    ``score``), in grid order; the report draws the selection curve from them."""
    error: str | None = None


def read_records(record: type[Record], items: Any, where: str, hint: str, damaged: list[str] | None) -> list[Any]:
    """The records of one manifest section, naming the first unit that lacks a key or holds a value of the wrong type
    (:func:`~bvr.ablation.checked.mismatch`); given a ``damaged`` list, every such unit is left out and named there
    (``KEY[I] (lacks ...)``) instead."""
    key = where.rpartition(": ")[2]
    if not isinstance(items, list):
        raise BvrError(f"'{key}' must be a list of units", where=where, hint=hint)
    out = []
    for i, item in enumerate(items):
        absent = [k for k in record._REQUIRED if not isinstance(item, dict) or k not in item]
        problem = f"lacks {', '.join(absent)}" if absent else mismatch(record, item)
        if problem and damaged is not None:
            damaged.append(f"{key}[{i}] ({problem})")
        elif problem:
            raise BvrError(f"unit {problem}", where=f"{where}[{i}]", hint=hint)
        else:
            out.append(record.from_dict(item))
    return out
