"""A tracking server that stops answering mid-run: said in one line once MLflow's client has given up.

MLflow's client retries each request 7 times with back-off (about four minutes, in silence). :mod:`bvr.tracking`
bounds it, where ``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, ``MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR`` and
``MLFLOW_HTTP_REQUEST_TIMEOUT`` are unset, to 4 retries, 14 s of back-off and 60 s for one answer; the CLI then turns
the failed request into the line of :func:`server_failure`.
"""

from __future__ import annotations

import os
from pathlib import Path

from mlflow.exceptions import MlflowException

from bvr.errors import BvrError
from bvr.tracking.locked import causes
from bvr.tracking.store import tracking_uri

_UNANSWERED = (("Connection refused", "connection refused"),
               ("RemoteDisconnected", "connection closed without an answer"),
               ("timed out", "no answer in time"), ("Connection aborted", "connection aborted"),
               ("Max retries exceeded", "no answer"))
"""What a failed request's message holds, most telling first, and how bvr says it."""


def server_failure(err: BaseException, workdir: Path | None = None) -> BvrError | None:
    """The one line for a request to the tracking server that failed after its retries (the server stopped, hangs
    or drops the connection), or None for any other error (its causes and contexts are searched too)."""
    uri = tracking_uri(workdir)
    if not uri.startswith(("http://", "https://")):
        return None
    for cause in causes(err):
        text = str(cause)
        reason = next((said for mark, said in _UNANSWERED if mark in text), None)
        if isinstance(cause, MlflowException) and "API request to" in text and reason:
            retries = os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "7")
            return BvrError(f"the MLflow tracking server {uri} stopped answering ({reason}; "
                            f"{retries} {'retry' if retries == '1' else 'retries'})",
                            where="MLFLOW_TRACKING_URI", hint="start it again, then run the same command: finished "
                            "stages and checkpoints are reused (bvr pretrain: with --resume)")
    return None
