"""Where to read an ablation in the MLflow UI: the saved views' addresses, and the command that serves them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bvr.cli.options import console


def print_views(experiment: str, ui_url: str | None, parent_run_id: str | None = None) -> None:
    """Where to read the comparison in the MLflow UI: the saved views' addresses, the effects first, then the
    ablation's parent run (``parent_run_id`` or else its newest), and how to start the UI when none is running at a
    known address."""
    from bvr.tracking import DEFAULT_UI, store_client, tracking_uri, ui_base

    uri = tracking_uri(Path.cwd())
    client = store_client(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return
    base = ui_base(uri, ui_url)
    for line in view_lines(base or DEFAULT_UI, found, parent_run_id or newest_parent(client, found)):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if base is None:
        console.print(f"  (start the UI first, in this folder: bvr ui {experiment}; or mlflow ui --backend-store-uri "
                      f"{ui_store(uri)})", highlight=False, markup=False, soft_wrap=True)


def view_lines(base: str, experiment: Any, parent_run_id: str | None = None) -> list[str]:
    """The addresses of ``experiment`` (an MLflow experiment) in the UI at ``base``: the saved views
    (:data:`bvr.tracking.ui.SAVED_VIEWS`; the effects first, a row per difference, its interval and verdict), then
    the ablation's parent run ``parent_run_id`` (the headline in brief, the report attached)."""
    from bvr.tracking import SAVED_VIEWS, ui_address, view_url

    lines = [f"MLflow, {view.line}: {view_url(base, experiment.experiment_id, view.key)}" for view in SAVED_VIEWS]
    if parent_run_id:
        lines.append(f"MLflow, the ablation's run (headline, report): "
                     f"{ui_address(base, experiment.experiment_id, parent_run_id)}")
    return lines


def newest_parent(client: Any, experiment: Any) -> str | None:
    """The id of the newest parent run of an ablation in ``experiment`` (tag ``bvr.stage = ablation``), or None."""
    runs = client.search_runs([experiment.experiment_id], "tags.`bvr.stage` = 'ablation'", max_results=1,
                              order_by=["attributes.start_time DESC"])
    return runs[0].info.run_id if runs else None


def ui_store(uri: str, cwd: Path | None = None) -> str:
    """The store as `mlflow ui` takes it, run from ``cwd``: the default store relative to it (the command then works
    in a moved or copied clone), any other as it is.

    >>> ui_store("sqlite:////home/me/bvr/mlflow.db", Path("/home/me/bvr")), ui_store("http://h:5000", Path("/x"))
    ('sqlite:///mlflow.db', 'http://h:5000')
    """
    from bvr.tracking.store import DEFAULT_DB

    folder = cwd or Path.cwd()
    return f"sqlite:///{DEFAULT_DB}" if uri == f"sqlite:///{(folder / DEFAULT_DB).resolve()}" else uri
