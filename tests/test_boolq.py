"""SuperGLUE BoolQ, a task added by its spec alone: the JSONL reader on a small fixture (exact values), bad lines
named by file and line, and `bvr finetune` end to end with a tiny encoder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bvr import cli
from bvr.errors import BvrError
from bvr.tasks.data import DataSettings
from bvr.tasks.readers import read_task
from bvr.tasks.readers.common import Example
from bvr.tasks.readers.jsonl import read_jsonl
from bvr.tasks.registry import get_task
from tests.test_finetune import make_checkpoint

FIXTURES = Path(__file__).parent / "fixtures"
BOOLQ = FIXTURES / "superglue" / "boolq"

pytestmark = pytest.mark.usefixtures("one_thread")


def test_spec_reads_jsonl_pairs_with_boolean_labels():
    spec = get_task("BoolQ")
    assert (spec.format, spec.folder, spec.text_fields, spec.label_field) == (
        "jsonl", "superglue/boolq", ("question", "passage"), "label")
    assert (spec.label_names, spec.label_values, spec.main_metric) == (("False", "True"), (False, True), "accuracy")
    assert [(split.name, split.file, split.hub_split) for split in spec.splits] == [
        ("train", "train.jsonl", "train"), ("dev", "val.jsonl", "validation")]
    assert (spec.hub_id, spec.hub_config) == ("aps/super_glue", "boolq")


def test_reader_gives_exact_examples_and_report():
    examples, report = read_jsonl(get_task("boolq"), BOOLQ / "val.jsonl")
    assert examples[:2] == [
        Example("is the earth flat", "The Earth is an oblate spheroid, slightly flattened at the poles.", 0, 1),
        Example("do fish live in water", "Fish are aquatic animals that live in fresh and salt water.", 1, 2),
    ]
    assert [example.label for example in examples] == [0, 1, 1, 0, 1, 0]
    assert report.summary() == f"{BOOLQ / 'val.jsonl'}: read 6 of 6 rows, skipped 0"
    train, _ = read_jsonl(get_task("boolq"), BOOLQ / "train.jsonl")
    assert len(train) == 14 and train[-1].line == 14 and train[-1].label == 1


def test_read_task_takes_every_split_from_the_data_folder():
    read = read_task(get_task("boolq"), FIXTURES, DataSettings())
    assert {name: len(examples) for name, (examples, _) in read.splits.items()} == {"train": 14, "dev": 6}
    assert read.note is None


def _file(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "val.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = json.dumps({"question": "q", "passage": "p", "idx": 0, "label": True})


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ('{"question": "q", "passage": ',
         r"1 of 2 rows could not be parsed, more than 1% \(malformed JSON: 1 at line 2\)"),
        ('["q", "p", true]', r"\(not a JSON object: 1 at line 2\)"),
        ('{"question": "q", "label": false}', r"\(no field 'passage': 1 at line 2\)"),
        ('{"question": "q", "passage": 3, "label": false}', r"\(a text field is not a string: 1 at line 2\)"),
    ],
)
def test_unparsable_lines_fail_past_the_skipped_share_naming_file_and_line(tmp_path, bad, message):
    path = _file(tmp_path, [GOOD, bad])
    with pytest.raises(BvrError, match=message) as caught:
        read_jsonl(get_task("boolq"), path)
    assert str(caught.value).count("\n") == 0 and str(path) in str(caught.value)


@pytest.mark.parametrize("label", ['"yes"', "1", "null"])
def test_an_unknown_label_always_fails_at_its_file_and_line(tmp_path, label):
    path = _file(tmp_path, [GOOD, GOOD, f'{{"question": "q", "passage": "p", "label": {label}}}'])
    with pytest.raises(BvrError, match=f"unknown label {label} for task 'boolq'") as caught:
        read_jsonl(get_task("boolq"), path)
    assert caught.value.where == f"{path}:3" and "false, true" in caught.value.hint


def test_a_few_blank_lines_are_skipped_and_reported(tmp_path):
    path = _file(tmp_path, [GOOD] * 150 + [""] + [GOOD])
    examples, report = read_jsonl(get_task("boolq"), path)
    assert len(examples) == 151 and examples[-1].line == 152
    assert report.summary().endswith("read 151 of 152 rows, skipped 1 (blank line: 1 at line 151)")


def test_bvr_finetune_runs_boolq_end_to_end(tmp_path, monkeypatch):
    checkpoint = make_checkpoint(tmp_path / "bert", "bert", sentence_head=True)
    data = tmp_path / "data"
    shutil.copytree(BOOLQ, data / "superglue" / "boolq")
    monkeypatch.chdir(tmp_path)  # the MLflow store lives in the working directory
    result = CliRunner().invoke(cli.app, [
        "finetune", "--task", "boolq", "--checkpoint", str(checkpoint), "--seeds", "1", "--data-dir", str(data),
        "--output-dir", str(tmp_path / "out"), "--experiment", "test-boolq", "--set", "finetune.epochs=1",
        "--set", "finetune.batch_size=4", "--set", "finetune.learning_rate=1e-3", "--set", "finetune.max_length=64",
    ])
    assert result.exit_code == 0, result.output
    assert "dev/accuracy" in result.output and "read 14 of 14 rows" in result.output
