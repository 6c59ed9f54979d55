"""Saved views of an ablation's experiment in the MLflow UI: the answer, without configuring a column.

MLflow's UI (3.17) lists an experiment's saved views under "Views" and opens one when its address ends in
``?viewStateShareKey=KEY``: both read the experiment tag ``mlflow.sharedViewState.KEY``, an envelope
``{"name", "createdAt", "updatedAt", "state"}`` whose ``state`` is the view (search filter, sort, columns and their
widths, charts) as JSON. bvr writes two (:func:`write_views`):

- ``bvr-scores`` (:data:`SCORES_VIEW`): one row per arm and measure, the summary runs the report writes
  (:func:`write_summaries`, tagged ``bvr.stage = summary``): the mean over the arm's pretraining seeds and its
  95% t interval (``ci95_low``, ``ci95_high``: per arm, as the report's "Every measure, per arm"; differences
  between arms, with the report's simultaneous intervals, are in the parent run's description), rounded as the
  report prints them (points to 1 decimal, the validation MLM loss in nats to 3), the number of seeds and the
  unit; the validation MLM loss is one of the measures. Rows are named ``ARM · MEASURE`` (``static · sst2
  fine-tuned``) in a column wide enough for them;
- ``bvr-curves`` (:data:`CURVES_VIEW`): the pretraining runs in the chart view, two charts to a row, the validation
  and training MLM loss first, each on a y axis fitted to the data when the report knows it (``ranges``), every
  run drawn in its arm's colour (:func:`set_run_colours`, the report figures' colours; the UI's own colour for a
  group is a hash of its name and gives two arms near-identical reds).

:func:`view_url` gives a view's address for a known UI (``--ui-url``, ``BVR_MLFLOW_UI``, or a tracking server), and
:func:`ui_address` any other address; every one carries :data:`MODEL_TRAINING`. A UI that does not read a key
ignores it, and a view it cannot read leaves the default runs table.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from mlflow.entities import Metric, RunStatus, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from bvr.tracking.runs import MODEL_METRIC_SECTION

MODEL_TRAINING = {"workflowType": "machine_learning"}
"""The query that opens MLflow's UI (3.x) in its model-training mode. The UI takes its mode from the address, else
from the browser's storage, where a fresh profile holds the GenAI mode: its sidebar then offers traces, judges and
agent versions, and an experiment's address lands on an empty traces overview."""
DEFAULT_UI = "http://127.0.0.1:5000"
"""Where ``mlflow ui`` serves by default: the address bvr prints when it knows of no other."""
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
"""The experiment tag prefix MLflow's UI reads a saved view from."""
RUN_COLOUR_TAG = "mlflow.runColor"
"""The run tag MLflow's UI draws a run's lines and dot in (``#rrggbb``)."""
TAG_MEASURE = "bvr.measure"
"""Tag on every run that holds one model's headline on one measure: ``finetune/TASK``, ``probe/TASK``, ``blimp``."""
TAG_SUMMARY = "bvr.summary"
"""Tag on a summary run: ``ARM|MEASURE``, what it summarises (one run per arm and measure under a parent run)."""
TAG_UNIT = "bvr.unit"
STAGE_SUMMARY = "summary"
"""The ``bvr.stage`` of the report's summary runs."""

SCORES_VIEW = "bvr-scores"
CURVES_VIEW = "bvr-curves"
VIEW_NAMES = {SCORES_VIEW: "bvr: scores per arm", CURVES_VIEW: "bvr: pretraining curves per arm"}
"""How the UI's "Views" list names each view."""
CURVE_METRICS = ("val/mlm_loss", "train/mlm_loss")
"""Pretraining metrics charted first in :data:`CURVES_VIEW`, one chart each."""
CURVES_SECTION = "Pretraining curves, one colour per arm"
"""The title of :data:`CURVES_VIEW`'s chart section (the browser check looks for it)."""
FOLDED_SECTIONS = ("train", "val", "run", MODEL_METRIC_SECTION, "Model metrics", "System metrics")
"""The chart sections the UI makes of every other metric (by the prefix before ``/``), folded: a chart loads only
when its section is open, and 40 more charts loading at once keep the two that matter spinning."""
SUMMARY_COLUMNS = ("mean", "ci95_low", "ci95_high", "n")
"""The metrics of a summary run, in the order the scores view shows them."""
NAME_WIDTH = 300
"""Pixels of the scores view's run-name column: ``no-pretraining · validation MLM loss`` fits."""


def _column(kind: str, key: str) -> str:
    """A runs-table column as the UI names it: ``metrics.`score```, ``tags.`bvr.arm```."""
    return f"{kind}.`{key}`"


def _line_chart(metric: str, index: int, y_range: tuple[float, float] | None) -> dict[str, Any]:
    chart = {"uuid": f"bvr-{metric.replace('/', '-')}", "type": "LINE", "runsCountToCompare": 100,
            "metricSectionId": "bvr-pretraining", "deleted": False, "isGenerated": False, "metricKey": metric,
            "selectedMetricKeys": [metric], "scaleType": "linear", "xAxisKey": "step", "xAxisScaleType": "linear",
            "lineSmoothness": 0, "selectedXAxisMetricKey": "", "displayPoints": False, "index": index}
    if y_range is not None:  # keys left out, not null: the UI takes a null as a bound
        chart["range"] = {"yMin": y_range[0], "yMax": y_range[1]}
    return chart


def fitted_range(values: Iterable[float], margin: float = 0.05) -> tuple[float, float] | None:
    """A y axis for ``values``: their span and ``margin`` of it on either side (never from 0 unless they reach it);
    None when there is nothing finite to fit.

    >>> fitted_range([7.2, 7.3, 7.25])
    (7.195, 7.305)
    >>> fitted_range([2.0, 2.0]), fitted_range([float("nan")])
    ((1.9, 2.1), None)
    """
    finite = [float(v) for v in values if math.isfinite(v)]
    if not finite:
        return None
    low, high = min(finite), max(finite)
    pad = (high - low) * margin or abs(low) * margin or 1.0
    return round(low - pad, 6), round(high + pad, 6)


def view_states(ranges: Mapping[str, tuple[float, float]] | None = None) -> dict[str, dict[str, Any]]:
    """Each view's state, keyed by its share key, in the MLflow UI's JSON shape.

    Args:
        ranges: metric -> (low, high) of its chart's y axis (:func:`fitted_range`); a chart without one scales
            itself.
    """
    ranges = ranges or {}
    name = _column("attributes", "Run Name")
    scores_columns = [name, *(_column("metrics", key) for key in SUMMARY_COLUMNS), _column("tags", TAG_UNIT)]
    scores = {
        "searchFilter": f"tags.`bvr.stage` = '{STAGE_SUMMARY}'",
        "orderByKey": "tags.`mlflow.runName`",
        "orderByAsc": True,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "selectedColumns": scores_columns,
        "columnOrder": scores_columns,
        "columnWidths": {name: NAME_WIDTH, **{column: 90 for column in scores_columns[1:]}},
        "runsHiddenMode": "SHOW_ALL",
        "groupBy": None,
    }
    curves = {
        "searchFilter": "tags.`bvr.stage` = 'pretrain'",
        "orderByKey": "tags.`mlflow.runName`",
        "orderByAsc": True,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "selectedColumns": [name],
        "runsHiddenMode": "SHOW_ALL",
        "groupBy": None,
        "useGroupedValuesInCharts": False,
        "hideEmptyCharts": True,
        "compareRunSections": [{"uuid": "bvr-pretraining", "name": CURVES_SECTION, "display": True,
                                "isReordered": False, "columns": 2, "cardHeight": 400},
                               *({"uuid": f"bvr-folded-{i}", "name": name, "display": False, "isReordered": False}
                                 for i, name in enumerate(FOLDED_SECTIONS))],
        "compareRunCharts": [_line_chart(metric, i, ranges.get(metric)) for i, metric in enumerate(CURVE_METRICS)],
    }
    return {SCORES_VIEW: scores, CURVES_VIEW: curves}


def write_views(client: MlflowClient, experiment_id: str,
                ranges: Mapping[str, tuple[float, float]] | None = None) -> None:
    """Write (or refresh) bvr's saved views as tags of the experiment, listed under the UI's "Views"; idempotent.

    Args:
        client: the store.
        experiment_id: the ablation's experiment.
        ranges: the curves' y axes (:func:`view_states`).
    """
    now = int(time.time() * 1000)
    for key, state in view_states(ranges).items():
        envelope = {"name": VIEW_NAMES[key], "createdAt": now, "updatedAt": now,
                    "state": json.dumps(state, sort_keys=True)}
        client.set_experiment_tag(experiment_id, SHARED_VIEW_PREFIX + key, json.dumps(envelope))


def saved_view(tags: Mapping[str, str], key: str) -> dict[str, Any] | None:
    """The state of the saved view ``key`` among an experiment's tags (either form the UI reads), or None."""
    raw = tags.get(SHARED_VIEW_PREFIX + key)
    if raw is None:
        return None
    value = json.loads(raw)
    return json.loads(value["state"]) if isinstance(value.get("state"), str) else value


@dataclass(frozen=True)
class ScoreRow:
    """One row of the scores view: an arm's mean on a measure over its pretraining seeds.

    Attributes:
        arm: the arm.
        measure: ``blimp``, ``probe/TASK``, ``finetune/TASK`` or ``mlm``.
        title: the measure's short name (``sst2 fine-tuned``).
        unit: ``points`` or ``nats``.
        digits: decimals the report prints (the values are rounded to them).
        mean: the mean over pretraining seeds.
        low: the low end of its 95% t interval (NaN below two seeds: left out).
        high: the high end.
        n: pretraining seeds.
    """

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


def write_summaries(client: MlflowClient, experiment_id: str, parent_run_id: str, rows: list[ScoreRow]) -> list[str]:
    """Write the scores view's rows as finished runs nested under ``parent_run_id``, one per arm and measure; a
    row the parent has already is updated (a report rendered again), not doubled. Returns the run ids."""
    query = f"tags.`bvr.stage` = '{STAGE_SUMMARY}' and tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_run_id}'"
    existing = {run.data.tags.get(TAG_SUMMARY): run.info.run_id
                for run in client.search_runs([experiment_id], query, max_results=10_000)}
    now = int(time.time() * 1000)
    ids = []
    for row in rows:
        key = f"{row.arm}|{row.measure}"
        tags = {"bvr.stage": STAGE_SUMMARY, "bvr.arm": row.arm, TAG_SUMMARY: key, TAG_UNIT: row.unit,
                MLFLOW_PARENT_RUN_ID: parent_run_id}
        run_id = existing.get(key) or client.create_run(experiment_id, run_name=row.name, tags=tags).info.run_id
        client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in row.metrics().items()],
                         tags=[RunTag(k, v) for k, v in tags.items()])
        client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED))
        ids.append(run_id)
    return ids


def set_run_colours(client: MlflowClient, colours: Mapping[str, str]) -> None:
    """Draw each run (id -> ``#rrggbb``) in its colour in the UI's charts and runs list."""
    for run_id, colour in colours.items():
        client.set_tag(run_id, RUN_COLOUR_TAG, colour)


def ui_address(base: str, experiment_id: str, run_id: str | None = None, **query: str) -> str:
    """The address of an experiment's runs, or of one run, in the MLflow UI at ``base``, in model-training mode.

    >>> ui_address("http://127.0.0.1:5000", "3", "ab12")
    'http://127.0.0.1:5000/#/experiments/3/runs/ab12?workflowType=machine_learning'
    """
    path = f"/#/experiments/{experiment_id}/runs" + (f"/{run_id}" if run_id else "")
    return f"{base.rstrip('/')}{path}?{urlencode({**query, **MODEL_TRAINING})}"


def view_url(base: str, experiment_id: str, key: str) -> str:
    """The address of a saved view in the MLflow UI at ``base`` (:func:`bvr.report.cells.ui_base`).

    >>> view_url("http://127.0.0.1:5000", "3", CURVES_VIEW)
    'http://127.0.0.1:5000/#/experiments/3/runs?viewStateShareKey=bvr-curves&compareRunsMode=CHART&workflowType=machine_learning'
    """
    query = {"viewStateShareKey": key}
    if key == CURVES_VIEW:
        query["compareRunsMode"] = "CHART"
    return ui_address(base, experiment_id, **query)
