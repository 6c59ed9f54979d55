"""Cached results are checked before they are reused (issue 35, item 7): a fine-tuning seed's result.json edited by
hand, copied from another seed's folder, or written before results were sealed is read back from the MLflow run that
logged it (trained again where that run is gone), said in one line, and the score reported is the one measured,
never the edited one."""

from __future__ import annotations

import json

from mlflow import MlflowClient

from bvr.sealed import CHECKSUM_KEY
from tests.reliability.conftest import copy_task

FINETUNE = ["--set", "finetune.epochs=1", "--set", "finetune.batch_size=2"]


def test_an_edited_or_copied_fine_tuning_result_is_read_back_from_its_run_not_reported(bvr, checkpoint, tmp_path,
                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    data_dir = copy_task(tmp_path / "data", "glue/RTE")
    args = ["finetune", "--task", "rte", "--checkpoint", checkpoint, "--seeds", "2", "--data-dir", data_dir,
            "--output-dir", tmp_path / "out", *FINETUNE]
    code, _, err = bvr(*args)
    assert code == 0, err
    folders = sorted((tmp_path / "out" / "finetune").glob("rte-seed*"))
    assert [f.name.split("-")[1] for f in folders] == ["seed0", "seed1"]
    path0, path1 = folders[0] / "result.json", folders[1] / "result.json"
    sealed0, sealed1 = json.loads(path0.read_text()), json.loads(path1.read_text())
    assert len(sealed0[CHECKSUM_KEY]) == 64

    edited = {**sealed0, "seed": {**sealed0["seed"], "scores": {k: 99.0 for k in sealed0["seed"]["scores"]}}}
    path0.write_text(json.dumps(edited))
    path1.write_text(json.dumps(sealed0))  # seed 0's own, sealed, result put in seed 1's folder
    code, out, err = bvr(*args)
    assert code == 0, err
    lines = [line for line in err.splitlines() if "checksum" in line]
    assert lines == [f"{path}: does not match its checksum (edited since it was written, or copied from "
                     f"another cache folder); read back from its MLflow run {sealed['seed']['run_id']}, not trained "
                     "again" for path, sealed in ((path0, sealed0), (path1, sealed1))], err
    # Both read back as their runs logged them (not 99, not seed 0's in seed 1's place); none trained or logged again.
    for path, sealed in ((path0, sealed0), (path1, sealed1)):
        assert json.loads(path.read_text()) == sealed
    assert "99.0" not in out
    # With its run deleted from the store, an edited result has nothing to be read back from: trained again.
    MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").delete_run(sealed0["seed"]["run_id"])
    path0.write_text(json.dumps(edited))
    code, out, err = bvr(*args)
    assert code == 0, err
    assert [line for line in err.splitlines() if "checksum" in line] == [
        f"{path0}: does not match its checksum (edited since it was written, or copied from another cache folder); "
        "this seed is trained again"], err
    again = json.loads(path0.read_text())["seed"]
    assert again["scores"] == sealed0["seed"]["scores"] and again["run_id"] != sealed0["seed"]["run_id"]
