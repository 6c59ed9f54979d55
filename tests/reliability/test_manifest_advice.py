"""Advice that works (issue 35, item 5): a manifest with a unit missing its fields said "run `bvr ablate` again to
rewrite the manifest", and running it again gave the same error, forever. The advice now names the whole command,
and that command, run as printed, repairs the manifest: a damaged unit entry is reset to missing, a manifest that
cannot be read at all is set aside and started again, each said in one line."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex

import pytest

import bvr.runner.run as ablation_run
from bvr.ablation.manifest import Manifest
from bvr.ablation.plan import UnitKind, make_plan
from bvr.runner.units import Outcome
from tests.reliability.conftest import error_line
from tests.test_ablate import EXPERIMENT


@pytest.fixture
def damaged(tmp_path, monkeypatch):
    """An ablation whose manifest lists every unit missing, in ``tmp_path``; units that finish at once (each marks
    its records done) instead of pretraining and fine-tuning, so the runner's reading and writing of the manifest is
    what runs. Yields the plan."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    (tmp_path / "data").mkdir()
    plan = make_plan("exp.yaml", data_dir=tmp_path / "data")
    plan.folder.mkdir(parents=True)
    Manifest.new(plan, {}).save(plan.manifest_path)

    def finish(ctx, unit):
        return Outcome(True, tuple(dataclasses.replace(r, status="done") for r in ctx.manifest.records_of(unit)))

    monkeypatch.setattr(ablation_run, "HANDLERS", dict.fromkeys(UnitKind, finish))
    return plan


def _advised(line: str) -> list[str]:
    """The command in backquotes in an error's hint, as a shell would split it (without the leading ``bvr``)."""
    command = shlex.split(re.search(r"run `([^`]+)`", line).group(1))
    assert command[:2] == ["bvr", "ablate"], line
    return command[1:]


def test_a_unit_missing_its_fields_is_reset_by_the_command_the_error_names(bvr, damaged, tmp_path):
    path = damaged.manifest_path
    data = json.loads(path.read_text())
    data["finetune"][1] = {"arm": "static"}
    path.write_text(json.dumps(data))

    code, _, err = bvr("status", "exp")
    assert code == 2
    line = error_line(err)
    assert line == (f"{path}: manifest of ablation 'exp': finetune[1]: unit lacks task, seed, status. run `bvr ablate "
                    f"exp.yaml --data-dir {tmp_path / 'data'}`: it resets a damaged unit to missing (a "
                    "damaged manifest: sets it aside and starts a new one) and runs what is missing, reusing the "
                    "finished units")

    code, out, err = bvr(*_advised(line))
    assert code == 0, err
    assert f"{path}: 1 damaged unit entry (finetune[1] (lacks task, seed, status)) reset to missing; their units run " \
           "again (finished work is reused)" in out.splitlines()
    manifest = Manifest.load(path)
    assert [(r.label, r.task, r.seed, r.status) for r in manifest.finetune] == [
        (label, "sst2", seed, "done") for label in ("static", "dynamic", "no-pretraining") for seed in (0, 1)]

    code, out, err = bvr("status", "exp")
    assert code == 0, err
    code, out, _ = bvr(*_advised(line))  # nothing left to repair
    assert code == 0 and "damaged" not in out


def test_a_copied_store_is_advised_its_own_output_folder_and_the_shipped_experiment(bvr, damaged, tmp_path,
                                                                                    monkeypatch):
    """A store copied from elsewhere keeps its manifests' recorded folders, another store's (and perhaps a clone since
    deleted): the advice names the folder the manifest lies in, and the experiment by name when its file is gone."""
    path = damaged.manifest_path
    data = json.loads(path.read_text())
    data["finetune"][1] = {"arm": "static"}
    data["context"]["output_dir"] = str(tmp_path / "elsewhere" / "outputs")
    data["ablation"], data["source"] = "masking", str(tmp_path / "gone" / "masking.yaml")
    path.write_text(json.dumps(data))
    line = error_line(bvr("status", "masking")[2])
    assert "run `bvr ablate masking --data-dir " in line and "elsewhere" not in line and "--output-dir" not in line
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")  # seen from another folder, the store's folder is named
    seen = error_line(bvr("status", "masking", "--output-dir", "../outputs")[2])
    assert f"--output-dir {tmp_path / 'outputs'}" in seen


@pytest.mark.parametrize("content", ["{", '{"version": 1, "ablation": "exp", "arms": ["static"]}', "[]"])
def test_a_manifest_that_cannot_be_read_is_set_aside_by_bvr_ablate(bvr, damaged, content):
    path = damaged.manifest_path
    path.write_text(content)
    code, _, err = bvr("status", "exp")
    assert code == 2 and "bvr ablate" in error_line(err)

    code, out, err = bvr("ablate", "exp.yaml", "--data-dir", "data")
    assert code == 0, err
    said = [line for line in out.splitlines() if "set aside" in line]
    assert len(said) == 1 and said[0].startswith(f"{path}: the manifest could not be used (")
    assert said[0].endswith("; set aside as manifest.json.damaged and started again from the plan (finished units "
                            "are reused)")
    assert path.with_name("manifest.json.damaged").read_text() == content
    assert Manifest.load(path).complete
    assert bvr("status", "exp")[0] == 0
