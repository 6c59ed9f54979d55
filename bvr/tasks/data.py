"""Fine-tuning data for every task: read the splits, cap them, encode them, and batch them (:func:`loader`).

:func:`load_task_data` reads every split with its format's reader (:func:`bvr.tasks.readers.read_task`: the data
folder, or the Hugging Face hub without one), one report line per file for the user to see. A grid's points then
hold training examples out of training as the split :data:`SELECTION` to be chosen on, and SQuAD v2.0 training
articles as :data:`HELDOUT` to choose the no-answer threshold on. ``max_train_examples`` and ``max_eval_examples``
cap a split at a random subset drawn with ``subset_seed`` (the same for every seed and arm), kept in file order; the
task's kind (:data:`bvr.tasks.kinds.KINDS`) encodes each split into feature columns.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer
from torch.utils.data import DataLoader, Sampler

from bvr.config import DataSettings
from bvr.errors import BvrError
from bvr.tasks.batching import FeatureDataset, LengthGroupedSampler, collate
from bvr.tasks.kinds import HELDOUT, KINDS, SELECTION
from bvr.tasks.readers import read_task
from bvr.tasks.readers.squad_json import split_by_article
from bvr.tasks.registry import TaskSpec
from bvr.tasks.splits import SplitData, TaskData


def loader(data: TaskData, split: SplitData, batch_size: int, *, seed: int | None = None,
           num_workers: int = 0) -> DataLoader:
    """Batches of ``split`` of ``data``: shuffled by ``seed`` in groups of similar length when one is given
    (training), else longest first (evaluation, whose metrics do not depend on the order)."""
    kind = KINDS[data.spec.kind]
    lengths = [len(ids) for ids in split.features["input_ids"]]
    sampler: Sampler[int] | list[int] = (LengthGroupedSampler(lengths, batch_size, seed) if seed is not None else
                                         np.argsort([-n for n in lengths], kind="stable").tolist())
    return DataLoader(FeatureDataset(split.features, kind.columns), batch_size=batch_size, sampler=sampler,
                      num_workers=num_workers,
                      collate_fn=partial(collate, pad_id=data.pad_id, pad_values=kind.pad_values))


def task_files(spec: TaskSpec, data_dir: Path | None) -> list[Path]:
    """The files the readers take ``spec``'s splits from in ``data_dir`` (some may be missing); none for the hub."""
    return [Path(data_dir) / spec.folder / split.file for split in spec.splits] if data_dir is not None else []


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


def _encode_split(spec: TaskSpec, name: str, examples: list, tokenizer: Tokenizer, family: str, settings: DataSettings,
                  reports: list[str]) -> SplitData:
    """Cap and encode one split, adding a line to ``reports`` for a cap or a truncation."""
    # The selection split's size is its own key (selection_examples); the evaluation cap is for reported splits.
    cap = (settings.max_train_examples if name == spec.splits[0].name else
           None if name == SELECTION else settings.max_eval_examples)
    kept = subset(examples, cap, settings.subset_seed)
    if len(kept) < len(examples):
        reports.append(f"{name}: a random {len(kept):,} of {len(examples):,} examples (seed {settings.subset_seed})")
    features = KINDS[spec.kind].encode(spec, tokenizer, family, kept, settings)
    if "truncated" in features and any(cut := features["truncated"]):
        reports.append(f"{name}: {sum(cut):,} of {len(cut):,} examples cut to {settings.max_length} tokens")
    elif "truncated_words" in features and (lost := sum(features["truncated_words"])):  # tagging: words cut off
        reports.append(f"{name}: {lost:,} words beyond {settings.max_length} tokens lost their label")
    return SplitData(name, kept, features)


def _select_out(spec: TaskSpec, splits: dict[str, tuple[list, str]], settings: DataSettings) -> str | None:
    """Move ``selection_examples`` training examples (at most ``selection_share`` of them; whole articles for span
    tasks) into a :data:`SELECTION` split of ``splits``, drawn with ``subset_seed``; the note to show, or None when
    nothing is held out (``selection_examples`` 0)."""
    if not settings.selection_examples:
        return None
    train_name = spec.splits[0].name
    examples, line = splits[train_name]
    wanted = min(settings.selection_examples, int(settings.selection_share * len(examples)))
    if wanted < 1 or (spec.kind == "span" and len({example.title for example in examples}) < 2):
        raise BvrError(f"the training split has {len(examples):,} examples, too few to hold some out to choose a "
                       "grid point on", where="finetune.selection_examples",
                       hint="fine-tune at one learning_rate and one epochs value (no grid), or give more data")
    if spec.kind == "span":  # by article, so that no paragraph is on both sides
        train, held, _ = split_by_article(examples, wanted / len(examples), settings.subset_seed)
    else:
        chosen = set(random.Random(f"selection {settings.subset_seed}").sample(range(len(examples)), wanted))
        train = [example for i, example in enumerate(examples) if i not in chosen]
        held = [example for i, example in enumerate(examples) if i in chosen]
    splits[train_name] = (train, line)
    splits[SELECTION] = (held, line)
    share = "" if wanted == settings.selection_examples else (
        f", at most {settings.selection_share:.0%} of a training split too small to spare "
        f"{settings.selection_examples:,}")
    return (f"grid point chosen on {len(held):,} training examples held out of training (selection_examples "
            f"{settings.selection_examples:,}{share}, seed {settings.subset_seed})")


def _hold_out(spec: TaskSpec, splits: dict[str, tuple[list, str]], settings: DataSettings) -> str | None:
    """Move ``null_threshold_heldout`` of the training articles of a SQuAD v2.0 task into a :data:`HELDOUT`
    split of ``splits``; the note to show, or None when nothing was held out (another task, v1.1, or a share of 0).
    """
    train_name = spec.splits[0].name
    examples, line = splits[train_name]
    if spec.kind != "span" or not settings.null_threshold_heldout or not any(e.is_impossible for e in examples):
        return None
    articles = len({example.title for example in examples})
    if articles < 2:
        raise BvrError(f"the training side has {articles} article(s), too few to hold some out",
                       where="finetune.null_threshold_heldout",
                       hint="set it to 0 (null_threshold is then used) or give a training file with more articles")
    train, heldout, _ = split_by_article(examples, settings.null_threshold_heldout, settings.article_split_seed)
    splits[train_name] = (train, line)
    splits[HELDOUT] = (heldout, line)
    titles = len({example.title for example in heldout})
    return (f"null threshold chosen on {len(heldout):,} questions of {titles} training article(s) held out of "
            f"training (null_threshold_heldout {settings.null_threshold_heldout}, seed {settings.article_split_seed})")


def load_task_data(spec: TaskSpec, data_dir: Path | None, tokenizer: Tokenizer, family: str, pad_id: int,
                   settings: DataSettings) -> TaskData:
    """Read, cap and encode every split of ``spec`` for one tokenizer (from ``data_dir/spec.folder``, or the hub
    when ``data_dir`` is None), with the report lines to show."""
    _check_settings(settings)
    read = read_task(spec, data_dir, settings)
    splits = dict(read.splits)
    selected = _select_out(spec, splits, settings)
    held_out = _hold_out(spec, splits, settings)
    reports = list(dict.fromkeys(line for _, line in splits.values()))  # a shared file is reported once
    encoded = {name: _encode_split(spec, name, examples, tokenizer, family, settings, reports)
               for name, (examples, _) in splits.items()}
    train = encoded.pop(spec.splits[0].name)
    evals = {name: encoded[name] for name in (*spec.eval_splits, *([HELDOUT] if held_out else []),
                                              *([SELECTION] if selected else []))}
    note = "; ".join(text for text in (read.note, held_out, selected) if text) or None
    return TaskData(spec, family, pad_id, train, evals, reports, note, settings)
