"""Cached results are checked before they are reused (issue 35, item 7): a fine-tuning seed's result.json edited by
hand, copied from another seed's folder, or written before results were sealed is trained again, said in one line,
and the score reported is the one measured, never the edited one."""

from __future__ import annotations

import json

from bvr.sealed import CHECKSUM_KEY
from tests.reliability.conftest import copy_task

FINETUNE = ["--set", "finetune.epochs=1", "--set", "finetune.batch_size=2"]


def test_an_edited_or_copied_fine_tuning_result_is_trained_again_not_reported(bvr, checkpoint, tmp_path,
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
    lines = [line for line in err.splitlines() if "result.json" in line]
    assert lines == [f"{path0}: does not match its checksum (edited since it was written, or copied from another "
                     "cache folder); this seed is trained again",
                     f"{path1}: does not match its checksum (edited since it was written, or copied from another "
                     "cache folder); this seed is trained again"], err
    # Both trained again to the scores first measured (not 99, not seed 0's in seed 1's place), and sealed anew.
    for path, sealed in ((path0, sealed0), (path1, sealed1)):
        again = json.loads(path.read_text())["seed"]
        assert again["scores"] == sealed["seed"]["scores"] and again["run_id"] != sealed["seed"]["run_id"]
    assert "99.0" not in out and "reused" not in out
