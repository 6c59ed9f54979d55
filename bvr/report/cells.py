"""Table cells of a report: numbers formatted to the metric's digits, intervals, counts and rates, and links to
runs in the MLflow UI (at the addresses of :mod:`bvr.tracking.ui`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bvr.ablation.manifest import Manifest
from bvr.report.collect import Collected
from bvr.report.document import Cell, Link
from bvr.tracking.ui import SAVED_VIEWS, ui_address, ui_base, view_url


def fmt(value: float | None, digits: int = 1) -> str:
    """A number with ``digits`` decimals; '—' for None or NaN."""
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def signed(value: float | None, digits: int = 1) -> str:
    """A number with its sign and ``digits`` decimals ("+1.2"); "—" for None or NaN."""
    return "—" if value is None or math.isnan(value) else f"{value:+.{digits}f}"


def fmt_count(value: float | None) -> str:
    """'12.3M', '45.6K', '812'; '—' for None or NaN.

    >>> fmt_count(12_345_678), fmt_count(45_600), fmt_count(812), fmt_count(float("nan"))
    ('12.3M', '45.6K', '812', '—')
    """
    if value is None or math.isnan(value):
        return "—"
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= size:
            return f"{value / size:.1f}{suffix}"
    return f"{value:.0f}"


def fmt_rate(value: float | None) -> str:
    """A throughput with thousands separated: '12,345'."""
    return "—" if value is None or math.isnan(value) else f"{value:,.0f}"


def fmt_p(p: float) -> str:
    """A Holm-adjusted p-value as tables and headlines print it: 3 decimals, '<0.001' below that.

    >>> fmt_p(0.02751), fmt_p(0.0004)
    ('0.028', '<0.001')
    """
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def fmt_ci(low: float, high: float, digits: int = 1) -> str:
    return "—" if math.isnan(low) else f"[{low:.{digits}f}, {high:.{digits}f}]"


def metric_digits(metric: str) -> int:
    """Decimals for a metric: scores in points get 1, perplexities and losses 2."""
    return 1 if not (metric.endswith("perplexity") or metric.endswith("loss")) else 2


class RunLinks:
    """Links to runs in the MLflow UI, ``BASE/#/experiments/ID/runs/RUN``; plain run ids when the UI's address is
    not known (:func:`bvr.tracking.ui.ui_base`)."""

    def __init__(self, collected: Collected, ui_url: str | None = None) -> None:
        self.base = ui_base(collected.uri, ui_url)
        self.experiment_id = collected.experiment_id

    @property
    def linked(self) -> bool:
        return self.base is not None and self.experiment_id is not None

    def run(self, run_id: str, text: str | None = None) -> Cell:
        text = text or run_id[:8]
        return Link(text, ui_address(self.base, self.experiment_id, run_id)) if self.linked else text

    def views(self) -> Cell:
        """bvr's saved views of the experiment (:data:`bvr.tracking.ui.SAVED_VIEWS`): linked, or how to open them."""
        if not self.linked:  # the path after the address `mlflow ui` prints: no host is guessed
            paths = ", ".join(f"{view_url('', self.experiment_id, view.key)} ({view.link})" for view in SAVED_VIEWS)
            return f"in `mlflow ui`, open its address followed by {paths}; pass --ui-url for links"
        links: list = []
        for view in SAVED_VIEWS:
            links += [" · "] if links else []
            links.append(Link(view.link, view_url(self.base, self.experiment_id, view.key)))
        return tuple(links)

    def experiment(self, name: str) -> Cell:
        return Link(name, ui_address(self.base, self.experiment_id)) if self.linked else name


def relative_path(path: str | None) -> str:
    """A path relative to the working directory where it lies under it (reports are read from the repository)."""
    if not path:
        return "—"
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path


def mean_of(values: dict[int, float]) -> float | None:
    """The mean of a mapping's values; None when it is empty."""
    return sum(values.values()) / len(values) if values else None


def arm_config(manifest: Manifest, arm: str) -> dict[str, Any]:
    """The planned config of an arm: the manifest keys configs by label (``static-p0``), one per pretraining seed,
    and the seeds of one arm differ only in their seed (empty when the manifest has none)."""
    configs = manifest.configs
    if isinstance(configs.get(arm), dict):
        return configs[arm]
    labels = [record.label for record in manifest.records() if record.arm == arm]
    return next((configs[label] for label in labels if isinstance(configs.get(label), dict)), {})
