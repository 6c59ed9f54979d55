"""``bvr ui [NAME]``: start the MLflow UI on the store bvr logs to (``mlflow.db`` here unless ``MLFLOW_TRACKING_URI``
names another), wait until it answers, print the ablation's saved views at its address (:func:`print_views`, which
`bvr ablate` and `bvr report` call too) and keep it running until Ctrl-C; a tracking server needs no starting.
"""

from __future__ import annotations

import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from bvr.cli.options import console, err_console
from bvr.errors import BvrError
from bvr.ops import ui as served
from bvr.ops.ui import newest_parent, ui_store, view_lines
from bvr.signals import Terminated


def ui_cmd(
    name: Annotated[str | None, typer.Argument(help="The ablation whose runs to show (its MLflow experiment, as "
                                                    "bvr ablate names it). Default: the list of experiments.")] = None,
    port: Annotated[int, typer.Option("--port", help="Port the UI listens on.")] = 5000,
    host: Annotated[str, typer.Option("--host", help="Address the UI listens on (127.0.0.1: this machine only).")]
    = "127.0.0.1",
    open_browser: Annotated[bool, typer.Option("--open/--no-open", help="Open the first address in a browser.")]
    = False,
) -> None:
    """Start the MLflow UI on the store bvr logs to and print where an ablation's runs are: its effects with their
    intervals and verdicts, scores by arm and pretraining curves by arm, in model-training mode. Runs until
    Ctrl-C."""
    from bvr.tracking import store_client, tracking_uri

    uri = tracking_uri(Path.cwd())
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():  # a folder: refused below
        raise BvrError(f"no MLflow store here ({uri.removeprefix('sqlite:///')} does not exist)", where="bvr ui",
                       hint="run it in the folder where bvr ablate ran, or set MLFLOW_TRACKING_URI to the store")
    client = store_client(uri)
    experiment = client.get_experiment_by_name(name) if name else None
    if name and experiment is None:
        names = sorted(e.name for e in client.search_experiments() if e.name != "Default")
        raise BvrError(f"no MLflow experiment '{name}' in this store", where="NAME",
                       hint=f"the store holds: {', '.join(names)}" if names else
                       "run `bvr ablate NAME` first, in this folder")
    server = uri.startswith(("http://", "https://"))  # a tracking server is its own UI
    base = uri.rstrip("/") if server else f"http://{host}:{port}"
    lines = view_lines(base, experiment, newest_parent(client, experiment)) if experiment else [f"MLflow UI: {base}"]
    if server:
        _show(lines, open_browser)
        return
    served.check_port(host, port)
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", ui_store(uri), "--host", host,
               "--port", str(port)]
    with tempfile.TemporaryFile(mode="w+") as log, served.running(command, log) as ui:  # its log: read if it fails
        served.wait_until_up(ui, base, log, partial(err_console.plain, wrap=True))
        _show([*lines, f"  (the UI runs on {ui_store(uri)} until Ctrl-C)"], open_browser)
        try:  # until the UI exits or Ctrl-C, which ends bvr ui as asked (status 0)
            ui.wait()
        except KeyboardInterrupt as stop:
            if isinstance(stop, Terminated):  # SIGTERM: the stop it is (status 143)
                raise


def _show(lines: list[str], open_browser: bool) -> None:
    """Print ``lines``; with ``open_browser``, open the address of the first in a browser."""
    import webbrowser

    for line in lines:
        console.plain(line)
    if open_browser and not webbrowser.open(url := lines[0].split(": ", 1)[1]):
        err_console.plain(f"no browser to open here; open {url}")


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
