"""Where to read an ablation in the MLflow UI, printed: the saved views' addresses (:mod:`bvr.ops.ui`)."""

from __future__ import annotations

from pathlib import Path

from bvr.cli.options import console
from bvr.ops.ui import newest_parent, ui_store, view_lines


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
        console.plain(line)
    if base is None:
        console.plain(f"  (start the UI first, in this folder: bvr ui {experiment}; or mlflow ui --backend-store-uri "
                      f"{ui_store(uri)})")
