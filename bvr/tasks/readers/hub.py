"""Read a task from its Hugging Face hub dataset (``spec.hub_id``), for when no data folder is given, into the
examples the file readers return: :class:`~bvr.tasks.readers.common.Example` for ``tsv`` and ``jsonl``,
:class:`~bvr.tasks.readers.conll.Sentence` for ``conll``, :class:`~bvr.tasks.readers.squad_json.SquadExample` for
``squad-json``.
"""

from __future__ import annotations

from typing import Any

from bvr.errors import BvrError
from bvr.tasks.readers.common import MAX_SKIPPED_SHARE, Example, ReadReport, check_skipped, data_hint
from bvr.tasks.readers.conll import Sentence
from bvr.tasks.readers.squad_json import SquadExample
from bvr.tasks.registry import TaskSpec


def load_hub(spec: TaskSpec, hub_split: str) -> Any:
    """The hub split as a ``datasets.Dataset``; any failure to reach it becomes a BvrError."""
    # Imported here: datasets is slow to import and only the no-data-folder path needs it.
    import datasets

    try:
        return datasets.load_dataset(spec.hub_id, spec.hub_config, split=hub_split)
    except (OSError, ValueError) as exc:  # ConnectionError (offline) and FileNotFoundError are OSErrors
        raise BvrError(f"no data folder was given and {spec.hub_id} ({spec.hub_config}) could not be loaded from the "
                       f"Hugging Face hub ({exc})", where=spec.name, hint=data_hint(spec)) from exc


def hub_sentences(spec: TaskSpec, hub_split: str) -> tuple[list[Example], ReadReport]:
    """The split as Examples from the hub dataset (rows without a label, id -1, are skipped and counted)."""
    rows = load_hub(spec, hub_split)
    text_fields = spec.hub_text_fields or spec.text_fields
    label_field = spec.hub_label_field or spec.label_field
    report = ReadReport(f"{spec.hub_id}/{spec.hub_config}:{hub_split}")
    examples: list[Example] = []
    for number, row in enumerate(rows, start=1):
        report.rows += 1
        label = row[label_field]
        if spec.label_names is not None and not 0 <= label < spec.num_labels:
            report.skip(f"label id {label} (unlabelled)", number)
            continue
        texts = [row[name] for name in text_fields]
        examples.append(Example(texts[0], texts[1] if len(texts) > 1 else None, label, number))
    report.read = len(examples)
    check_skipped(report, MAX_SKIPPED_SHARE, f"is {spec.hub_id} the dataset of task {spec.name!r}?")
    return examples, report


def hub_conll(spec: TaskSpec, hub_split: str) -> tuple[list[Sentence], str]:
    """The split as Sentences, tag ids mapped to the spec's label names; the report line counts them."""
    rows = load_hub(spec, hub_split)
    names = spec.label_names or ()
    sentences = [Sentence(list(row["tokens"]), [names[i] for i in row[spec.label_field]]) for row in rows]
    sentences = [sentence for sentence in sentences if sentence.tokens]  # the hub keeps -DOCSTART- rows as empty
    return sentences, f"{spec.hub_id}:{hub_split}: {len(sentences):,} sentences of {len(rows):,} rows"


def hub_squad(spec: TaskSpec, hub_split: str) -> tuple[list[SquadExample], str]:
    """The split as SquadExamples (no reference answer means impossible); the report line counts them."""
    rows = load_hub(spec, hub_split)
    examples = [SquadExample(row["id"], row["title"], row["context"], row["question"],
                             tuple(zip(row["answers"]["text"], row["answers"]["answer_start"], strict=True)),
                             is_impossible=not row["answers"]["text"]) for row in rows]
    return examples, f"{spec.hub_id}:{hub_split}: {len(examples):,} questions"
