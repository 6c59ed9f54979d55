"""`bvr ui`: the MLflow UI started on the store bvr logs to, answering at the printed address of the ablation's
scores view, and gone after Ctrl-C; no store, an experiment the store lacks and a port in use are one line each."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from bvr.ops.views import write_views
from bvr.tracking import (
    EFFECTS_VIEW,
    SCORES_VIEW,
    ensure_experiment,
    store_client,
    tracking_uri,
    ui_address,
    view_url,
)
from tests.reliability.test_resources import run_main
from tests.test_ablate import bvr_env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _first_line_with(process: subprocess.Popen, text: str, limit: float) -> list[str]:
    """The lines ``process`` printed up to the first holding ``text`` (all of them when it ended or ``limit`` s)."""
    lines: list[str] = []

    def read() -> None:
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if text in line:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(limit)
    return lines


@pytest.mark.slow
def test_the_ui_answers_at_the_printed_address_of_the_ablations_scores_and_stops_on_ctrl_c(tmp_path):
    experiment_id = ensure_experiment("tiny-masking", tmp_path)
    client = store_client(tracking_uri(tmp_path))
    write_views(client, experiment_id)
    parent = client.create_run(experiment_id, tags={"bvr.stage": "ablation"}).info.run_id  # the ablation's run
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    # Ctrl-C as a terminal delivers it (a pytest-xdist worker ignores SIGINT, and its children would inherit that).
    ui = subprocess.Popen([sys.executable, "-m", "bvr.cli", "ui", "tiny-masking", "--port", str(port)], cwd=tmp_path,
                          env=bvr_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        lines = _first_line_with(ui, "(the UI runs on", 180)
        effects = view_url(base, experiment_id, EFFECTS_VIEW)
        assert lines[:5] == [f"MLflow, effects with intervals and verdicts: {effects}",
                             f"MLflow, scores by arm: {view_url(base, experiment_id, SCORES_VIEW)}",
                             lines[2], f"MLflow, the ablation's run (headline, report): "
                             f"{ui_address(base, experiment_id, parent)}",
                             "  (the UI runs on sqlite:///mlflow.db until Ctrl-C)"], lines
        assert lines[2].startswith("MLflow, pretraining curves by arm: ")
        # The UI serves this folder's store: the experiment and its saved views are there.
        with urllib.request.urlopen(f"{base}/ajax-api/2.0/mlflow/experiments/get-by-name?experiment_name="
                                    "tiny-masking", timeout=30) as answer:
            found = json.load(answer)["experiment"]
        assert found["experiment_id"] == experiment_id
        assert any(tag["key"].startswith("mlflow.sharedViewState.") for tag in found["tags"])
        ui.send_signal(signal.SIGINT)
        assert ui.wait(60) == 0, ui.stderr.read()
    finally:
        if ui.poll() is None:
            ui.kill()
    with socket.socket() as probe:  # the UI it started is gone with it
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))


def test_no_store_an_experiment_the_store_lacks_and_a_port_in_use_are_one_line_each(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    code, err = run_main(monkeypatch, capsys, "ui", "masking")  # a folder bvr never ran in: no store made there
    assert code == 2 and err == (f"error: bvr ui: no MLflow store here ({tmp_path / 'mlflow.db'} does not exist). run "
                                 "it in the folder where bvr ablate ran, or set MLFLOW_TRACKING_URI to the store\n")
    assert not (tmp_path / "mlflow.db").exists()
    ensure_experiment("tiny-masking", tmp_path)
    code, err = run_main(monkeypatch, capsys, "ui", "masking")
    assert code == 2 and err == ("error: NAME: no MLflow experiment 'masking' in this store. the store holds: "
                                 "tiny-masking\n"), err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = run_main(monkeypatch, capsys, "ui", "tiny-masking", "--port", str(port))
    assert code == 2 and err.startswith(f"error: --port: cannot listen on 127.0.0.1:{port} (") and err.endswith(
        "). another UI may be running there: open it, or pass another --port\n"), err
    assert not Path("mlruns").exists()
