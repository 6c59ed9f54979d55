"""Addresses in the MLflow UI, each in model-training mode (:data:`MODEL_TRAINING`): where it is (:func:`ui_base`),
an experiment's runs or one run (:func:`ui_address`), and bvr's saved views (:data:`SAVED_VIEWS`, :func:`view_url`;
:mod:`bvr.ops.views` writes them)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlencode

from bvr.errors import BvrError

MODEL_TRAINING = {"workflowType": "machine_learning"}
"""The query that opens MLflow's UI (3.x) in its model-training mode: else a fresh browser profile holds the GenAI
mode, and an experiment's address lands on an empty traces overview."""
DEFAULT_UI = "http://127.0.0.1:5000"
"""Where ``mlflow ui`` serves by default: the address bvr prints when it knows of no other."""
UI_URL_ENV = "BVR_MLFLOW_UI"
"""Environment variable naming the address of the MLflow UI the report links to (as ``--ui-url``)."""

TAG_VERDICT = "bvr.verdict"
"""Tag on an effect run: the verdict in words, with the Holm-adjusted p-value."""

EFFECTS_VIEW = "bvr-effects"
SCORES_VIEW = "bvr-scores"
CURVES_VIEW = "bvr-curves"
CURVES_SECTION = "Pretraining curves, one colour per arm"
"""The title of :data:`CURVES_VIEW`'s chart section (the browser check looks for it)."""


@dataclass(frozen=True)
class SavedView:
    """One of bvr's saved views, with the words each place that names it uses."""

    key: str  # its share key (viewStateShareKey, the experiment tag's suffix)
    name: str  # how the UI's "Views" list names it
    link: str  # the report's link to it (effects between arms)
    line: str  # the terminal's name for it (MLflow, LINE: ADDRESS)
    page: str  # the browser check's name for its page (PAGE.png)
    marker: str  # what the UI shows only with the view applied: a column of it, or its chart section


SAVED_VIEWS = (
    SavedView(EFFECTS_VIEW, "bvr: effects between arms", "effects between arms", "effects with intervals and verdicts",
              "effects", TAG_VERDICT),
    SavedView(SCORES_VIEW, "bvr: scores per arm", "scores by arm", "scores by arm", "scores-by-arm", "mean"),
    SavedView(CURVES_VIEW, "bvr: pretraining curves per arm", "pretraining curves by arm", "pretraining curves by arm",
              "curves-by-arm", CURVES_SECTION),
)
"""bvr's saved views, in the order the report, the terminal and the browser check give them: the answer first."""


def ui_base(tracking_uri: str, ui_url: str | None = None) -> str | None:
    """The address of the MLflow UI that shows the runs: ``ui_url`` (``--ui-url``), else :data:`UI_URL_ENV`, else the
    tracking URI when it is a server; None for a local store, whose ``mlflow ui`` runs on a host and port bvr cannot
    know. An address not http(s) is refused.

    >>> ui_base("sqlite:///mlflow.db", "http://127.0.0.1:8080/"), ui_base("https://mlflow.lab:443", None)
    ('http://127.0.0.1:8080', 'https://mlflow.lab:443')
    """
    for value, where in ((ui_url, "--ui-url"), (os.environ.get(UI_URL_ENV) or None, UI_URL_ENV)):
        if value is None:
            continue
        if not value.startswith(("http://", "https://")):
            raise BvrError(f"{value!r} is not the address of an MLflow UI", where=where,
                           hint="give the address `mlflow ui` prints, e.g. http://127.0.0.1:5000")
        return value.rstrip("/")
    return tracking_uri.rstrip("/") if tracking_uri.startswith(("http://", "https://")) else None


def ui_address(base: str, experiment_id: str, run_id: str | None = None, **query: str) -> str:
    """The address of an experiment's runs, or of one run, in the MLflow UI at ``base``, in model-training mode.

    >>> ui_address("http://127.0.0.1:5000", "3", "ab12")
    'http://127.0.0.1:5000/#/experiments/3/runs/ab12?workflowType=machine_learning'
    """
    path = f"/#/experiments/{experiment_id}/runs" + (f"/{run_id}" if run_id else "")
    return f"{base.rstrip('/')}{path}?{urlencode({**query, **MODEL_TRAINING})}"


def view_url(base: str, experiment_id: str, key: str) -> str:
    """The address of a saved view in the MLflow UI at ``base`` (:func:`ui_base`).

    >>> view_url("http://127.0.0.1:5000", "3", CURVES_VIEW)
    'http://127.0.0.1:5000/#/experiments/3/runs?viewStateShareKey=bvr-curves&compareRunsMode=CHART&workflowType=machine_learning'
    """
    query = {"viewStateShareKey": key}
    if key == CURVES_VIEW:
        query["compareRunsMode"] = "CHART"
    return ui_address(base, experiment_id, **query)
