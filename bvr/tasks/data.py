"""Fine-tuning data for every task kind: read the splits, cap them, encode them, and batch them with padding.

:func:`load_task_data` is the one entry point. It looks up two small registries by the task's kind:

- :data:`READERS`: read every split of the task from the data folder (or the Hugging Face hub when there is
  none) into examples and one report line per file (rows read and skipped), for the user to see;
- :data:`ENCODERS`: turn examples into features, one list per column: GLUE sentences and pairs with the
  tokenizer's own template (:func:`encode_sentences`), CoNLL sentences with :func:`~bvr.tasks.ner.encode_ner`,
  SQuAD questions as windows with :func:`~bvr.tasks.squad.encode_squad`.

Offline, SQuAD often has only its dev file. When a span task's training file is missing, the dev file is split by
article (:func:`~bvr.tasks.squad.split_by_article`) into a training part and an evaluation part, and the split's
description travels with the data (:attr:`TaskData.split_note`) so that every result can say what it was measured on.

``max_train_examples`` and ``max_eval_examples`` cap a split at a random subset drawn with ``subset_seed``, the same
for every fine-tuning seed and arm, kept in file order. Batches are padded to their longest row by :func:`collate`.
Training batches group examples of similar length (:class:`LengthGroupedSampler`, seeded, so a seed still gives
the same run) and evaluation runs longest first, so that little of a batch is padding.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer
from torch.utils.data import DataLoader, Dataset, Sampler

from bvr.config import DataSettings
from bvr.errors import BvrError
from bvr.tasks.glue import Example, load_task_split
from bvr.tasks.ner import IGNORE_INDEX, Sentence, encode_ner, read_conll
from bvr.tasks.registry import TaskSpec
from bvr.tasks.squad import SquadExample, encode_squad, read_squad, split_by_article

PAD_VALUES: dict[str, int | None] = {
    "input_ids": None,  # the tokenizer's padding id
    "attention_mask": 0,
    "token_type_ids": 0,
    "labels": IGNORE_INDEX,  # token labels (tagging): padding is never scored
}
"""How each list-valued column is padded; None: with the tokenizer's padding id."""

MODEL_COLUMNS: dict[str, tuple[str, ...]] = {
    "classification": ("input_ids", "token_type_ids", "labels"),
    "regression": ("input_ids", "token_type_ids", "labels"),
    "tagging": ("input_ids", "token_type_ids", "labels"),
    "span": ("input_ids", "token_type_ids", "start_positions", "end_positions"),
}
"""Feature columns each kind's batches carry (the attention mask is rebuilt from the lengths)."""


@dataclass
class SplitData:
    """One split, read and encoded.

    Attributes:
        name: the split's name ('train', 'dev', ...); metric keys start with it.
        examples: what the reader returned (:class:`Example`, :class:`Sentence` or :class:`SquadExample`), after
            any cap.
        features: encoded columns, one entry per feature (a window, for span tasks; else one per example).
    """

    name: str
    examples: list[Any]
    features: dict[str, list]

    def __len__(self) -> int:
        return len(self.features["input_ids"])


@dataclass
class TaskData:
    """A task's splits, encoded for one tokenizer, with what the user should see about them.

    Attributes:
        spec: the task.
        family: the tokenizer family ('bert' or 'roberta').
        pad_id: the tokenizer's padding id.
        train: the training split.
        evals: the evaluation splits, in the task's order.
        reports: one line per file read (rows read and skipped), then one per cap or truncation.
        split_note: how the training and evaluation parts were drawn from one file, or None.
    """

    spec: TaskSpec
    family: str
    pad_id: int
    train: SplitData
    evals: dict[str, SplitData]
    reports: list[str] = field(default_factory=list)
    split_note: str | None = None

    def train_labels(self) -> list[int | float]:
        """The training examples' labels (classification and regression), for the majority baseline."""
        return [example.label for example in self.train.examples]

    def loader(self, split: SplitData, batch_size: int, *, seed: int | None = None, num_workers: int = 0) -> DataLoader:
        """Batches of ``split``: shuffled by ``seed`` in groups of similar length when one is given (training), else
        longest first (evaluation, whose metrics do not depend on the order)."""
        columns = MODEL_COLUMNS[self.spec.kind]
        lengths = [len(ids) for ids in split.features["input_ids"]]
        if seed is not None:
            sampler: Sampler[int] | list[int] = LengthGroupedSampler(lengths, batch_size, seed)
        else:
            sampler = np.argsort([-n for n in lengths], kind="stable").tolist()
        return DataLoader(
            FeatureDataset(split.features, columns), batch_size=batch_size, sampler=sampler,
            num_workers=num_workers, collate_fn=partial(collate, pad_id=self.pad_id),
        )


class LengthGroupedSampler(Sampler[int]):
    """A seeded shuffle whose batches hold examples of similar length, so that padding to the longest costs little.

    Each epoch the examples are shuffled (by ``seed`` and the epoch), cut into groups of ``group`` batches, each
    group sorted by length (longest first) and cut into batches, and the batches of all groups shuffled again (a
    short last batch stays last; give the DataLoader the same ``batch_size``). Every example comes once per epoch;
    which examples share a batch stays random beyond their length; the same seed and epoch give the same order
    (Lightning calls :meth:`set_epoch` before each epoch).

    >>> order = list(LengthGroupedSampler([5, 1, 4, 2, 3, 6], batch_size=2, seed=0, group=3))
    >>> sorted(order)
    [0, 1, 2, 3, 4, 5]
    >>> order == list(LengthGroupedSampler([5, 1, 4, 2, 3, 6], batch_size=2, seed=0, group=3))
    True
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int, group: int = 50) -> None:
        self.lengths = np.asarray(lengths)
        self.batch_size, self.seed, self.group = batch_size, seed, group
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        order = rng.permutation(len(self.lengths))
        size = self.batch_size * self.group
        batches = []
        for start in range(0, len(order), size):
            chunk = order[start:start + size]
            chunk = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
            batches += [chunk[i:i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        # Only the last group can end in a short batch: it stays last, so that the DataLoader, which cuts this order
        # into consecutive runs of batch_size, cuts exactly these batches.
        short = [batches.pop()] if batches and len(batches[-1]) < self.batch_size else []
        for batch in [*(batches[i] for i in rng.permutation(len(batches))), *short]:
            yield from batch.tolist()


class FeatureDataset(Dataset):
    """Rows of column-wise features: ``{column: value}`` plus ``index``, the row's position in the split."""

    def __init__(self, features: Mapping[str, list], columns: Sequence[str]) -> None:
        missing = [column for column in columns if column not in features]
        if missing:
            raise ValueError(f"features lack the columns {missing}")
        self.features = features
        self.columns = tuple(columns)

    def __len__(self) -> int:
        return len(self.features[self.columns[0]])

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"index": index, **{column: self.features[column][index] for column in self.columns}}


def collate(rows: Sequence[Mapping[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    """Stack rows into tensors, padding list-valued columns to the longest row (see :data:`PAD_VALUES`).

    The attention mask is 1 over each row's tokens and 0 over its padding. Scalars (sequence labels, span
    positions, indices) are stacked as they are: ints as int64, floats (regression labels) as float32.

    >>> batch = collate([{"input_ids": [5, 6, 7], "labels": 1}, {"input_ids": [8], "labels": 0}], pad_id=0)
    >>> batch["input_ids"].tolist(), batch["attention_mask"].tolist(), batch["labels"].tolist()
    ([[5, 6, 7], [8, 0, 0]], [[1, 1, 1], [1, 0, 0]], [1, 0])
    """
    width = max(len(row["input_ids"]) for row in rows)
    batch = {"attention_mask": torch.tensor([[1] * len(row["input_ids"]) + [0] * (width - len(row["input_ids"]))
                                             for row in rows])}
    for key in rows[0]:
        values = [row[key] for row in rows]
        if isinstance(values[0], (list, tuple)):
            pad = PAD_VALUES.get(key)
            pad = pad_id if pad is None else pad
            batch[key] = torch.tensor([list(value) + [pad] * (width - len(value)) for value in values])
        else:
            batch[key] = torch.tensor(values, dtype=torch.float32 if isinstance(values[0], float) else torch.long)
    return batch


# ---------------------------------------------------------------------------------------------------------------
# Reading: split name -> (examples, report line), per task kind
# ---------------------------------------------------------------------------------------------------------------

RawSplits = dict[str, tuple[list[Any], str]]
"""Split name -> (examples, one line saying what was read)."""


@dataclass
class ReadResult:
    """Every split of a task as read, and how its parts were drawn when they share a file."""

    splits: RawSplits
    note: str | None = None


def _read_sentences(spec: TaskSpec, data_dir: Path | None, settings: DataSettings) -> ReadResult:
    """GLUE: each split from its TSV file (or the hub); the report counts skipped rows."""
    splits = {}
    for split in spec.splits:
        examples, report = load_task_split(spec, split.name, data_dir)
        splits[split.name] = (examples, report.summary())
    return ReadResult(splits)


def _read_conll_splits(spec: TaskSpec, data_dir: Path | None, settings: DataSettings) -> ReadResult:
    """CoNLL: each split from its column file (IOB1 converted to IOB2), or from the hub."""
    if data_dir is None:
        return ReadResult({split.name: _conll_from_hub(spec, split.hub_split) for split in spec.splits})
    splits = {}
    for split in spec.splits:
        sentences, report = read_conll(Path(data_dir) / spec.folder / split.file)
        splits[split.name] = (sentences, report.describe())
    return ReadResult(splits)


def _read_squad_splits(spec: TaskSpec, data_dir: Path | None, settings: DataSettings) -> ReadResult:
    """SQuAD: train and dev files; with no training file, two article-disjoint parts of the dev file."""
    if data_dir is None:
        return ReadResult({split.name: _squad_from_hub(spec, split.hub_split) for split in spec.splits})
    folder = Path(data_dir) / spec.folder
    train_split, eval_split = spec.splits[0], spec.splits[1]
    if (folder / train_split.file).is_file():
        splits = {}
        for split in spec.splits:
            examples, report = read_squad(folder / split.file)
            splits[split.name] = (examples, report.describe())
        return ReadResult(splits)
    examples, report = read_squad(folder / eval_split.file)
    train, evaluation, note = split_by_article(examples, settings.article_split_fraction, settings.article_split_seed)
    line = f"{report.describe()}; no {train_split.file}, so training and evaluation share it"
    return ReadResult({train_split.name: (train, line), eval_split.name: (evaluation, line)}, note)


def task_files(spec: TaskSpec, data_dir: Path | None) -> list[Path]:
    """The files the readers take ``spec``'s splits from in ``data_dir`` (some may be missing); none for the hub."""
    return [Path(data_dir) / spec.folder / split.file for split in spec.splits] if data_dir is not None else []


READERS: dict[str, Callable[[TaskSpec, Path | None, DataSettings], ReadResult]] = {
    "classification": _read_sentences,
    "regression": _read_sentences,
    "tagging": _read_conll_splits,
    "span": _read_squad_splits,
}
"""Task kind -> reader of all its splits."""


def _load_hub(spec: TaskSpec, hub_split: str) -> Any:
    """A hub split as a ``datasets.Dataset``; failing to reach the hub is a BvrError."""
    import datasets  # slow to import, and only needed without a data folder

    try:
        return datasets.load_dataset(spec.hub_id, spec.hub_config, split=hub_split)
    except (OSError, ValueError) as exc:
        raise BvrError(f"no data folder was given and {spec.hub_id} could not be loaded ({exc})", where=spec.name,
                       hint=f"pass --data-dir (or set BVR_DATA_DIR) to a folder holding {spec.folder}/") from exc


def _conll_from_hub(spec: TaskSpec, hub_split: str) -> tuple[list[Sentence], str]:
    rows = _load_hub(spec, hub_split)
    names = spec.label_names or ()
    sentences = [Sentence(list(row["tokens"]), [names[i] for i in row[spec.label_field]]) for row in rows]
    sentences = [sentence for sentence in sentences if sentence.tokens]  # the hub keeps -DOCSTART- rows as empty
    return sentences, f"{spec.hub_id}:{hub_split}: {len(sentences):,} sentences of {len(rows):,} rows"


def _squad_from_hub(spec: TaskSpec, hub_split: str) -> tuple[list[SquadExample], str]:
    rows = _load_hub(spec, hub_split)
    examples = [
        SquadExample(row["id"], row["title"], row["context"], row["question"],
                     tuple(zip(row["answers"]["text"], row["answers"]["answer_start"], strict=True)),
                     is_impossible=not row["answers"]["text"])
        for row in rows
    ]
    return examples, f"{spec.hub_id}:{hub_split}: {len(examples):,} questions"


# ---------------------------------------------------------------------------------------------------------------
# Encoding: examples -> feature columns, per task kind
# ---------------------------------------------------------------------------------------------------------------


def _truncating_copy(tokenizer: Tokenizer, max_length: int) -> Tokenizer:
    """A copy that truncates longest-first to ``max_length`` (specials included) and never pads."""
    copy = Tokenizer.from_str(tokenizer.to_str())  # a copy: truncation is tokenizer state
    copy.no_padding()
    copy.enable_truncation(max_length, strategy="longest_first")
    return copy


def encode_sentences(tokenizer: Tokenizer, examples: Sequence[Example], max_length: int) -> dict[str, list]:
    """Encode GLUE sentences or pairs with the tokenizer's own template (BERT ``[CLS] a [SEP] b [SEP]`` with token
    types 0 then 1; RoBERTa ``<s> a </s></s> b </s>``), cutting the longer text first to fit ``max_length``.

    Returns:
        ``input_ids``, ``token_type_ids``, ``labels`` (class ids or scores) and ``truncated`` (bool) per example.
    """
    truncating = _truncating_copy(tokenizer, max_length)
    inputs = [(ex.text_a, ex.text_b) if ex.text_b is not None else ex.text_a for ex in examples]
    encodings = truncating.encode_batch(inputs) if inputs else []
    return {
        "input_ids": [encoding.ids for encoding in encodings],
        "token_type_ids": [encoding.type_ids for encoding in encodings],
        "labels": [example.label for example in examples],
        "truncated": [bool(encoding.overflowing) for encoding in encodings],
    }


def _encode_glue(spec: TaskSpec, tokenizer: Tokenizer, family: str, examples: list, settings: DataSettings) -> dict:
    return encode_sentences(tokenizer, examples, settings.max_length)


def _encode_conll(spec: TaskSpec, tokenizer: Tokenizer, family: str, examples: list, settings: DataSettings) -> dict:
    label_to_id = {label: index for index, label in enumerate(spec.label_names or ())}
    return encode_ner(tokenizer, family, examples, label_to_id, settings.max_length)


def _encode_squad(spec: TaskSpec, tokenizer: Tokenizer, family: str, examples: list, settings: DataSettings) -> dict:
    return encode_squad(tokenizer, examples, max_length=settings.max_length, stride=settings.stride)


ENCODERS: dict[str, Callable[[TaskSpec, Tokenizer, str, list, DataSettings], dict[str, list]]] = {
    "classification": _encode_glue,
    "regression": _encode_glue,
    "tagging": _encode_conll,
    "span": _encode_squad,
}
"""Task kind -> encoder of one split's examples into feature columns."""


def _encoding_note(split: str, features: Mapping[str, list], max_length: int) -> str | None:
    """A line for the user when encoding lost something: truncated examples, or words cut off (tagging)."""
    if "truncated" in features and any(features["truncated"]):
        cut, total = sum(features["truncated"]), len(features["truncated"])
        return f"{split}: {cut:,} of {total:,} examples cut to {max_length} tokens"
    if "truncated_words" in features and sum(features["truncated_words"]):
        return f"{split}: {sum(features['truncated_words']):,} words beyond {max_length} tokens lost their label"
    return None


# ---------------------------------------------------------------------------------------------------------------
# Putting it together
# ---------------------------------------------------------------------------------------------------------------


def subset(examples: Sequence[Any], cap: int | None, seed: int) -> list[Any]:
    """At most ``cap`` examples, a random subset drawn with ``seed`` and kept in their original order.

    >>> subset(list("abcdef"), 3, seed=0) == subset(list("abcdef"), 3, seed=0)
    True
    >>> subset(list("abc"), None, seed=0)
    ['a', 'b', 'c']
    """
    if cap is None or len(examples) <= cap:
        return list(examples)
    chosen = sorted(random.Random(seed).sample(range(len(examples)), cap))
    return [examples[i] for i in chosen]


def _check_settings(settings: DataSettings) -> None:
    for key in ("max_train_examples", "max_eval_examples"):
        value = getattr(settings, key)
        if value is not None and value < 1:
            raise BvrError(f"must be at least 1, got {value}", where=key)


def _encode_split(
    spec: TaskSpec, name: str, examples: list, tokenizer: Tokenizer, family: str, settings: DataSettings,
    reports: list[str],
) -> SplitData:
    """Cap and encode one split, adding a line to ``reports`` for a cap or a truncation."""
    cap = settings.max_train_examples if name == spec.splits[0].name else settings.max_eval_examples
    kept = subset(examples, cap, settings.subset_seed)
    if len(kept) < len(examples):
        reports.append(f"{name}: a random {len(kept):,} of {len(examples):,} examples (seed {settings.subset_seed})")
    features = ENCODERS[spec.kind](spec, tokenizer, family, kept, settings)
    note = _encoding_note(name, features, settings.max_length)
    reports.extend([note] if note else [])
    return SplitData(name, kept, features)


def load_task_data(
    spec: TaskSpec, data_dir: Path | None, tokenizer: Tokenizer, family: str, pad_id: int, settings: DataSettings
) -> TaskData:
    """Read, cap and encode every split of ``spec`` for one tokenizer.

    Args:
        spec: the task.
        data_dir: the data folder (the task's files are under ``data_dir/spec.folder``); None reads the hub.
        tokenizer: the checkpoint's tokenizer (its own truncation and padding settings are left alone).
        family: 'bert' or 'roberta'.
        pad_id: the tokenizer's padding id.
        settings: lengths, caps and the fallback split.

    Returns:
        The encoded splits and the report lines to show.

    Raises:
        BvrError: a file is missing or malformed, a cap is below 1, or the hub cannot be reached without a data folder.
    """
    _check_settings(settings)
    read = READERS[spec.kind](spec, data_dir, settings)
    reports = list(dict.fromkeys(line for _, line in read.splits.values()))  # a shared file is reported once
    encoded = {
        name: _encode_split(spec, name, examples, tokenizer, family, settings, reports)
        for name, (examples, _) in read.splits.items()
    }
    train = encoded.pop(spec.splits[0].name)
    evals = {name: encoded[name] for name in spec.eval_splits}
    return TaskData(spec, family, pad_id, train, evals, reports, read.note)
