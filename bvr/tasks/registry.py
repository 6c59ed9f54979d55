"""Every fine-tuning task as data: one :class:`TaskSpec` per task, in one registry.

A spec says where a task's files are and in which format (:data:`TASK_FORMATS`), which fields hold its text and
label, what the labels are, which metrics it reports (its headline among them) and the fine-tuning hyperparameters
it starts from. The readers, the task kinds and the report look everything up here, so adding a task whose format
and kind exist is adding one ``TaskSpec(...)`` to ``_SPECS`` below.

>>> get_task("mrpc").main_metric
'accuracy_f1'
>>> get_task("mnli").eval_splits
('dev_matched', 'dev_mismatched')
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bvr.config import check_task_block
from bvr.errors import BvrError

TaskKind = Literal["classification", "regression", "tagging", "span"]
TASK_KINDS: tuple[str, ...] = ("classification", "regression", "tagging", "span")
TaskFormat = Literal["tsv", "jsonl", "conll", "squad-json"]
TASK_FORMATS: tuple[str, ...] = ("tsv", "jsonl", "conll", "squad-json")
"""File formats of a task's data folder: GLUE's TSV layout, one JSON object per line, CoNLL columns, SQuAD's JSON.
Without a data folder every format is read from the task's Hugging Face hub dataset instead."""


@dataclass(frozen=True)
class SplitSpec:
    """One split of a task: its file in the data folder and its name on the Hugging Face hub."""

    name: str  # bvr's name for the split ('train', 'dev', 'dev_matched', ...); metric keys start with it
    file: str  # file name inside the task's folder
    hub_split: str  # the same split's name in the hub dataset ('validation', 'validation_matched', ...)


def glue_splits(*eval_names: str) -> tuple[SplitSpec, ...]:
    """GLUE's split layout: ``train.tsv`` and one ``NAME.tsv`` per evaluation split (hub: 'dev' -> 'validation').

    >>> [s.hub_split for s in glue_splits("dev_matched")]
    ['train', 'validation_matched']
    """
    names = eval_names or ("dev",)
    evals = tuple(SplitSpec(name, f"{name}.tsv", name.replace("dev", "validation", 1)) for name in names)
    return (SplitSpec("train", "train.tsv", "train"), *evals)


@dataclass(frozen=True)
class TaskSpec:
    """What bvr knows about one task; see the module docstring."""

    name: str  # registry key, lower case ('cola', 'mnli', 'conll2003')
    # 'classification' (one label per example), 'regression' (one number), 'tagging' (a label per word) or 'span'
    # (an answer span in a context)
    kind: TaskKind
    format: TaskFormat  # format of the files in ``folder`` (see TASK_FORMATS); picks the reader
    folder: str  # folder of the task's files, relative to the data folder ('glue/CoLA')
    splits: tuple[SplitSpec, ...]  # the training split first, then the evaluation splits
    hub_id: str  # Hugging Face dataset read when no data folder is given ('nyu-mll/glue')
    hub_config: str | None  # configuration of ``hub_id`` ('cola'), or None
    text_fields: tuple[str, ...]  # columns holding the text, in the order the model sees them (one or two for GLUE)
    label_field: str  # column holding the label
    # Label words in id order (the hub's order, so hub ids need no mapping); None for regression (and span).
    label_names: tuple[str, ...] | None
    metrics: tuple[str, ...]  # metric names reported on every evaluation split
    # The metrics whose mean is the headline score, as the GLUE leaderboard averages F1 and accuracy for MRPC and QQP
    # and Pearson and Spearman for STS-B; a single metric for most tasks.
    main_metrics: tuple[str, ...]
    # Text columns on the hub when they differ from ``text_fields`` (MNLI: premise, hypothesis).
    hub_text_fields: tuple[str, ...] | None = None
    hub_label_field: str | None = None  # label column on the hub when it differs from ``label_field``
    # Column names of files that have no header row (CoLA); None when the first line names the columns.
    columns: tuple[str, ...] | None = None
    # JSON label values in id order when they are not the label names or ids (BoolQ: false, true); the JSONL reader
    # maps a value to its position here, matching type as well (``true`` is not ``1``).
    label_values: tuple[Any, ...] | None = None
    label_range: tuple[float, float] | None = None  # closed interval a regression label must lie in (STS-B: 0 to 5)
    main_split: str | None = None  # evaluation split of the headline score; None: the first (MNLI: 'dev_matched')
    # Fine-tuning hyperparameters where this task differs from :class:`~bvr.config.FinetuneConfig`'s defaults (the
    # task's own layer, under every preset, config file and ``--set``: see :func:`bvr.config.resolve_finetune`).
    finetune: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        where = f"task {self.name!r}"
        _require(self.kind in TASK_KINDS, where, f"kind {self.kind!r} is not one of {', '.join(TASK_KINDS)}")
        _require(self.format in TASK_FORMATS, where, f"format {self.format!r} is not one of {', '.join(TASK_FORMATS)}")
        _require(len(self.splits) >= 2 and self.splits[0].name == "train", where, "needs 'train' then eval splits")
        _require(bool(self.text_fields), where, "needs at least one text field")
        _require(set(self.main_metrics) <= set(self.metrics) and bool(self.main_metrics), where,
                 f"main metrics {self.main_metrics} must be among {self.metrics}")
        # Span tasks predict positions, not labels, so they may go without label names.
        _require(self.label_names is not None or self.kind in ("regression", "span"), where,
                 f"label names are required for a {self.kind} task")
        _require(self.label_names is None or self.kind != "regression", where, "a regression task has no label names")
        _require(self.main_split is None or self.main_split in self.eval_splits, where,
                 f"main split {self.main_split!r} is not an evaluation split")
        _require(self.label_values is None or len(self.label_values) == self.num_labels, where,
                 "label_values must match label_names one to one")
        _require(self.hub_text_fields is None or len(self.hub_text_fields) == len(self.text_fields), where,
                 "hub_text_fields must match text_fields one to one")
        check_task_block(dict(self.finetune), f"task {self.name!r}: finetune")

    @property
    def eval_splits(self) -> tuple[str, ...]:
        return tuple(split.name for split in self.splits[1:])

    @property
    def headline_split(self) -> str:
        """The evaluation split the headline score is read from."""
        return self.main_split or self.eval_splits[0]

    @property
    def main_metric(self) -> str:
        """Name of the headline score: the main metric, or ``a_b`` for the mean of metrics a and b."""
        return "_".join(self.main_metrics)

    @property
    def points_scale(self) -> float:
        """Factor from the logged headline score to points: SQuAD's evaluator reports points, every other task
        fractions (accuracy 0.52 is 52 points)."""
        return 1.0 if self.kind == "span" else 100.0

    @property
    def num_labels(self) -> int:
        """Output size of the task's head: the number of labels, or 1 for regression."""
        return len(self.label_names) if self.label_names is not None else 1


def _require(ok: bool, where: str, message: str) -> None:
    if not ok:
        raise BvrError(message, where=where)


def _glue(name: str, folder: str, text_fields: tuple[str, ...], label_field: str, **kwargs: Any) -> TaskSpec:
    """A GLUE task: files under ``glue/FOLDER``, hub dataset nyu-mll/glue with config ``name``."""
    kwargs.setdefault("splits", glue_splits())
    return TaskSpec(name=name, format="tsv", folder=f"glue/{folder}", hub_id="nyu-mll/glue", hub_config=name,
                    text_fields=text_fields, label_field=label_field, **kwargs)


_ACC = ("accuracy",)
_ACC_F1 = ("accuracy", "f1")
_CORRELATIONS = ("pearson", "spearman")
_ENTAILMENT = ("entailment", "not_entailment")

# CoNLL-2003's tags in the hub dataset's ClassLabel order, so hub ids need no mapping.
CONLL_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")

# SQuAD's learning rate and epochs are the google-research/bert README's run_squad.py recipe (3e-5, 2 epochs,
# 384-token windows with stride 128; the batch is the shared default, 32), kept because the released script runs it
# and every cached SQuAD result was made with it. The BERT paper's (section 4.2: 3 epochs at 5e-5) is one override
# away (finetune.per_task.squad.learning_rate=5e-5, .epochs=3).
SPAN_FINETUNE = {"learning_rate": 3e-5, "epochs": 2, "max_length": 384}


def _squad(name: str, version: str, hub_id: str) -> TaskSpec:
    """SQuAD ``version`` under ``squad/vVERSION``: ``train-vVERSION.json`` and ``dev-vVERSION.json`` (offline often
    only the dev file exists: :func:`bvr.tasks.readers.read_task` then splits it by article)."""
    splits = (SplitSpec("train", f"train-v{version}.json", "train"),
              SplitSpec("dev", f"dev-v{version}.json", "validation"))
    return TaskSpec(name=name, kind="span", format="squad-json", folder=f"squad/v{version}", splits=splits,
                    hub_id=hub_id, hub_config=None,
                    text_fields=("question", "context"), label_field="answers", label_names=None,
                    metrics=("exact_match", "f1"), main_metrics=("f1",), finetune=SPAN_FINETUNE)


# One entry per task: adding a task is adding its TaskSpec here.
_SPECS: tuple[TaskSpec, ...] = (
    _glue("cola", "CoLA", ("sentence",), "label", kind="classification",
          columns=("source", "label", "original_mark", "sentence"), label_names=("unacceptable", "acceptable"),
          metrics=("mcc", "accuracy"), main_metrics=("mcc",)),
    _glue("sst2", "SST-2", ("sentence",), "label", kind="classification", label_names=("negative", "positive"),
          metrics=_ACC, main_metrics=_ACC),
    _glue("mrpc", "MRPC", ("#1 String", "#2 String"), "Quality", kind="classification",
          hub_text_fields=("sentence1", "sentence2"), hub_label_field="label",
          label_names=("not_equivalent", "equivalent"), metrics=_ACC_F1, main_metrics=_ACC_F1),
    _glue("stsb", "STS-B", ("sentence1", "sentence2"), "score", kind="regression", hub_label_field="label",
          label_names=None, label_range=(0.0, 5.0), metrics=_CORRELATIONS, main_metrics=_CORRELATIONS),
    _glue("qqp", "QQP", ("question1", "question2"), "is_duplicate", kind="classification",
          hub_label_field="label", label_names=("not_duplicate", "duplicate"), metrics=_ACC_F1, main_metrics=_ACC_F1),
    _glue("mnli", "MNLI", ("sentence1", "sentence2"), "gold_label", kind="classification",
          splits=glue_splits("dev_matched", "dev_mismatched"), hub_text_fields=("premise", "hypothesis"),
          hub_label_field="label", label_names=("entailment", "neutral", "contradiction"), metrics=_ACC,
          main_metrics=_ACC),
    _glue("qnli", "QNLI", ("question", "sentence"), "label", kind="classification", label_names=_ENTAILMENT,
          metrics=_ACC, main_metrics=_ACC),
    _glue("rte", "RTE", ("sentence1", "sentence2"), "label", kind="classification", label_names=_ENTAILMENT,
          metrics=_ACC, main_metrics=_ACC),
    # WNLI's files use 1 for entailment, so its label order is the reverse of RTE's and QNLI's (as on the hub).
    _glue("wnli", "WNLI", ("sentence1", "sentence2"), "label", kind="classification",
          label_names=("not_entailment", "entailment"), metrics=_ACC, main_metrics=_ACC),
    # Entity-level F1 (conlleval / seqeval), read on valid.txt; test.txt is scored too, as papers report it.
    TaskSpec(name="conll2003", kind="tagging", format="conll", folder="conll2003", hub_id="eriktks/conll2003",
             hub_config=None,
             splits=(SplitSpec("train", "train.txt", "train"), SplitSpec("dev", "valid.txt", "validation"),
                     SplitSpec("test", "test.txt", "test")),
             text_fields=("tokens",), label_field="ner_tags", label_names=CONLL_TAGS,
             metrics=("f1", "precision", "recall"), main_metrics=("f1",), main_split="dev",
             finetune={"learning_rate": 5e-5}),
    # SuperGLUE BoolQ: a yes/no question about a passage; the JSONL files' label is a JSON boolean.
    TaskSpec(name="boolq", kind="classification", format="jsonl", folder="superglue/boolq",
             splits=(SplitSpec("train", "train.jsonl", "train"), SplitSpec("dev", "val.jsonl", "validation")),
             hub_id="aps/super_glue", hub_config="boolq", text_fields=("question", "passage"), label_field="label",
             label_names=("False", "True"), label_values=(False, True), metrics=_ACC, main_metrics=_ACC),
    _squad("squad", "1.1", "rajpurkar/squad"),
    _squad("squad_v2", "2.0", "rajpurkar/squad_v2"),
)


def _index(specs: tuple[TaskSpec, ...]) -> dict[str, TaskSpec]:
    tasks: dict[str, TaskSpec] = {}
    for spec in specs:
        if spec.name in tasks:
            raise ValueError(f"task {spec.name!r} is registered twice")
        tasks[spec.name] = spec
    return tasks


TASKS: dict[str, TaskSpec] = _index(_SPECS)
"""Every task bvr can fine-tune on, by name."""

GLUE_TASKS: tuple[str, ...] = tuple(name for name, spec in TASKS.items() if spec.hub_id == "nyu-mll/glue")
"""The GLUE tasks, in the benchmark's order."""


def get_task(name: str) -> TaskSpec:
    """The spec of task ``name`` (case-insensitive; '-' and '_' ignored, so 'SST-2' finds 'sst2'); an unknown name's
    error lists the tasks and suggests the closest."""
    key = name.lower().replace("-", "").replace("_", "")
    for spec in TASKS.values():
        if spec.name.replace("_", "") == key:
            return spec
    close = difflib.get_close_matches(name.lower(), list(TASKS), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise BvrError(f"unknown task {name!r}", hint=f"{hint}Known tasks: {', '.join(TASKS)}")
