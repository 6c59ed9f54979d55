"""What :func:`bvr.tasks.run.finetune` returns: each seed's :class:`SeedResult`, the task's :class:`TaskInfo` and
the :class:`FinetuneResult` of every seed with the :func:`spread` of its headline score; :func:`describe` prints it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bvr.formatting import duration, points
from bvr.sealed import seal, unseal
from bvr.tasks.registry import get_task


@dataclass
class SeedResult:
    """One seed's outcome (the seed draws the head's initialisation, dropout and data order): ``scores``, the final
    epoch's, ``split/metric``; ``best_scores``, those of the epoch (1-based ``best_epoch``) with the best headline
    score; ``collapsed``, whether the final epoch's predictions on the headline split are degenerate (one class,
    constant); ``reused``, found in the cache rather than trained now."""

    seed: int
    scores: dict[str, float]
    best_scores: dict[str, float]
    best_epoch: int
    collapsed: bool
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)
    run_id: str | None = None
    reused: bool = False


@dataclass
class TaskInfo:
    """What the data said, kept with every seed's result: the baseline, the read reports and any split note."""

    baseline: dict[str, float]
    baseline_note: str | None
    reports: list[str]
    split_note: str | None


@dataclass
class FinetuneResult:
    """All seeds of one (checkpoint, task), with the spread of the headline score: ``from_scratch``, whether the
    encoder was randomly initialised (the no-pretraining control); ``parent_run_id``, the MLflow run of this call
    (None when every seed was reused); ``selection``, a grid's choice (:meth:`bvr.tasks.selection.Selection.to_dict`:
    each point's selection scores and the chosen point, whose seeds ``seeds`` are), None without a grid."""

    task: str
    arm: str
    checkpoint: str
    from_scratch: bool
    main_key: str
    seeds: list[SeedResult]
    info: TaskInfo
    config: dict[str, Any]
    seconds: float
    parent_run_id: str | None = None
    selection: dict[str, Any] | None = None

    @property
    def chosen_point(self) -> str | None:
        """The chosen grid point's name (``lr 1e-03, 2 epochs``), or None without a grid."""
        return self.selection["points"][self.selection["chosen"]]["name"] if self.selection else None

    def summary(self) -> dict[str, float]:
        """:func:`spread` of the final epoch's headline score over the seeds."""
        return spread([seed.scores[self.main_key] for seed in self.seeds])


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min, max, first and third quartiles (numpy's linear quantiles) and IQR.

    >>> spread([1.0, 2.0, 3.0, 4.0, 5.0])
    {'median': 3.0, 'min': 1.0, 'max': 5.0, 'q1': 2.0, 'q3': 4.0, 'iqr': 2.0}
    """
    q1, median, q3 = (float(q) for q in np.percentile(np.asarray(values, dtype=np.float64), [25, 50, 75]))
    return {"median": median, "min": float(min(values)), "max": float(max(values)), "q1": q1, "q3": q3, "iqr": q3 - q1}


def _seed_rows(result: FinetuneResult, scale: float) -> list[str]:
    key = result.main_key
    header = f"  {'seed':>4}  {key:>14}  {'best (epoch)':>16}  {'collapsed':>9}  {'time':>8}"
    rows = [header]
    for seed in result.seeds:
        best = f"{points(seed.best_scores[key], scale)} ({seed.best_epoch})"
        time_text = "cached" if seed.reused else duration(seed.seconds)
        rows.append(f"  {seed.seed:>4}  {points(seed.scores[key], scale):>14}  {best:>16}  "
                    f"{'YES' if seed.collapsed else 'no':>9}  {time_text:>8}")
    return rows


def _grid_rows(result: FinetuneResult, scale: float) -> list[str]:
    """A grid's points with their seeds' median on the selection split, the chosen one marked."""
    if not result.selection:
        return []
    metric, chosen = result.selection["metric"], result.selection["chosen"]
    rows = [f"grid: {len(result.selection['points'])} points, each over the seeds; chosen by the median {metric} "
            "(training examples held out of training), the seeds below are the chosen point's"]
    for i, point in enumerate(result.selection["points"]):
        mark = "  <- chosen" if i == chosen else ""
        rows.append(f"  {point['name']:>22}  {metric} median {points(point['median'], scale)}{mark}")
    return rows


def describe(result: FinetuneResult) -> str:
    """A few lines for the CLI: the seeds' scores in points, their spread, the baseline, collapses and time."""
    key, stats = result.main_key, result.summary()
    scale = get_task(result.task).points_scale
    pts = {name: points(value, scale) for name, value in stats.items()}
    control = " (no-pretraining control: random encoder of the same shape)" if result.from_scratch else ""
    lines = [f"{result.task}: {len(result.seeds)} seed(s) from {result.checkpoint}, arm {result.arm}{control}",
             *_grid_rows(result, scale), *_seed_rows(result, scale),
             f"{key} in points over {len(result.seeds)} seed(s): median {pts['median']}, min-max {pts['min']} to "
             f"{pts['max']}, IQR {pts['iqr']} ({pts['q1']} to {pts['q3']}); "
             "final epoch (best: the best epoch on the same split, optimistic)"]
    if key in result.info.baseline:
        lines.append(f"trivial baseline: {key} {points(result.info.baseline[key], scale)}, "
                     f"{result.info.baseline_note}")
    collapsed = [seed.seed for seed in result.seeds if seed.collapsed]
    if collapsed:
        lines.append(f"collapsed: {len(collapsed)} of {len(result.seeds)} seeds ({', '.join(map(str, collapsed))}) "
                     "predict one class (or a constant) on the headline split")
    lines.extend(f"data: {line}" for line in result.info.reports)
    if result.info.split_note:
        lines.append(f"split: {result.info.split_note}")
    reused = sum(seed.reused for seed in result.seeds)
    cache_note = f" ({reused} seed(s) reused from the cache)" if reused else ""
    lines.append(f"time: {duration(result.seconds)}{cache_note}")
    return "\n".join(lines)


def write_seed_result(out: Path, result: SeedResult, info: TaskInfo, folder: Path) -> None:
    """Write the seed's result in ``out`` (the build's temporary folder), sealed for ``folder``, where it will lie."""
    payload = seal({"seed": dataclasses.asdict(result), "info": dataclasses.asdict(info)}, folder.name)
    (out / "result.json").write_text(json.dumps(payload, indent=2), encoding="utf-8")


def read_seed_result(folder: Path) -> tuple[SeedResult, TaskInfo]:
    """The seed's cached result (checked by :func:`seed_result_problem` when it is first found)."""
    payload = json.loads((folder / "result.json").read_text(encoding="utf-8"))
    result = SeedResult(**payload["seed"])
    result.reused = True
    return result, TaskInfo(**payload["info"])


def seed_result_problem(folder: Path, *, producer: str | None = None) -> str | None:
    """Why the seed's result.json in ``folder`` cannot be reused, or None: it is not what the cache folder named
    ``producer`` (default: ``folder``'s own name) wrote: edited, copied from another folder, unreadable, or written
    before results were sealed."""
    path = folder / "result.json"
    try:
        payload, why = unseal(json.loads(path.read_text(encoding="utf-8")), producer or folder.name)
        if payload is not None:
            SeedResult(**payload["seed"]), TaskInfo(**payload["info"])
    except (OSError, ValueError) as err:
        return f"cannot be read ({type(err).__name__}: {err})"
    except (KeyError, TypeError) as err:
        return f"is not a seed's result ({type(err).__name__}: {err})"
    return why
