"""Saved views of an ablation's experiment in the MLflow UI: the answer, without configuring a column.

MLflow's UI (3.17) lists an experiment's saved views under "Views" and opens one at ``?viewStateShareKey=KEY``,
both from the experiment tag ``mlflow.sharedViewState.KEY``: ``{"name", "createdAt", "updatedAt", "state"}``, the
``state`` (filter, sort, columns, widths, charts) as JSON. bvr writes three (:data:`bvr.tracking.ui.SAVED_VIEWS`):

- ``bvr-effects``: the answer, one effect run per comparison in the report's order (:func:`write_effects`): the
  difference with its simultaneous interval and unit as the report prints them, the verdict, the interval's level,
  then the same numbers as metrics to sort by;
- ``bvr-scores``: one summary run per arm and measure (:func:`write_summaries`): the mean over pretraining seeds,
  its 95% t interval, the number of seeds and the unit;
- ``bvr-curves``: the pretraining runs' MLM loss charts, y axes fitted to the data, every run in its arm's colour
  from the report's figures (:func:`set_run_colours`; the UI's own colour per group makes two arms near-identical).

:func:`write_report_views` writes them with the runs they show, when handed to
:func:`bvr.report.render.render_report`. A view the UI cannot read leaves its default runs table.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from mlflow.entities import Metric, RunStatus, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from bvr.report.shown import CURVE_METRICS, EffectRow, ReportViews, ScoreRow
from bvr.tracking.runs import MODEL_METRIC_SECTION
from bvr.tracking.ui import CURVES_SECTION, CURVES_VIEW, EFFECTS_VIEW, SAVED_VIEWS, SCORES_VIEW, TAG_VERDICT

SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
"""The experiment tag prefix MLflow's UI reads a saved view from."""
RUN_COLOUR_TAG = "mlflow.runColor"
"""The run tag MLflow's UI draws a run's lines and dot in (``#rrggbb``)."""
TAG_SUMMARY = "bvr.summary"
"""Tag on a summary run: ``ARM|MEASURE``, what it summarises (one run per arm and measure under a parent run)."""
TAG_UNIT = "bvr.unit"
STAGE_SUMMARY, STAGE_EFFECT = "summary", "effect"
"""The ``bvr.stage`` of the report's summary runs and of its effect runs."""
TAG_COMPARISON = "bvr.comparison"
"""Tag on an effect run: ``B|A|MEASURE``, the comparison it holds (one run per comparison under a parent run)."""
TAG_DIFFERENCE = "bvr.difference"
"""Tag on an effect run: the difference with its interval and unit, as the report prints it."""
TAG_ORDER = "bvr.order"
"""Tag on an effect run: its place in the report's order (``000``, ``001``, ...), which the effects view sorts by."""
TAG_INTERVAL = "bvr.interval"
"""Tag on an effect run: the level of its interval (``99.62% simultaneous``)."""

FOLDED_SECTIONS = ("train", "val", "run", MODEL_METRIC_SECTION, "Model metrics", "System metrics")
"""The chart sections the UI makes of every other metric, folded: 40 more charts loading at once would keep the two
that matter spinning."""
SUMMARY_COLUMNS = ("mean", "ci95_low", "ci95_high", "n")
"""The metrics of a summary run, in the order the scores view shows them."""
NAME_WIDTH = 300
"""Pixels of the scores view's run-name column: ``no-pretraining · validation MLM loss`` fits."""
EFFECT_COLUMNS = ("difference", "low", "high", "detectable")
"""The metrics of an effect run, in the order the effects view shows them."""


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
    """Each view's state, keyed by its share key, in the MLflow UI's JSON shape. ``ranges``: metric -> (low, high)
    of its chart's y axis (:func:`fitted_range`); a chart without one scales itself."""
    ranges = ranges or {}
    name = _column("attributes", "Run Name")
    scores_columns = [name, *(_column("metrics", key) for key in SUMMARY_COLUMNS), _column("tags", TAG_UNIT)]
    common = {"orderByKey": "tags.`mlflow.runName`", "orderByAsc": True, "startTime": "ALL",
              "lifecycleFilter": "Active", "runsHiddenMode": "SHOW_ALL", "groupBy": None}
    scores = {**common, "searchFilter": f"tags.`bvr.stage` = '{STAGE_SUMMARY}'", "selectedColumns": scores_columns,
              "columnOrder": scores_columns,
              "columnWidths": {name: NAME_WIDTH, **{column: 90 for column in scores_columns[1:]}}}
    texts = [_column("tags", key) for key in (TAG_DIFFERENCE, TAG_VERDICT, TAG_INTERVAL)]
    effects_columns = [name, *texts, *(_column("metrics", key) for key in EFFECT_COLUMNS)]
    effects = {**scores, "searchFilter": f"tags.`bvr.stage` = '{STAGE_EFFECT}'", "orderByKey": f"tags.`{TAG_ORDER}`",
               "selectedColumns": effects_columns, "columnOrder": effects_columns,
               "columnWidths": {name: 240, **dict(zip(texts, (185, 265, 150), strict=True)),
                                **{column: 80 for column in effects_columns[4:]}}}
    sections = [{"uuid": "bvr-pretraining", "name": CURVES_SECTION, "display": True, "isReordered": False,
                 "columns": 2, "cardHeight": 400},
                *({"uuid": f"bvr-folded-{i}", "name": section, "display": False, "isReordered": False}
                  for i, section in enumerate(FOLDED_SECTIONS))]
    curves = {**common, "searchFilter": "tags.`bvr.stage` = 'pretrain'", "selectedColumns": [name],
              "useGroupedValuesInCharts": False, "hideEmptyCharts": True, "compareRunSections": sections,
              "compareRunCharts": [_line_chart(key, i, ranges.get(key)) for i, key in enumerate(CURVE_METRICS)]}
    return {EFFECTS_VIEW: effects, SCORES_VIEW: scores, CURVES_VIEW: curves}


def write_views(client: MlflowClient, experiment_id: str,
                ranges: Mapping[str, tuple[float, float]] | None = None) -> None:
    """Write (or refresh) bvr's saved views as tags of the experiment, listed under the UI's "Views"; idempotent.
    ``ranges``: the curves' y axes (:func:`view_states`)."""
    now = int(time.time() * 1000)
    names = {view.key: view.name for view in SAVED_VIEWS}
    for key, state in view_states(ranges).items():
        envelope = {"name": names[key], "createdAt": now, "updatedAt": now,
                    "state": json.dumps(state, sort_keys=True)}
        client.set_experiment_tag(experiment_id, SHARED_VIEW_PREFIX + key, json.dumps(envelope))


def saved_view(tags: Mapping[str, str], key: str) -> dict[str, Any] | None:
    """The state of the saved view ``key`` among an experiment's tags (either form the UI reads), or None."""
    raw = tags.get(SHARED_VIEW_PREFIX + key)
    if raw is None:
        return None
    value = json.loads(raw)
    return json.loads(value["state"]) if isinstance(value.get("state"), str) else value


def _nested_runs(client: MlflowClient, experiment_id: str, parent_run_id: str, stage: str, key_tag: str,
                 rows: list[tuple[str, str, dict[str, float], dict[str, str]]]) -> list[str]:
    """Write ``rows`` (key, run name, metrics, tags) as finished runs of ``stage`` under ``parent_run_id``, one per key
    (tag ``key_tag``), updating a key's run when a report is rendered again; returns the run ids."""
    query = f"tags.`bvr.stage` = '{stage}' and tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_run_id}'"
    existing = {run.data.tags.get(key_tag): run.info.run_id
                for run in client.search_runs([experiment_id], query, max_results=10_000)}
    now = int(time.time() * 1000)
    ids = []
    for key, name, metrics, extra in rows:
        tags = {"bvr.stage": stage, key_tag: key, **extra, MLFLOW_PARENT_RUN_ID: parent_run_id}
        run_id = existing.get(key) or client.create_run(experiment_id, run_name=name, tags=tags).info.run_id
        client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()],
                         tags=[RunTag(k, v) for k, v in tags.items()])
        client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED))
        ids.append(run_id)
    return ids


def write_summaries(client: MlflowClient, experiment_id: str, parent_run_id: str, rows: list[ScoreRow]) -> list[str]:
    """Write the scores view's rows, one run per arm and measure (:func:`_nested_runs`); returns the run ids."""
    return _nested_runs(client, experiment_id, parent_run_id, STAGE_SUMMARY, TAG_SUMMARY,
                        [(f"{row.arm}|{row.measure}", row.name, row.metrics(), {"bvr.arm": row.arm, TAG_UNIT: row.unit})
                         for row in rows])


def write_effects(client: MlflowClient, experiment_id: str, parent_run_id: str, rows: list[EffectRow]) -> list[str]:
    """Write the effects view's rows, one run per comparison in the order given (:func:`_nested_runs`)."""
    return _nested_runs(client, experiment_id, parent_run_id, STAGE_EFFECT, TAG_COMPARISON,
                        [(f"{row.arm_b}|{row.arm_a}|{row.measure}", row.name, row.metrics(),
                          {TAG_ORDER: f"{i:03d}", TAG_DIFFERENCE: row.text, TAG_VERDICT: row.verdict,
                           TAG_INTERVAL: f"{row.level} simultaneous", TAG_UNIT: row.unit})
                         for i, row in enumerate(rows)])


def set_run_colours(client: MlflowClient, colours: Mapping[str, str]) -> None:
    """Draw each run (id -> ``#rrggbb``) in its colour in the UI's charts and runs list."""
    for run_id, colour in colours.items():
        client.set_tag(run_id, RUN_COLOUR_TAG, colour)


def write_report_views(client: MlflowClient, experiment_id: str, parent_run_id: str | None,
                       views: ReportViews) -> None:
    """Write a report's views into its experiment: the effects and scores rows as runs under the ablation's parent
    run (if any), runs in their arms' colours, and the saved views with the curves' y axes fitted to the values."""
    runs = dict(views.pretrain_runs)
    if parent_run_id is not None:
        write_effects(client, experiment_id, parent_run_id, views.effects)
        ids = write_summaries(client, experiment_id, parent_run_id, views.scores)
        runs |= dict(zip(ids, (row.arm for row in views.scores), strict=True))
    set_run_colours(client, {run: views.colours[arm] for run, arm in runs.items() if arm in views.colours})
    ranges = {key: fitted_range(views.curves.get(key, ())) for key in CURVE_METRICS}
    write_views(client, experiment_id, {key: span for key, span in ranges.items() if span is not None})
