"""Saved views of an ablation's experiment in the MLflow UI: the comparison, without configuring a column.

MLflow's UI opens a saved view from an experiment tag ``mlflow.sharedViewState.KEY`` when its address ends in
``?viewStateShareKey=KEY`` (the tag its own "Share" button writes: the view's search filter, sort, columns and
grouping as JSON). bvr writes two such views on every ablation's experiment (:func:`write_views`):

- ``bvr-scores`` (:data:`SCORES_VIEW`): one row per model and measure (a fine-tuning task's median over seeds,
  BLiMP, a probe: the runs tagged :data:`TAG_MEASURE`), grouped by ``bvr.arm`` then ``bvr.measure``, with the
  columns ``score`` (points), ``bvr.pretrain_seed`` and ``bvr.stage``. Each group row shows the mean score over
  the arm's pretraining seeds, the number the report's tables average;
- ``bvr-curves`` (:data:`CURVES_VIEW`): the pretraining runs grouped by arm in the chart view, where each chart
  draws an arm's mean curve with its min-max band; the validation and training MLM loss charts come first.

:func:`view_url` gives a view's address for a known UI (``--ui-url``, ``BVR_MLFLOW_UI``, or a tracking server), and
:func:`ui_address` any other address; every one carries :data:`MODEL_TRAINING`.
The state format is the MLflow UI's own (3.x); an older or newer UI that does not read a key ignores it, and a
view it cannot read leaves the default runs table.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from mlflow.tracking import MlflowClient

MODEL_TRAINING = {"workflowType": "machine_learning"}
"""The query that opens MLflow's UI (3.x) in its model-training mode. The UI takes its mode from the address, else
from the browser's storage, where a fresh profile holds the GenAI mode: its sidebar then offers traces, judges and
agent versions, and an experiment's address lands on an empty traces overview."""
DEFAULT_UI = "http://127.0.0.1:5000"
"""Where ``mlflow ui`` serves by default: the address bvr prints when it knows of no other."""
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
"""The experiment tag prefix MLflow's UI reads a shared view from."""
TAG_MEASURE = "bvr.measure"
"""Tag on every run that holds one model's headline on one measure: ``finetune/TASK``, ``probe/TASK``, ``blimp``."""

SCORES_VIEW = "bvr-scores"
CURVES_VIEW = "bvr-curves"
CURVE_METRICS = ("val/mlm_loss", "train/mlm_loss")
"""Pretraining metrics charted first in :data:`CURVES_VIEW`, one chart each."""


def _column(kind: str, key: str) -> str:
    """A runs-table column as the UI names it: ``metrics.`score```, ``tags.`bvr.arm```."""
    return f"{kind}.`{key}`"


def _grouped(*tags: str) -> dict[str, Any]:
    return {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": tag} for tag in tags]}


def _line_chart(metric: str, index: int) -> dict[str, Any]:
    return {"uuid": f"bvr-{metric.replace('/', '-')}", "type": "LINE", "runsCountToCompare": 100,
            "metricSectionId": "bvr-pretraining", "deleted": False, "isGenerated": False, "metricKey": metric,
            "selectedMetricKeys": [metric], "scaleType": "linear", "xAxisKey": "step", "xAxisScaleType": "linear",
            "lineSmoothness": 0, "selectedXAxisMetricKey": "", "displayPoints": False, "index": index}


def view_states() -> dict[str, dict[str, Any]]:
    """Each view's state, keyed by its share key, in the MLflow UI's JSON shape."""
    scores = {
        "searchFilter": f"tags.`{TAG_MEASURE}` LIKE '%'",
        "orderByKey": "tags.`mlflow.runName`",
        "orderByAsc": True,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "selectedColumns": [_column("attributes", "Run Name"), _column("metrics", "score"),
                            _column("tags", "bvr.pretrain_seed"), _column("tags", "bvr.stage")],
        "groupBy": _grouped("bvr.arm", TAG_MEASURE),
        "runsHiddenMode": "SHOW_ALL",
        "useGroupedValuesInCharts": True,
    }
    curves = {
        "searchFilter": "tags.`bvr.stage` = 'pretrain'",
        "orderByKey": "tags.`mlflow.runName`",
        "orderByAsc": True,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "selectedColumns": [_column("attributes", "Run Name"), _column("metrics", "val/mlm_loss"),
                            _column("tags", "bvr.pretrain_seed")],
        "groupBy": _grouped("bvr.arm"),
        "runsHiddenMode": "SHOW_ALL",
        "useGroupedValuesInCharts": True,
        "compareRunSections": [{"uuid": "bvr-pretraining", "name": "Pretraining curves (mean per arm)",
                                "display": True, "isReordered": False}],
        "compareRunCharts": [_line_chart(metric, i) for i, metric in enumerate(CURVE_METRICS)],
    }
    return {SCORES_VIEW: scores, CURVES_VIEW: curves}


def write_views(client: MlflowClient, experiment_id: str) -> None:
    """Write (or refresh) bvr's saved views as tags of the experiment; idempotent."""
    for key, state in view_states().items():
        client.set_experiment_tag(experiment_id, SHARED_VIEW_PREFIX + key, json.dumps(state, sort_keys=True))


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
