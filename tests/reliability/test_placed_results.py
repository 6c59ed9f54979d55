"""Cached results keyed by what produced them and where they are logged: two ablations sharing an output folder each
get the shared control's runs in their own experiment; a deleted or damaged cache is read back from its runs instead
of logging them twice; a cached seed whose run was deleted is trained again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from mlflow import MlflowClient

from bvr.ablation.manifest import Manifest
from bvr.tracking.placed import TAG_COPIED_FROM, TAG_RESULT
from tests.test_ablate import EXPERIMENT, FIXTURES
from tests.test_prepare import write_wiki_corpus

pytestmark = pytest.mark.usefixtures("one_thread")

SHARED = (EXPERIMENT.replace("seeds: 2, optional", "seeds: 1, optional")
          .replace("probes: {tasks: [sst2], seeds: 2, max_train_examples: null}", "probes: {tasks: []}"))
"""The fixture ablation with one fine-tuning seed and no probe: its control (shared by any ablation of this base)
is BLiMP-scored and fine-tuned once."""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = write_wiki_corpus(tmp_path_factory.mktemp("data"), documents=60)
    shutil.copytree(FIXTURES / "glue", root / "glue")
    shutil.copytree(FIXTURES / "blimp", root / "blimp")
    return root


def _ablate(bvr, name: str, data_dir: Path) -> str:
    code, out, err = bvr("ablate", f"{name}.yaml", "--data-dir", data_dir, "--no-progress")
    assert code == 0, out + err
    return err


def _runs(name: str) -> list:
    client = MlflowClient(f"sqlite:///{Path.cwd() / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(name)
    return client.search_runs([experiment.experiment_id], max_results=1000)


def _control_runs(manifest: Manifest) -> dict[str, str]:
    return {record.label or record.arm: record.run_id for record in [*manifest.evaluations, *manifest.finetune]
            if record.arm == "no-pretraining"}


def _numbers(report: Path) -> list[str]:
    """The report's lines but when it started and its wall time: a deleted manifest starts a new record of those."""
    return [line for line in report.read_text().splitlines() if "started" not in line and "wall time" not in line]


def test_two_ablations_in_one_folder_each_log_the_shared_controls_runs_in_their_own_experiment(
        bvr, data_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny-a.yaml").write_text(SHARED)
    (tmp_path / "tiny-b.yaml").write_text(SHARED.replace("mode: static}", "mode: static, seed: 1}")
                                          .replace("mode: dynamic}", "mode: dynamic, seed: 1}"))
    _ablate(bvr, "tiny-a", data_dir)
    first = {run.info.run_id for run in _runs("tiny-a")}
    err = _ablate(bvr, "tiny-b", data_dir)
    assert "; evaluated again" not in err and "; this seed is trained again" not in err  # reused, not recomputed
    b = Manifest.load(next(Path("outputs/ablations").glob("tiny-b*/manifest.json")))
    in_b = {run.info.run_id: run for run in _runs("tiny-b")}
    control = [record for record in [*b.evaluations, *b.finetune] if record.arm == "no-pretraining"]
    assert control and all(record.status == "done" and record.run_id in in_b for record in control)
    finetune = [in_b[record.run_id] for record in b.finetune if record.arm == "no-pretraining"]
    assert all(run.data.tags[TAG_COPIED_FROM] in first for run in finetune)  # the seed's run, copied with history
    assert all(run.data.tags[TAG_RESULT].startswith("sst2-seed0-") for run in finetune)
    report = (tmp_path / "reports" / "tiny-b" / "report.md").read_text()
    assert "Partial" not in report and "not in the MLflow experiment" not in report
    # Each ablation again: nothing new logged in either experiment (no copy back and forth).
    before = {name: {run.info.run_id for run in _runs(name)} for name in ("tiny-a", "tiny-b")}
    for name in ("tiny-a", "tiny-b"):
        _ablate(bvr, name, data_dir)
    assert {name: {run.info.run_id for run in _runs(name)} for name in ("tiny-a", "tiny-b")} == before


def test_deleted_and_damaged_caches_are_read_back_from_their_runs_not_logged_twice(bvr, data_dir, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny-a.yaml").write_text(SHARED)
    _ablate(bvr, "tiny-a", data_dir)
    manifest_path = next(Path("outputs/ablations").glob("tiny-a*/manifest.json"))
    before = Manifest.load(manifest_path)
    runs = {run.info.run_id for run in _runs("tiny-a")}
    report = _numbers(tmp_path / "reports" / "tiny-a" / "report.md")

    # The manifest and the fine-tuning caches deleted, the evaluation results truncated.
    manifest_path.unlink()
    shutil.rmtree("outputs/finetune")
    damaged = sorted(Path("outputs/evaluations").glob("*.json"))
    for path in damaged:
        path.write_text(path.read_text()[:40])
    err = _ablate(bvr, "tiny-a", data_dir)
    for path in damaged:
        assert f"{path}: cannot be read (JSONDecodeError: " in err, err
    assert err.count("read back from its MLflow run") == len(damaged) + len(before.finetune), err
    assert "; evaluated again" not in err and "; this seed is trained again" not in err
    assert {run.info.run_id for run in _runs("tiny-a")} == runs  # one parent, each unit's run once
    after = Manifest.load(manifest_path)
    assert after.parent_run_id == before.parent_run_id
    assert _control_runs(after) == _control_runs(before)
    assert _numbers(tmp_path / "reports" / "tiny-a" / "report.md") == report
    for path in damaged:
        json.loads(path.read_text())  # rebuilt

    # A cached seed whose run was deleted from the store: named, trained again, the report complete.
    seed_run = next(record.run_id for record in after.finetune if record.arm == "no-pretraining")
    MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").delete_run(seed_run)
    err = _ablate(bvr, "tiny-a", data_dir)
    assert f"its MLflow run {seed_run} is not in the store (deleted?); this seed is trained again" in err
    assert "Partial" not in (tmp_path / "reports" / "tiny-a" / "report.md").read_text()
