"""Headless Chromium, driven with no browser-driver library, and ``mlflow ui`` served for it to open.

Each Chromium run starts in a fresh profile (a person's first visit: no stored UI mode, view or colour), removed
after, with a virtual time budget (``--virtual-time-budget``) that lets the MLflow UI load its runs before the
screenshot. Chromium is found on ``PATH`` or at ``BVR_CHROMIUM`` (:func:`find_chromium`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from bvr.errors import BvrError

CHROMIUM_ENV = "BVR_CHROMIUM"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
UI_WINDOW = (1600, 1000)
UI_SETTLE_MS = 20_000
SERVER_START_SECONDS = 180


def find_chromium() -> str | None:
    """The Chromium executable: ``BVR_CHROMIUM``, else the first of :data:`CHROMIUM_NAMES` on ``PATH``."""
    env = os.environ.get(CHROMIUM_ENV)
    if env:
        return env if Path(env).is_file() else shutil.which(env)
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


def run_chromium(args: list[str], *, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium once in a fresh profile, removed after; its own logging (D-Bus, GPU) is discarded."""
    chromium = find_chromium()
    if chromium is None:
        raise BvrError("no Chromium found for the browser check", where=CHROMIUM_ENV,
                       hint="install it (Debian: apt-get install chromium) or set BVR_CHROMIUM to its path")
    with tempfile.TemporaryDirectory(prefix="bvr-chromium-") as profile:
        command = [chromium, "--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                   "--disable-extensions", f"--user-data-dir={profile}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--no-sandbox")  # Chromium refuses to start its sandbox as root
        try:
            return subprocess.run(command + args, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as err:
            raise BvrError(f"Chromium did not finish within {timeout:.0f} s", where=args[-1],
                           hint="run again; on a loaded machine pass a longer budget") from err


def _page_args(window: tuple[int, int], settle_ms: int) -> list[str]:
    return [f"--window-size={window[0]},{window[1]}", f"--virtual-time-budget={settle_ms}"]


def capture(url: str, out: Path, *, window: tuple[int, int] = UI_WINDOW, settle_ms: int = UI_SETTLE_MS) -> str:
    """Save a PNG of ``url`` to ``out`` as Chromium renders it in a ``window`` (width, height) after ``settle_ms`` of
    page time, and return the DOM of the same render: two renders of the MLflow UI can differ in what has loaded."""
    out.parent.mkdir(parents=True, exist_ok=True)
    done = run_chromium([*_page_args(window, settle_ms), f"--screenshot={out}", "--dump-dom", url])
    if not out.is_file() or out.stat().st_size == 0:
        raise BvrError("Chromium wrote no screenshot", where=url, hint="check that the page loads in a browser")
    return done.stdout


def dump_dom(url: str, *, window: tuple[int, int] = UI_WINDOW, settle_ms: int = UI_SETTLE_MS) -> str:
    """The page's DOM after its scripts ran, as Chromium serialises it."""
    return run_chromium([*_page_args(window, settle_ms), "--dump-dom", url]).stdout


def http_get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (loopback only)
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""


@contextlib.contextmanager
def mlflow_ui(tracking_uri: str) -> Iterator[str]:
    """Serve the store ``tracking_uri`` with ``mlflow ui`` on a free port of 127.0.0.1; yields its address; stops it
    after. A server that does not answer within :data:`SERVER_START_SECONDS` is one line with its log's tail."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    log_fd, log_name = tempfile.mkstemp(prefix="bvr-mlflow-ui-", suffix=".log")
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri, "--host", "127.0.0.1",
               "--port", str(port), "--workers", "1"]
    process = subprocess.Popen(command, stdout=log_fd, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + SERVER_START_SECONDS
        while http_get(f"{base}/health", timeout=2.0)[0] != 200:
            if process.poll() is not None or time.monotonic() > deadline:
                tail = Path(log_name).read_text(errors="replace")[-400:].strip().replace("\n", " / ")
                raise BvrError(f"`mlflow ui` did not start on port {port}: {tail}", where=tracking_uri,
                               hint="check that the store opens with `mlflow ui --backend-store-uri` by hand")
            time.sleep(1.0)
        yield base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 15)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=20)
        os.close(log_fd)
        Path(log_name).unlink(missing_ok=True)
