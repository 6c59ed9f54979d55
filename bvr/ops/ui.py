"""The MLflow UI for a person (``bvr ui``, ``bvr ablate``): the saved views' addresses (:func:`view_lines`), the store
as ``mlflow ui`` takes it (:func:`ui_store`), and ``mlflow ui`` started and waited for (:func:`wait_until_up`)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from bvr.errors import BvrError


def view_lines(base: str, experiment: Any, parent_run_id: str | None = None) -> list[str]:
    """The addresses of ``experiment`` (an MLflow experiment) in the UI at ``base``: the saved views
    (:data:`bvr.tracking.ui.SAVED_VIEWS`, the effects first), then the ablation's parent run ``parent_run_id``."""
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


UI_START_LIMIT = 120.0
"""Seconds the UI may take to answer before ``bvr ui`` gives up (it answers in 5 to 15 s on 2 cores)."""
UI_NOTICE = 3.0
"""Seconds after which the wait is said on stderr."""


@contextlib.contextmanager
def running(command: list[str], log: IO[str]) -> Iterator[subprocess.Popen]:
    """``command`` started with its output in ``log``; stopped (terminated, then killed after 10 s) on the way out,
    Ctrl-C included."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, text=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


def check_port(host: str, port: int) -> None:
    """Refuse a port the UI cannot be reached at: outside 1 to 65535 (0 would have the system pick one that bvr
    cannot know, and wait for an answer at port 0), or one something else listens on."""
    if not 1 <= port <= 65535:
        raise BvrError(f"{port} is not a port the UI can be reached at", where="--port",
                       hint="pass one from 1 to 65535 (default 5000)")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            raise BvrError(f"cannot listen on {host}:{port} ({err.strerror})", where="--port",
                           hint="another UI may be running there: open it, or pass another --port") from None


def wait_until_up(ui: subprocess.Popen, base: str, log: IO[str], say: Callable[[str], None]) -> None:
    """Until the UI answers ``/health``; an exit or :data:`UI_START_LIMIT` is an error with the UI's own words; a wait
    past :data:`UI_NOTICE` is said once through ``say``."""
    start, said = time.monotonic(), False
    while True:
        if ui.poll() is not None:
            log.seek(0)
            tail = log.read().strip().splitlines()[-3:]
            raise BvrError(f"mlflow ui exited with status {ui.returncode}: {' / '.join(tail) or 'no output'}",
                           where="bvr ui")
        with contextlib.suppress(urllib.error.URLError, OSError):
            urllib.request.urlopen(f"{base}/health", timeout=2).close()
            return
        waited = time.monotonic() - start
        if waited > UI_START_LIMIT:
            raise BvrError(f"the MLflow UI did not answer at {base} within {UI_START_LIMIT:.0f} s", where="bvr ui")
        if waited > UI_NOTICE and not said:
            say(f"starting the MLflow UI at {base} ...")
            said = True
        time.sleep(0.25)
