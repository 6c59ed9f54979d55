"""``bvr status``: an ablation's progress per stage from its manifest, and its runs in progress from MLflow.

The store is the report fixture's finished masking ablation (``tests/report_fixtures.py``); tests mark some of its
units missing or failed, and open a RUNNING run owned by this (live) process.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bvr import cli
from bvr.ablation.status import progress, progress_rows, running_now
from bvr.tracking import TAG_HOST, TAG_PID
from tests.report_fixtures import BLIMP_DATA, entry, filled, variant

runner = CliRunner()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    with filled(tmp_path_factory.mktemp("status-store")) as store:
        yield store


def _partial(store):
    manifest = variant(store.manifest)
    entry(manifest, "pretrain", label="dynamic-p2").update(status="failed", error="loss became NaN at step 7")
    for seed in (0, 1):
        entry(manifest, "finetune", label="static-p1", task="sst2", seed=seed).update(status="missing")
    entry(manifest, "evaluations", label="no-pretraining-p0", kind="blimp").update(status="missing")
    return manifest


def test_progress_counts_every_stage_in_order(store) -> None:
    full = progress(store.manifest)
    assert [s.stage for s in full] == ["pretrain", "blimp", "probe/sst2", "finetune/sst2", "finetune/squad_v2"]
    assert [(s.planned, s.done, s.failed, s.left) for s in full] == [
        (6, 6, 0, 0), (9, 9, 0, 0), (9, 9, 0, 0), (18, 18, 0, 0), (18, 18, 0, 0)]
    rows = {row[0]: row[1:] for row in progress_rows(_partial(store))}
    assert rows["pretrain"] == ["5 / 6", "1", "0", "dynamic-p2"]
    assert rows["blimp"] == ["8 / 9", "0", "1", "no-pretraining-p0"]
    assert rows["finetune/sst2"] == ["16 / 18", "0", "2", "static-p1"]  # one model, two seeds left
    assert rows["finetune/squad_v2"] == ["18 / 18", "0", "0", "—"]


def test_running_now_lists_live_runs_of_this_host_only(store) -> None:
    client = store.client
    live = client.create_run(store.experiment_id, run_name="static-p0/finetune/sst2",
                             tags={TAG_HOST: socket.gethostname(), TAG_PID: str(os.getpid())})
    other = client.create_run(store.experiment_id, run_name="other host",
                              tags={TAG_HOST: "elsewhere", TAG_PID: str(os.getpid())})
    try:
        found = running_now(store.manifest, store.workdir)
        assert [(r.name, r.run_id, r.pid) for r in found] == [
            ("static-p0/finetune/sst2", live.info.run_id, os.getpid())]
    finally:
        for run in (live, other):
            client.set_terminated(run.info.run_id, "FINISHED")
    assert running_now(store.manifest, store.workdir) == []


def test_bvr_status_prints_the_table_failures_and_the_next_command(store, tmp_path: Path, monkeypatch) -> None:
    manifest = _partial(store)
    folder = tmp_path / "outputs" / "ablations" / "masking-tiny-0123456789ab"
    folder.mkdir(parents=True)
    manifest.preset = "tiny"
    manifest.save(folder / "manifest.json")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store.workdir / 'mlflow.db'}")
    result = runner.invoke(cli.app, ["status", "masking", "--output-dir", str(tmp_path / "outputs")],
                           terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "finetune/sst2" in result.output and "16 / 18" in result.output
    assert "failed: pretrain dynamic-p2: loss became NaN at step 7" in result.output
    # The experiment file as the fixture's manifest records it, every option of the plan hash (its --set and data
    # folder), and the output folder given.
    assert result.output.rstrip().endswith(
        f"next: bvr ablate experiments/masking.yaml --preset tiny --set training.max_steps=300 --data-dir {BLIMP_DATA} "
        f"--output-dir {tmp_path / 'outputs'} (finished units are reused)")
    missing = runner.invoke(cli.app, ["status", "nothing", "--output-dir", str(tmp_path / "outputs")])
    assert missing.exit_code != 0 and "no runs of ablation 'nothing'" in str(missing.exception)
