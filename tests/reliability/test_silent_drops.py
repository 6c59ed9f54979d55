"""Nothing dropped or degenerate without a word: a row without a label is counted in the read's "skipped" line with
its line number; a training split of one class, a CoNLL file of tokens without tags, an ablation whose arms are the
same configuration and a warm-up longer than the run are each refused in one line naming the file (or key). Each
case reads the files or the configuration directly: nothing trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bvr.ablation.loading import load_ablation
from bvr.config import DataSettings, load_config, preset_names
from bvr.errors import BvrError
from bvr.tasks.readers import read_task
from bvr.tasks.readers.conll import read_conll
from bvr.tasks.readers.jsonl import read_jsonl
from bvr.tasks.registry import get_task
from tests.reliability.conftest import FIXTURES, copy_task, error_line

PRESET_FILE = Path(__file__).resolve().parents[2] / "experiments" / "presets" / "tiny.yaml"


def _sst2(data: Path, rows: list[str]) -> Path:
    """The SST-2 fixture folder in ``data`` with its train.tsv holding ``rows`` under the header."""
    train = copy_task(data, "glue/SST-2") / "glue" / "SST-2" / "train.tsv"
    train.write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    return train


def _films(count: int) -> list[str]:
    return [f"film number {i} \t{i % 2}" for i in range(count)]


# ---------------------------------------------------------------------------------------------------------------
# Rows without labels
# ---------------------------------------------------------------------------------------------------------------


def test_rows_without_a_label_are_counted_in_the_skipped_line_with_their_lines(tmp_path):
    rows = _films(300)
    rows.insert(50, "a row whose label and its tab were cut ")  # line 52
    rows.insert(150, "a row whose label cell is empty \t")  # line 152
    train = _sst2(tmp_path / "data", rows)
    examples, line = read_task(get_task("sst2"), tmp_path / "data", DataSettings()).splits["train"]
    assert len(examples) == 300
    assert line == f"{train}: read 300 of 302 rows, skipped 2 (no label: 2 at lines 52, 152)"


def test_a_superglue_line_without_a_label_is_counted_as_such(tmp_path):
    lines = (FIXTURES / "superglue" / "boolq" / "train.jsonl").read_text().splitlines()
    for index in (1, 2):
        lines[index] = json.dumps({key: value for key, value in json.loads(lines[index]).items() if key != "label"})
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(lines) + "\n")
    examples, report = read_jsonl(get_task("boolq"), path, max_skipped_share=0.5)
    assert len(examples) == len(lines) - 2
    assert report.reasons == {"no label": 2} and report.first_lines == {"no label": [2, 3]}


# ---------------------------------------------------------------------------------------------------------------
# A training split of one class, a CoNLL file without tags
# ---------------------------------------------------------------------------------------------------------------


def test_a_training_split_of_one_class_is_refused_naming_the_file(tmp_path):
    train = _sst2(tmp_path / "data", [f"a fine film {i} \t1" for i in range(40)])
    with pytest.raises(BvrError) as caught:
        read_task(get_task("sst2"), tmp_path / "data", DataSettings())
    assert str(caught.value) == (
        f"{train}: the training split holds one class ('positive', all 40 examples); training needs at least two. "
        "a model trained on one class learns nothing of the task: give the task's whole training file, not a part "
        "cut or sorted by label")


def test_a_conll_training_file_tagged_all_o_is_refused_naming_the_file(tmp_path):
    data = copy_task(tmp_path / "data", "conll")
    train = data / "conll2003" / "train.txt"
    lines = [" ".join([*line.split()[:3], "O"]) if len(line.split()) == 4 and not line.startswith("-DOCSTART-")
             else line for line in train.read_text().splitlines()]
    train.write_text("\n".join(lines) + "\n")
    with pytest.raises(BvrError) as caught:
        read_task(get_task("conll2003"), data, DataSettings())
    assert str(caught.value) == (
        f"{train}: the training split holds one tag ('O', all 14 tokens); training needs at least two. the last "
        "column of a CoNLL file holds the entity tags: give the tagged training file")


def test_a_conll_file_of_tokens_without_tags_is_refused_as_such(tmp_path):
    path = tmp_path / "train.txt"
    tokens = [line.split()[0] if line.split() else "" for line in (FIXTURES / "conll" / "sample.txt").read_text()
              .splitlines()]
    path.write_text("\n".join(tokens) + "\n")
    with pytest.raises(BvrError) as caught:
        read_conll(path)
    assert str(caught.value) == (
        f"{path}:3: no tags: each of the 14 token lines has one column, the token (first at line 3). a CoNLL file "
        "holds 'token POS chunk NER' lines, the entity tag last: give the tagged file")


# ---------------------------------------------------------------------------------------------------------------
# Identical arms
# ---------------------------------------------------------------------------------------------------------------

IDENTICAL = """\
description: two arms that are one
arms:
  static:
    masking: {mode: static}
  also-static:
    masking: {mode: static, dupe_factor: 10}
control: true
"""


@pytest.mark.parametrize("text", [
    IDENTICAL.replace(", dupe_factor: 10", ""),  # the same diff twice
    IDENTICAL,  # another diff, but dupe_factor 10 is what every arm has anyway
])
@pytest.mark.parametrize("preset", [None, "tiny"])
def test_identical_arms_are_refused_at_load_naming_the_file_and_the_arms(tmp_path, text, preset):
    path = tmp_path / "twins.yaml"
    path.write_text(text)
    with pytest.raises(BvrError) as caught:
        load_ablation(path, preset=preset)
    assert str(caught.value) == (
        f"{path}: arms 'static' and 'also-static' are identical: their configurations differ in nothing but the "
        "name. an ablation compares arms that differ: change what 'also-static' is about, or remove it")


# ---------------------------------------------------------------------------------------------------------------
# Warm-up longer than training
# ---------------------------------------------------------------------------------------------------------------


def test_a_warm_up_longer_than_training_is_refused_naming_the_key():
    with pytest.raises(BvrError) as caught:
        load_config(overrides=["training.max_steps=50", "training.warmup_steps=60"])
    assert str(caught.value) == (
        "--set training.warmup_steps=60: training.warmup_steps: 60 warm-up steps are more than training.max_steps "
        "50: the learning rate would never reach its peak. set it to at most max_steps (the presets warm up for 1% "
        "to 10% of it)")
    assert load_config(overrides=["training.max_steps=50", "training.warmup_steps=50"]).training.warmup_steps == 50


def test_a_preset_warm_up_past_a_shortened_run_is_refused_at_the_command_line(bvr):
    code, _, err = bvr("config", "show", "--preset", "tiny", "--set", "training.max_steps=50")
    assert code == 2
    line = next(n for n, text in enumerate(PRESET_FILE.read_text().splitlines(), 1) if "warmup_steps" in text)
    assert error_line(err) == (
        f"{PRESET_FILE}:{line}: training.warmup_steps: 100 warm-up steps are more than training.max_steps 50: the "
        "learning rate would never reach its peak. set it to at most max_steps (the presets warm up for 1% to 10% "
        "of it)")


def test_an_arm_whose_warm_up_outlasts_its_steps_is_refused_naming_the_arm(tmp_path):
    path = tmp_path / "short.yaml"
    path.write_text(IDENTICAL.replace("masking: {mode: static, dupe_factor: 10}",
                                      "masking: {mode: dynamic}\n    training: {max_steps: 20}"))
    with pytest.raises(BvrError) as caught:
        load_ablation(path, preset="tiny")
    assert str(caught.value).startswith(f"{PRESET_FILE}:")
    assert "training.warmup_steps (arm 'also-static'): 100 warm-up steps are more than training.max_steps 20" in str(
        caught.value)


def test_shipped_presets_warm_up_within_their_runs():
    for preset in preset_names():
        training = load_config(preset=preset).training
        assert training.warmup_steps <= training.max_steps, preset
