"""What a report shows in the MLflow UI besides its files: the rows of its views (computed by
:func:`bvr.report.headlines.effect_rows` and :func:`bvr.report.numbers.summary_rows`), and the runs' colours;
:func:`bvr.ops.views.write_report_views`, handed to :func:`bvr.report.render.render_report`, writes them."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

CURVE_METRICS = ("val/mlm_loss", "train/mlm_loss")  # charted first in the curves view (bvr.tracking.ui.CURVES_VIEW)


@dataclass(frozen=True)
class ScoreRow:
    """One row of the scores view: an arm's mean on a measure (``blimp``, ``probe/TASK``, ``finetune/TASK`` or
    ``mlm``; ``title``: its short name, ``sst2 fine-tuned``) over its ``n`` pretraining seeds, with its 95% t interval
    (``low``, ``high``: NaN below :data:`~bvr.report.inference.MIN_UNITS` seeds, and left out), in ``unit``
    (``points`` or ``nats``), rounded to the ``digits`` the report prints."""

    arm: str
    measure: str
    title: str
    unit: str
    digits: int
    mean: float
    low: float
    high: float
    n: int

    @property
    def name(self) -> str:
        return f"{self.arm} · {self.title}"

    def metrics(self) -> dict[str, float]:
        values = {"mean": self.mean, "ci95_low": self.low, "ci95_high": self.high}  # the level in the column's name
        out = {k: round(v, self.digits) for k, v in values.items() if math.isfinite(v)}
        return {**out, "n": float(self.n)}


@dataclass(frozen=True)
class EffectRow:
    """One row of the effects view: ``b − a`` on a measure as the report states it (``arm_a`` the control, or the
    paper's baseline arm; the rest as in :class:`ScoreRow`). ``difference`` is its mean over pretraining seeds,
    ``low`` and ``high`` its simultaneous interval at the report's ``level`` (``99.62%``), ``detectable`` the smallest
    ``|b − a|`` detected with 80 % power (these three NaN when not tested, and left out); ``verdict`` in words."""

    arm_a: str
    arm_b: str
    measure: str
    title: str
    unit: str
    digits: int
    difference: float
    low: float
    high: float
    detectable: float
    level: str
    verdict: str

    @property
    def name(self) -> str:
        return f"{self.arm_b} − {self.arm_a} · {self.title}"

    @property
    def text(self) -> str:
        """``+2.0 [+1.1, +2.9] points``; ``+3.6 points`` without an interval."""
        d = self.digits
        interval = f" [{self.low:+.{d}f}, {self.high:+.{d}f}]" if math.isfinite(self.low) else ""
        return f"{self.difference:+.{d}f}{interval} {self.unit}"

    def metrics(self) -> dict[str, float]:
        values = {"difference": self.difference, "low": self.low, "high": self.high, "detectable": self.detectable}
        return {k: round(v, self.digits) for k, v in values.items() if math.isfinite(v)}


@dataclass(frozen=True)
class ReportViews:
    """What a report shows in the MLflow UI besides its files: the effects and scores views' rows, in the report's
    order, and how to draw the pretraining runs."""

    effects: list[EffectRow] = field(default_factory=list)
    scores: list[ScoreRow] = field(default_factory=list)
    colours: Mapping[str, str] = field(default_factory=dict)  # arm -> ``#rrggbb``, the figures' colour for it
    pretrain_runs: Mapping[str, str] = field(default_factory=dict)  # run id -> its arm, drawn in the arm's colour
    curves: Mapping[str, Iterable[float]] = field(default_factory=dict)  # metric -> values: CURVE_METRICS' y axes


ViewWriter = Callable[["MlflowClient", str, "str | None", ReportViews], None]  # (client, experiment, parent run, views)
