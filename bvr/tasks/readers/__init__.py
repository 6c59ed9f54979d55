"""Readers by file format: one :class:`FileFormat` per format in :data:`READERS`, and :func:`read_task`.

A format says how one file of it is read, and how the same split is read from the task's Hugging Face hub dataset
(:mod:`bvr.tasks.readers.hub`) without a data folder: ``tsv`` (GLUE) and ``jsonl`` (SuperGLUE) as
:class:`~bvr.tasks.readers.common.Example` s, ``conll`` as :class:`~bvr.tasks.readers.conll.Sentence` s,
``squad-json`` as :class:`~bvr.tasks.readers.squad_json.SquadExample` s. Offline, SQuAD often has only its dev file:
without a training file, the dev file is split by article into a training and an evaluation part
(:func:`~bvr.tasks.readers.squad_json.split_by_article`). A training split of a classification or tagging task must
hold two classes (:func:`check_classes`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bvr.config import DataSettings
from bvr.errors import BvrError
from bvr.tasks.readers.common import ReadResult
from bvr.tasks.readers.conll import read_conll
from bvr.tasks.readers.hub import hub_conll, hub_sentences, hub_squad
from bvr.tasks.readers.jsonl import read_jsonl
from bvr.tasks.readers.squad_json import read_squad, split_by_article
from bvr.tasks.readers.tsv import read_tsv
from bvr.tasks.registry import TaskSpec


@dataclass(frozen=True)
class FileFormat:
    """How a task of one format is read: a file of the data folder, ``(spec, path)``, or a split of the hub dataset,
    ``(spec, hub split)``; either gives the examples and one line saying what was read."""

    read_file: Callable[[TaskSpec, Path], tuple[list[Any], str]]
    read_hub: Callable[[TaskSpec, str], tuple[list[Any], str]]
    fallback_to_dev: bool = False
    """Whether a missing training file means: train and evaluate on two article-disjoint parts of the dev file."""


def _one_line(read: Callable[[TaskSpec, Any], tuple[list[Any], Any]]) -> Callable[..., tuple[list[Any], str]]:
    """A reader whose report becomes its one line (``describe()``)."""

    def read_file(spec: TaskSpec, where: Any) -> tuple[list[Any], str]:
        examples, report = read(spec, where)
        return examples, report.describe()
    return read_file


READERS: dict[str, FileFormat] = {
    "tsv": FileFormat(_one_line(read_tsv), _one_line(hub_sentences)),
    "jsonl": FileFormat(_one_line(read_jsonl), _one_line(hub_sentences)),
    # A tag not among the task's labels is refused at its line.
    "conll": FileFormat(_one_line(lambda spec, path: read_conll(path, labels=spec.label_names)), hub_conll),
    "squad-json": FileFormat(_one_line(lambda spec, path: read_squad(path)), hub_squad, fallback_to_dev=True),
}
"""File format -> how to read it (every name in :data:`~bvr.tasks.registry.TASK_FORMATS`)."""


def read_task(spec: TaskSpec, data_dir: Path | None, settings: DataSettings) -> ReadResult:
    """Every split of ``spec``: from ``data_dir/spec.folder`` in the spec's format, or from the hub without one.

    ``settings`` gives the article split's fraction and seed, for a ``squad-json`` task without a training file.
    """
    reader = READERS[spec.format]
    train_split, eval_split = spec.splits[0], spec.splits[1]
    if data_dir is None:
        splits = {split.name: reader.read_hub(spec, split.hub_split) for split in spec.splits}
        check_classes(spec, splits[train_split.name][0], f"{spec.hub_id}:{train_split.hub_split}")
        return ReadResult(splits)
    folder = Path(data_dir) / spec.folder
    if not reader.fallback_to_dev or (folder / train_split.file).is_file():
        splits = {split.name: reader.read_file(spec, task_file(spec, Path(data_dir), split.file))
                  for split in spec.splits}
        check_classes(spec, splits[train_split.name][0], folder / train_split.file)
        return ReadResult(splits)
    examples, line = reader.read_file(spec, task_file(spec, Path(data_dir), eval_split.file))
    train, evaluation, note = split_by_article(examples, settings.article_split_fraction, settings.article_split_seed)
    line = f"{line}; no {train_split.file}, so training and evaluation share it"
    return ReadResult({train_split.name: (train, line), eval_split.name: (evaluation, line)}, note)


def check_classes(spec: TaskSpec, examples: list[Any], source: str | Path) -> None:
    """Refuse a training split of a classification or tagging task that holds fewer than two classes (tags): a
    model trained on it learns one answer, and its scores would be reported as if it had learned the task. The
    error names ``source`` (the file or hub split), the one class and how many examples (tokens) hold it.
    """
    if spec.kind == "classification":
        names = spec.label_names or ()
        counts = Counter(names[example.label] for example in examples)
        what, unit = "class", "examples"
        hint = ("a model trained on one class learns nothing of the task: give the task's whole training file, not "
                "a part cut or sorted by label")
    elif spec.kind == "tagging":
        counts = Counter(tag for sentence in examples for tag in sentence.tags)
        what, unit = "tag", "tokens"
        hint = "the last column of a CoNLL file holds the entity tags: give the tagged training file"
    else:
        return
    if len(counts) < 2:
        detail = ", ".join(f"{name!r}, all {count:,} {unit}" for name, count in counts.items())
        raise BvrError(f"the training split holds one {what} ({detail}); training needs at least two", where=source,
                       hint=hint)


def task_file(spec: TaskSpec, data_dir: Path, file: str) -> Path:
    """``data_dir/spec.folder/file``, which must exist."""
    path = data_dir / spec.folder / file
    if not path.is_file():
        top = spec.folder.split("/")[0]
        raise BvrError(f"no such file: the data folder {data_dir} has no {spec.folder}/{file}", where=path,
                       hint=f"put {spec.name}'s files in {data_dir / spec.folder}/, or pass --data-dir (or set "
                            f"BVR_DATA_DIR to) a folder that holds {top}/")
    return path


__all__ = ["READERS", "FileFormat", "ReadResult", "check_classes", "read_task", "task_file"]
