"""The MLflow store: what a run logs reads back as its saved results say (issue 28)."""

from __future__ import annotations

import json

import numpy as np
from mlflow import MlflowClient

from bvr.tracking import tracking_uri
from tests.reliability.conftest import copy_task

FINETUNE = ["--set", "finetune.epochs=1", "--set", "finetune.batch_size=2"]


def test_fine_tuning_scores_read_back_from_the_store_as_result_json_has_them(bvr, checkpoint, tmp_path, monkeypatch):
    """SQuAD's F1 is a float64 (66.66666666666666 here); the store had its float32 (66.66666412353516)."""
    monkeypatch.chdir(tmp_path)
    data_dir = copy_task(tmp_path / "data", "squad")
    code, _, err = bvr("finetune", "--task", "squad", "--checkpoint", checkpoint, "--seeds", "2", "--data-dir",
                       data_dir, "--output-dir", tmp_path / "out", *FINETUNE)
    assert code == 0, err
    client = MlflowClient(tracking_uri(tmp_path))
    saved, logged = {}, {}
    for result in (tmp_path / "out" / "finetune").glob("squad-seed*/result.json"):
        seed = json.loads(result.read_text())["seed"]
        metrics = client.get_run(seed["run_id"]).data.metrics
        for prefix, scores in (("", seed["scores"]), ("best/", seed["best_scores"])):
            saved |= {(seed["seed"], prefix + key): value for key, value in scores.items()}
            logged |= {(seed["seed"], prefix + key): metrics.get(prefix + key) for key in scores}
    assert len(saved) == 8 and logged == saved
    assert any(float(np.float32(value)) != value for value in saved.values())  # a float32 would have shown
