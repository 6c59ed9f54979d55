"""Table cells of a report: numbers formatted to the metric's digits, intervals, counts and rates, and links to
runs in the MLflow UI."""

from __future__ import annotations

import math
from pathlib import Path

from bvr.report.collect import Collected
from bvr.report.document import Cell, Link

MLFLOW_UI = "http://127.0.0.1:5000"
"""Where ``mlflow ui`` serves a local store; run links point there unless the store is itself a server."""


def fmt(value: float | None, digits: int = 1) -> str:
    """A number with ``digits`` decimals; '—' for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}f}"


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


def fmt_ci(low: float, high: float, digits: int = 1) -> str:
    return "—" if math.isnan(low) else f"[{low:.{digits}f}, {high:.{digits}f}]"


def metric_digits(metric: str) -> int:
    """Decimals for a metric: scores in points get 1, perplexities and losses 2."""
    return 1 if not (metric.endswith("perplexity") or metric.endswith("loss")) else 2


class RunLinks:
    """Links to runs in the MLflow UI: ``BASE/#/experiments/ID/runs/RUN``."""

    def __init__(self, collected: Collected) -> None:
        base = collected.uri if collected.uri.startswith(("http://", "https://")) else MLFLOW_UI
        self.base = base.rstrip("/")
        self.experiment_id = collected.experiment_id

    def run(self, run_id: str, text: str | None = None) -> Cell:
        if self.experiment_id is None:
            return text or run_id[:8]
        return Link(text or run_id[:8], f"{self.base}/#/experiments/{self.experiment_id}/runs/{run_id}")

    def experiment(self, name: str) -> Cell:
        if self.experiment_id is None:
            return name
        return Link(name, f"{self.base}/#/experiments/{self.experiment_id}")


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
