"""The task registry: every spec is complete and consistent, and names resolve (or fail helpfully)."""

from __future__ import annotations

import dataclasses

import pytest

from bvr.config import HYPERPARAMETERS, Config, resolve_finetune
from bvr.errors import BvrError
from bvr.tasks.glue_metrics import METRIC_BUILDERS, PLAIN_METRICS, make_metrics
from bvr.tasks.readers import READERS
from bvr.tasks.registry import (
    GLUE_TASKS,
    TASK_FORMATS,
    TASK_KINDS,
    TASKS,
    SplitSpec,
    TaskSpec,
    _index,
    get_task,
)

GLUE_FOLDERS = {
    "cola": "glue/CoLA", "sst2": "glue/SST-2", "mrpc": "glue/MRPC", "stsb": "glue/STS-B", "qqp": "glue/QQP",
    "mnli": "glue/MNLI", "qnli": "glue/QNLI", "rte": "glue/RTE", "wnli": "glue/WNLI",
}
# The GLUE leaderboard's headline per task: MRPC and QQP average F1 and accuracy, STS-B Pearson and Spearman.
MAIN_METRICS = {
    "cola": "mcc", "sst2": "accuracy", "mrpc": "accuracy_f1", "stsb": "pearson_spearman", "qqp": "accuracy_f1",
    "mnli": "accuracy", "qnli": "accuracy", "rte": "accuracy", "wnli": "accuracy",
}


def test_glue_tasks_are_registered_with_their_folders():
    assert tuple(GLUE_FOLDERS) == GLUE_TASKS
    assert {name: TASKS[name].folder for name in GLUE_TASKS} == GLUE_FOLDERS


@pytest.mark.parametrize("name", list(TASKS))
def test_every_spec_is_complete(name):
    spec = TASKS[name]
    assert spec.name == name and spec.kind in TASK_KINDS
    assert spec.folder and spec.hub_id and spec.label_field
    assert spec.splits[0].name == "train" and all(split.file and split.hub_split for split in spec.splits)
    assert spec.eval_splits and spec.headline_split in spec.eval_splits
    assert spec.main_metrics and set(spec.main_metrics) <= set(spec.metrics)
    assert set(spec.finetune) <= set(HYPERPARAMETERS)  # only where the task differs from FinetuneConfig's
    if spec.label_names is not None:
        assert len(set(spec.label_names)) == len(spec.label_names) >= 2


@pytest.mark.parametrize("name", GLUE_TASKS)
def test_glue_specs_fit_readers_and_metrics(name):
    spec = TASKS[name]
    assert spec.kind in ("classification", "regression")
    assert 1 <= len(spec.text_fields) <= 2
    assert spec.hub_id == "nyu-mll/glue" and spec.hub_config == name
    assert all(metric in METRIC_BUILDERS and metric in PLAIN_METRICS for metric in spec.metrics)
    assert spec.main_metric == MAIN_METRICS[name]
    assert set(make_metrics(spec)) == set(spec.metrics)


def test_bert_fine_tuning_defaults():
    defaults = resolve_finetune(Config(), get_task("rte"))
    assert (defaults.learning_rate, defaults.batch_size, defaults.epochs) == (2e-5, 32, 3)
    assert (defaults.warmup_fraction, defaults.max_length) == (0.1, 128)


def test_mnli_has_two_evaluation_splits_and_headlines_matched():
    spec = get_task("mnli")
    assert spec.eval_splits == ("dev_matched", "dev_mismatched")
    assert spec.splits[2] == SplitSpec("dev_mismatched", "dev_mismatched.tsv", "validation_mismatched")
    assert spec.headline_split == "dev_matched"
    assert spec.label_names == ("entailment", "neutral", "contradiction")  # the hub's ClassLabel order


def test_special_layouts():
    assert get_task("cola").columns == ("source", "label", "original_mark", "sentence")
    assert get_task("stsb").label_names is None and get_task("stsb").label_range == (0.0, 5.0)
    assert get_task("stsb").num_labels == 1 and get_task("mnli").num_labels == 3
    assert get_task("mrpc").hub_text_fields == ("sentence1", "sentence2")


def test_names_resolve_loosely():
    assert get_task("SST-2") is TASKS["sst2"]
    assert get_task("STS_B") is TASKS["stsb"]


def test_unknown_task_lists_names_and_suggests():
    with pytest.raises(BvrError) as caught:
        get_task("colaa")
    message = str(caught.value)
    assert "unknown task 'colaa'" in message and "did you mean 'cola'?" in message
    assert all(name in message for name in TASKS)


def test_every_format_has_a_reader():
    assert set(READERS) == set(TASK_FORMATS) == {spec.format for spec in TASKS.values()}
    assert {name: TASKS[name].format for name in ("rte", "boolq", "conll2003", "squad")} == {
        "rte": "tsv", "boolq": "jsonl", "conll2003": "conll", "squad": "squad-json"}


def test_specs_are_frozen_and_hashable():
    spec = get_task("cola")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"  # type: ignore[misc]
    assert len({spec, get_task("cola")}) == 1


def _spec(**changes) -> TaskSpec:
    fields = {field.name: getattr(get_task("rte"), field.name) for field in dataclasses.fields(TaskSpec)}
    return TaskSpec(**(fields | changes))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kind": "ranking"}, "kind 'ranking'"),
        ({"main_metrics": ("f1",)}, "main metrics"),
        ({"label_names": None}, "label names are required"),
        ({"kind": "regression"}, "a regression task has no label names"),
        ({"main_split": "test"}, "main split 'test'"),
        ({"splits": (SplitSpec("dev", "dev.tsv", "validation"),)}, "needs 'train'"),
        ({"hub_text_fields": ("premise",)}, "one to one"),
        ({"format": "xml"}, "format 'xml' is not one of tsv, jsonl, conll, squad-json"),
        ({"label_values": (False, True, None)}, "label_values must match label_names"),
    ],
)
def test_inconsistent_specs_are_refused(changes, message):
    with pytest.raises(BvrError, match=message):
        _spec(**changes)


def test_a_new_task_is_one_spec():
    tagging = _spec(name="toy_ner", kind="tagging", format="conll", folder="toy", text_fields=("tokens",),
                    label_field="tags", label_names=("O", "B-PER", "I-PER"), metrics=("f1", "precision", "recall"),
                    main_metrics=("f1",))
    tasks = _index((*TASKS.values(), tagging))
    assert tasks["toy_ner"] is tagging and tagging.main_metric == "f1"
    with pytest.raises(ValueError, match="registered twice"):
        _index((tagging, tagging))
    with pytest.raises(ValueError, match="no torchmetrics object"):
        make_metrics(tagging)
    span = _spec(name="toy_qa", kind="span", format="squad-json", label_names=None, metrics=("exact_match", "f1"),
                 main_metrics=("f1",))
    assert span.label_names is None
