"""bvr report finds an ablation's runs when the data folder is named another way (issue: the data folder's path was
part of the plan's identity, so `bvr report NAME --preset P` without the same `--data-dir` found nothing). The data
now enter a plan by content."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bvr.ablation.locate import made_elsewhere
from bvr.ablation.manifest import Manifest
from bvr.ablation.plan import MANIFEST_VERSION, make_plan
from bvr.errors import BvrError
from tests.test_ablate import EXPERIMENT, FIXTURES
from tests.test_prepare import write_wiki_corpus


@pytest.fixture
def made(tmp_path) -> tuple[Path, Path]:
    """An experiment file with a preset, and the manifest `bvr ablate FILE --preset tiny --data-dir DATA` writes."""
    data = tmp_path / "data"
    write_wiki_corpus(data, documents=12)
    shutil.copytree(FIXTURES / "glue", data / "glue")
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(EXPERIMENT + "presets:\n  tiny: {training: {max_steps: 4}}\n")
    plan = make_plan(experiment, preset="tiny", data_dir=data, output_dir=tmp_path / "outputs")
    Manifest.new(plan, {}).save(plan.manifest_path)
    return experiment, data


def plan_with(experiment: Path, data: Path | None, out: Path):
    return make_plan(experiment, preset="tiny", data_dir=data, output_dir=out)


def test_a_copy_of_the_data_folder_is_the_same_plan_and_without_one_the_runs_are_found(made, tmp_path):
    experiment, data = made
    out = tmp_path / "outputs"
    made_with = plan_with(experiment, data, out).manifest_path
    shutil.copytree(data, tmp_path / "moved")  # the same bytes at another path
    assert plan_with(experiment, tmp_path / "moved", out).manifest_path == made_with  # the data enter by content
    plan = plan_with(experiment, None, out)
    assert not plan.manifest_path.is_file()  # without a data folder (the hub): another plan, found through the
    found = made_elsewhere(plan, lambda d: plan_with(experiment, Path(d), out))  # manifest's own data folder
    assert found is not None and found.manifest == made_with and found.data_dir == str(data)
    assert found.note() == f"the runs were made with the data folder {data}; using them (same settings)"


def test_a_plan_folder_another_version_made_is_named_and_a_new_one_started(made, tmp_path):
    """The plan's hash is as this version names it (its folder is found again); a plan folder of the same ablation
    and preset whose manifest another version of bvr wrote is not continued, and one line says so."""
    experiment, data = made
    plan = plan_with(experiment, data, tmp_path / "outputs")
    assert plan.folder.name == "exp-tiny-a53b853ebb69"
    assert Manifest.load_for(plan, {})[1] is None  # this version's folder: continued
    earlier = plan.folder.with_name("exp-tiny-0123456789ab")
    plan.folder.rename(earlier)
    manifest = json.loads((earlier / "manifest.json").read_text())
    (earlier / "manifest.json").write_text(json.dumps({**manifest, "version": MANIFEST_VERSION - 1}))
    shutil.copytree(earlier, plan.folder.with_name("exp-tiny-ba9876543210"))  # this version's, other settings
    (plan.folder.with_name("exp-tiny-ba9876543210") / "manifest.json").write_text(json.dumps(manifest))
    fresh, line = Manifest.load_for(plan, {})
    assert fresh.plan_hash == "a53b853ebb69" and line == (
        f"{earlier}: made by another version of bvr (plan version {MANIFEST_VERSION - 1}; this one writes "
        f"{MANIFEST_VERSION}), not reused: {plan.folder.name} is made anew")


def test_other_data_is_refused_naming_what_differs(made, tmp_path):
    experiment, data = made
    out = tmp_path / "outputs"
    other = tmp_path / "other"
    shutil.copytree(data, other)
    (other / "glue" / "SST-2" / "dev.tsv").write_text("sentence\tlabel\nanother\t1\n")
    plan = plan_with(experiment, other, out)
    assert not plan.manifest_path.is_file()  # other content: another plan
    with pytest.raises(BvrError, match=f"were made with the data folder {data}, whose glue differs from "
                                       f"{other / 'glue'}"):
        made_elsewhere(plan, lambda d: plan_with(experiment, Path(d), out))


def test_other_settings_are_not_taken_for_the_same_plan(made, tmp_path):
    experiment, data = made
    out = tmp_path / "outputs"
    plan = make_plan(experiment, preset="tiny", overrides=["training.learning_rate=0.001"], data_dir=None,
                     output_dir=out)
    rebuild = lambda d: make_plan(experiment, preset="tiny", overrides=["training.learning_rate=0.001"],  # noqa: E731
                                  data_dir=Path(d), output_dir=out)
    assert made_elsewhere(plan, rebuild) is None
