"""An ablation is found by its exact name: `bvr status sentence` and `bvr report sentence` never take the runs of
`sentence-objective`, whose folder ``sentence-objective-tiny-HASH`` a prefix ``sentence-*`` also matches; a name with
no runs says so in one line, naming the ablations that have some."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bvr.ablation.manifest import Manifest, find_manifest
from bvr.ablation.plan import make_plan
from bvr.errors import BvrError
from tests.reliability.conftest import error_line
from tests.test_ablate import EXPERIMENT


@pytest.fixture
def outputs(tmp_path, monkeypatch) -> Path:
    """An output folder that holds the manifest of the shipped ``sentence-objective`` ablation at the tiny preset;
    ``sentence.yaml`` (an experiment named ``sentence``) beside it, not run yet."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "outputs"
    plan = make_plan("sentence-objective", preset="tiny", output_dir=out)
    Manifest.new(plan, {}).save(plan.manifest_path)
    (tmp_path / "sentence.yaml").write_text(EXPERIMENT)
    return out


def _refusal(out: Path, command: str) -> str:
    return (f"{command}: no runs of ablation 'sentence' under {out / 'ablations'} (runs there: sentence-objective "
            "(preset tiny)). run `bvr ablate sentence` first")


def test_status_and_report_of_a_name_without_runs_refuse_and_name_what_has_runs(bvr, outputs, tmp_path):
    code, out, err = bvr("status", "sentence", "--output-dir", outputs)
    assert (code, error_line(err)) == (2, _refusal(outputs, "status")), out
    code, out, err = bvr("report", "sentence", "--output-dir", outputs)
    assert (code, error_line(err)) == (2, _refusal(outputs, "report")), out
    assert not (tmp_path / "reports").exists()


def test_an_ablation_whose_name_prefixes_a_newer_one_finds_its_own_manifest(bvr, outputs):
    plan = make_plan("sentence.yaml", output_dir=outputs)
    Manifest.new(plan, {}).save(plan.manifest_path)
    (other,) = outputs.glob("ablations/sentence-objective-tiny-*/manifest.json")
    later = plan.manifest_path.stat().st_mtime + 60
    os.utime(other, (later, later))  # the other ablation updated last
    assert find_manifest("sentence", outputs) == plan.manifest_path
    assert find_manifest("sentence-objective", outputs) == other
    code, out, _ = bvr("status", "sentence", "--output-dir", outputs)
    assert code == 0 and " ".join(out.split()).startswith(f"sentence (preset default), manifest {plan.manifest_path}")


def test_a_damaged_manifest_is_found_by_its_folder_only_when_that_names_this_ablation(outputs):
    damaged = outputs / "ablations" / "sentence-tiny-0123456789ab" / "manifest.json"
    damaged.parent.mkdir()
    damaged.write_text("{")
    theirs = outputs / "ablations" / "sentence-objective-small-0123456789ab" / "manifest.json"
    theirs.parent.mkdir()
    theirs.write_text("{")
    assert find_manifest("sentence", outputs) == damaged  # reading it then says how to repair it
    assert find_manifest("sentence", outputs, preset="tiny") == damaged
    with pytest.raises(BvrError, match="no runs of ablation 'sentence' with preset 'small'"):
        find_manifest("sentence", outputs, preset="small")
