"""CoNLL-2003 named-entity recognition: the column-format reader, IOB schemes, sub-token labels and entity-level F1.

The pieces, in the order data flows through them:

- :func:`read_conll` reads ``token POS chunk NER`` lines into :class:`Sentence` s and a :class:`ConllReport`;
  IOB1 files are converted to IOB2 (:func:`detect_scheme`, :func:`to_iob2`).
- :func:`label_list` fixes the label order; :func:`encode_ner` tokenizes pre-split words for either tokenizer
  family and labels the first sub-token of each word (:func:`align_labels`).
- :func:`predictions_to_tags` and :func:`labels_to_tags` turn a model's output back into word tags;
  :func:`entity_f1` and the :class:`EntityF1` metric score them as seqeval does by default (conlleval chunking,
  micro-averaged over entities).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from tokenizers import Encoding, Tokenizer
from torchmetrics import Metric

from bvr.errors import BvrError
from bvr.model.losses import IGNORE_INDEX

OUTSIDE = "O"
DOCSTART = "-DOCSTART-"
CONLL_COLUMNS = 4
"""CoNLL-2003 English: token, part of speech, syntactic chunk, entity tag."""

_WORD_PREFIX = {"bert": "", "roberta": " "}
"""What each family's words need in front so that every word is encoded as a word start.

Byte-level BPE marks a word start by the space before it (``Ġ``); RoBERTa's ``add_prefix_space=True`` for pre-split
input gives every word, the first included, that space. WordPiece marks continuations instead and needs nothing.
"""

Entity = tuple[str, int, int]
"""(type, start, end): an entity over word positions ``start`` to ``end - 1``."""


class Sentence(NamedTuple):
    """One sentence of a CoNLL file.

    Attributes:
        tokens: the words, as written.
        tags: one entity tag per word (IOB2 after reading unless conversion was turned off).
        document: index of the ``-DOCSTART-`` document it belongs to (0 when the file has none).
    """

    tokens: list[str]
    tags: list[str]
    document: int = 0


@dataclass
class ConllReport:
    """What :func:`read_conll` read and what it skipped.

    Attributes:
        path: the file read.
        documents: ``-DOCSTART-`` lines.
        sentences: sentences kept (at least one token).
        tokens: tokens kept.
        bad_lines: 1-based numbers of lines with too few columns; they are skipped.
        scheme: the tagging scheme found in the file ("IOB2", "IOB1" or "mixed"; see :func:`detect_scheme`).
        converted: whether the tags were converted to IOB2.
    """

    path: str
    documents: int = 0
    sentences: int = 0
    tokens: int = 0
    bad_lines: list[int] = field(default_factory=list)
    scheme: str = "IOB2"
    converted: bool = False

    def describe(self) -> str:
        """One line for logs and the CLI."""
        text = (
            f"{self.path}: {self.documents:,} documents, {self.sentences:,} sentences, {self.tokens:,} tokens, "
            f"scheme {self.scheme}{' (converted to IOB2)' if self.converted else ''}"
        )
        if self.bad_lines:
            shown = ", ".join(map(str, self.bad_lines[:10])) + (", ..." if len(self.bad_lines) > 10 else "")
            text += f"; {len(self.bad_lines)} lines with too few columns skipped (lines {shown})"
        return text


# --- reading -------------------------------------------------------------------------------------------------


def _is_tag(tag: str) -> bool:
    return tag == OUTSIDE or (tag[:2] in ("B-", "I-") and len(tag) > 2)


def _split_tag(tag: str) -> tuple[str, str]:
    """("O", "") for outside, ("B", type) or ("I", type) otherwise."""
    if tag == OUTSIDE:
        return OUTSIDE, ""
    if not _is_tag(tag):
        raise ValueError(f"{tag!r} is not an IOB tag (O, B-TYPE or I-TYPE)")
    return tag[0], tag[2:]


class _SentenceBuilder:
    """Collects the token lines of one file into sentences, closing one at a blank or ``-DOCSTART-`` line."""

    def __init__(self, report: ConllReport) -> None:
        self.report = report
        self.sentences: list[Sentence] = []
        self.tokens: list[str] = []
        self.tags: list[str] = []

    def add(self, token: str, tag: str) -> None:
        self.tokens.append(token)
        self.tags.append(tag)

    def close(self) -> None:
        if self.tokens:
            document = max(self.report.documents - 1, 0)
            self.sentences.append(Sentence(self.tokens, self.tags, document))
            self.report.sentences += 1
            self.report.tokens += len(self.tokens)
        self.tokens, self.tags = [], []


def _read_line(line: str, number: int, path: Path, n_columns: int, builder: _SentenceBuilder) -> None:
    columns = line.split()
    if not columns:
        builder.close()
    elif columns[0] == DOCSTART:
        builder.close()
        builder.report.documents += 1
    elif len(columns) < n_columns:
        builder.report.bad_lines.append(number)
    elif len(columns) > n_columns:
        # More columns than the format has means a different format (or tokens with spaces): reading on would
        # take the wrong column as the tag, so stop.
        raise BvrError(
            f"{len(columns)} columns where {n_columns} were expected",
            where=f"{path}:{number}",
            hint="CoNLL-2003 lines are 'token POS chunk NER'; pass n_columns for other layouts",
        )
    elif not _is_tag(columns[-1]):
        raise BvrError(f"{columns[-1]!r} is not an IOB tag", where=f"{path}:{number}", hint="use O, B-TYPE or I-TYPE")
    else:
        builder.add(columns[0], columns[-1])


def read_conll(
    path: str | Path, *, n_columns: int = CONLL_COLUMNS, convert_to_iob2: bool = True
) -> tuple[list[Sentence], ConllReport]:
    """Read a CoNLL column file: one token per line, tag in the last column, blank lines between sentences.

    ``-DOCSTART-`` lines are skipped and counted as documents; the last sentence needs no trailing blank line.

    Args:
        path: the file (UTF-8).
        n_columns: columns per token line; lines with fewer are skipped and reported in
            :attr:`ConllReport.bad_lines`.
        convert_to_iob2: convert IOB1 (or mixed) tags to IOB2, the scheme models are trained on.

    Returns:
        The sentences and a report of the counts.

    Raises:
        BvrError: the file is missing, a line has more than ``n_columns`` columns, or a tag is not O, B-X or I-X
            (naming ``file:line``).
    """
    path = Path(path)
    if not path.is_file():
        raise BvrError("no such CoNLL file", where=path, hint="check the task's data paths")
    report = ConllReport(path=str(path))
    builder = _SentenceBuilder(report)
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            _read_line(line, number, path, n_columns, builder)
    builder.close()
    sentences = builder.sentences
    report.scheme = detect_scheme(sentence.tags for sentence in sentences)
    if convert_to_iob2 and report.scheme != "IOB2":
        sentences = [sentence._replace(tags=to_iob2(sentence.tags)) for sentence in sentences]
        report.converted = True
    return sentences, report


# --- tagging schemes -----------------------------------------------------------------------------------------


def _continues(previous: str, tag: str) -> bool:
    """Whether ``tag`` (B- or I-) follows a tag of its own entity type."""
    return previous != OUTSIDE and previous[2:] == tag[2:]


def detect_scheme(tag_sequences: Iterable[Sequence[str]]) -> str:
    """The IOB variant that tag sequences are written in.

    IOB2 opens every entity with B-. IOB1 opens entities with I- and uses B- only for an entity that directly
    follows another of the same type.

    Args:
        tag_sequences: sentences' tags.

    Returns:
        "IOB2" when no I- tag opens an entity (so also for text with no entities, where the two agree); "IOB1" when
        some I- tag opens an entity and every B- follows a tag of its type; "mixed" when both rules are broken.
    """
    opening_i = opening_b = False
    for tags in tag_sequences:
        previous = OUTSIDE
        for tag in tags:
            if tag.startswith("I-") and not _continues(previous, tag):
                opening_i = True
            elif tag.startswith("B-") and not _continues(previous, tag):
                opening_b = True
            previous = tag
    if not opening_i:
        return "IOB2"
    return "mixed" if opening_b else "IOB1"


def to_iob2(tags: Sequence[str]) -> list[str]:
    """Rewrite IOB1 tags as IOB2: an I- tag that opens an entity becomes B-.

    An I- tag opens an entity after O, at the start, or after a tag of another type (the conlleval rule), so the
    entities are unchanged; IOB2 input comes back as it was.

    >>> to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"])
    ['B-PER', 'I-PER', 'B-PER', 'O', 'B-LOC', 'B-ORG']

    Args:
        tags: one sentence's tags.

    Returns:
        The same entities in IOB2.
    """
    converted = []
    previous = OUTSIDE
    for tag in tags:
        opens = tag.startswith("I-") and not _continues(previous, tag)
        converted.append("B-" + tag[2:] if opens else tag)
        previous = tag
    return converted


def label_list(tag_sequences: Iterable[Sequence[str]], given: Sequence[str] | None = None) -> list[str]:
    """The label order: O first, then the other tags sorted; or ``given``, checked against the data.

    Args:
        tag_sequences: sentences' tags (usually the training split's).
        given: a label list to use as is, for example one stored with a checkpoint.

    Returns:
        Labels; a label's index is its id.

    Raises:
        BvrError: ``given`` lacks a tag that occurs in the data.
    """
    seen = set(itertools.chain.from_iterable(tag_sequences))
    if given is None:
        return [OUTSIDE, *sorted(seen - {OUTSIDE})]
    missing = sorted(seen - set(given))
    if missing:
        raise BvrError(f"tags {missing} are not in the label list {list(given)}", where="labels")
    return list(given)


def entity_types(labels: Iterable[str]) -> list[str]:
    """The entity types named by a label list, sorted (``["B-PER", "I-PER", "O"]`` -> ``["PER"]``)."""
    return sorted({label[2:] for label in labels if label != OUTSIDE})


# --- sub-token alignment -------------------------------------------------------------------------------------


def align_labels(word_ids: Sequence[int | None], word_labels: Sequence[int]) -> list[int]:
    """Label each word's first sub-token; every later sub-token and every special gets :data:`IGNORE_INDEX`.

    >>> align_labels([None, 0, 0, 1, None], [3, 5])
    [-100, 3, -100, 5, -100]

    Args:
        word_ids: per token, the index of the word it came from; None (or a negative index) for specials.
        word_labels: per word, its label id.

    Returns:
        Per token, a label id or :data:`IGNORE_INDEX`.
    """
    labels = []
    seen: set[int] = set()
    for word_id in word_ids:
        if word_id is None or word_id < 0 or word_id in seen:
            labels.append(IGNORE_INDEX)
        else:
            labels.append(word_labels[word_id])
            seen.add(word_id)
    return labels


def _word_prefix(family: str) -> str:
    if family not in _WORD_PREFIX:
        raise BvrError(f"unknown tokenizer family {family!r}", where="family", hint=f"use one of {list(_WORD_PREFIX)}")
    return _WORD_PREFIX[family]


def plain_tokenizer(tokenizer: Tokenizer) -> Tokenizer:
    """``tokenizer`` itself when it neither truncates nor pads, else a copy that does neither.

    Callers windowing or truncating on their own need the whole encoding; copying leaves the caller's settings alone.
    """
    if tokenizer.truncation is None and tokenizer.padding is None:
        return tokenizer
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def _truncated(tokenizer: Tokenizer, encoding: Encoding, max_length: int) -> Encoding:
    """``encoding`` (no specials yet) cut to fit ``max_length`` with the specials, which are then added."""
    budget = max_length - tokenizer.num_special_tokens_to_add(is_pair=False)
    encoding.truncate(budget)
    return tokenizer.post_process(encoding)


def _label_ids(tags: Sequence[str], label_to_id: Mapping[str, int]) -> list[int]:
    unknown = sorted(set(tags) - set(label_to_id))
    if unknown:
        raise BvrError(f"tags {unknown} are not in the label list", where="labels", hint="build it from all splits")
    return [label_to_id[tag] for tag in tags]


_NER_KEYS = (
    "input_ids",
    "attention_mask",
    "token_type_ids",
    "labels",
    "word_ids",
    "truncated_words",
    "untokenized_words",
)
"""The lists :func:`encode_ner` returns, one entry per sentence."""


def encode_ner(
    tokenizer: Tokenizer,
    family: str,
    sentences: Iterable[Sentence | tuple[list[str], list[str]]],
    label_to_id: Mapping[str, int],
    max_length: int,
) -> dict[str, list]:
    """Tokenize pre-split sentences and label the first sub-token of each word.

    Byte-level BPE words are encoded as `` word`` so every word, the first included, starts with the ``Ġ`` word-start
    marker, as RoBERTa's ``add_prefix_space=True`` does for pre-split input. Sequences longer than ``max_length`` are
    cut; the words that lose all their tokens are counted in ``truncated_words``, and words the tokenizer turns
    into no token at all (WordPiece drops some control and zero-width characters) in ``untokenized_words``. No
    padding: the collator pads.

    Args:
        tokenizer: a tokenizer of ``family``; its own truncation and padding settings are ignored.
        family: "bert" or "roberta".
        sentences: :class:`Sentence` s or (tokens, tags) pairs.
        label_to_id: tag -> label id.
        max_length: most tokens per sequence, specials included.

    Returns:
        Per sentence: ``input_ids``, ``attention_mask``, ``token_type_ids``, ``labels`` (first sub-tokens carry the
        word's id, the rest :data:`IGNORE_INDEX`), ``word_ids`` (None for specials), ``truncated_words`` and
        ``untokenized_words`` (counts).

    Raises:
        BvrError: the family is unknown, ``max_length`` leaves no room for a token, or a tag is not in
            ``label_to_id``.
    """
    prefix = _word_prefix(family)
    tokenizer = plain_tokenizer(tokenizer)
    if max_length <= tokenizer.num_special_tokens_to_add(is_pair=False):
        raise BvrError(f"max_length {max_length} leaves no room for a token", where="max_length")
    sentences = [(list(tokens), list(tags)) for tokens, tags, *_ in sentences]
    words = [[prefix + token for token in tokens] for tokens, _ in sentences]
    encodings = tokenizer.encode_batch(words, is_pretokenized=True, add_special_tokens=False) if words else []
    features: dict[str, list] = {key: [] for key in _NER_KEYS}
    for (tokens, tags), encoding in zip(sentences, encodings, strict=True):
        tokenized = {i for i in encoding.word_ids if i is not None}
        encoding = _truncated(tokenizer, encoding, max_length)
        kept = {i for i in encoding.word_ids if i is not None}
        features["input_ids"].append(encoding.ids)
        features["attention_mask"].append(encoding.attention_mask)
        features["token_type_ids"].append(encoding.type_ids)
        features["labels"].append(align_labels(encoding.word_ids, _label_ids(tags, label_to_id)))
        features["word_ids"].append(encoding.word_ids)
        features["truncated_words"].append(len(tokenized - kept))
        features["untokenized_words"].append(len(tokens) - len(tokenized))
    return features


def encoding_summary(features: Mapping[str, list]) -> dict[str, int]:
    """Totals of :func:`encode_ner`'s output: sentences, tokens and the words that lost their label."""
    return {
        "sentences": len(features["input_ids"]),
        "tokens": sum(map(len, features["input_ids"])),
        "truncated_words": sum(features["truncated_words"]),
        "untokenized_words": sum(features["untokenized_words"]),
    }


# --- model output back to tags -------------------------------------------------------------------------------


def _as_numpy(values: Any) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().numpy()
    return np.asarray(values)


def _tag_of(id_to_label: Sequence[str] | Mapping[int, str], label_id: int) -> str:
    return id_to_label[int(label_id)]


def labels_to_tags(labels: Any, id_to_label: Sequence[str] | Mapping[int, str]) -> list[list[str]]:
    """Gold word tags from a batch of aligned labels.

    Args:
        labels: (batch, seq) label ids with :data:`IGNORE_INDEX` on positions that are not a word's first sub-token.
        id_to_label: label id -> tag.

    Returns:
        Per row, the tags of its labelled positions in order.
    """
    rows = _as_numpy(labels)
    return [[_tag_of(id_to_label, label) for label in row[row != IGNORE_INDEX]] for row in rows]


def predictions_to_tags(
    logits: Any, labels_with_ignore: Any, id_to_label: Sequence[str] | Mapping[int, str]
) -> list[list[str]]:
    """Predicted word tags: the arg-max label at each word's first sub-token.

    Args:
        logits: (batch, seq, num_labels) scores.
        labels_with_ignore: (batch, seq) gold labels; positions holding :data:`IGNORE_INDEX` are skipped, so the
            predictions line up with :func:`labels_to_tags` of the same labels.
        id_to_label: label id -> tag.

    Returns:
        Per row, one predicted tag per labelled position.
    """
    predicted = _as_numpy(logits).argmax(axis=-1)  # (batch, seq)
    labels = _as_numpy(labels_with_ignore)
    return [
        [_tag_of(id_to_label, label) for label in row[gold != IGNORE_INDEX]]
        for row, gold in zip(predicted, labels, strict=True)
    ]


# --- entity-level scores -------------------------------------------------------------------------------------


def extract_entities(tags: Sequence[str]) -> set[Entity]:
    """The entities in one tag sequence, chunked as conlleval (and seqeval's default mode) does.

    B- always opens an entity; I- opens one after O, at the start, or after another type, and otherwise continues
    the open entity; an entity ends at O, at B-, or where the type changes.

    >>> sorted(extract_entities(["I-PER", "I-LOC", "O", "B-ORG", "B-ORG", "I-ORG"]))
    [('LOC', 1, 2), ('ORG', 3, 4), ('ORG', 4, 6), ('PER', 0, 1)]

    Args:
        tags: one sentence's tags (O, B-TYPE or I-TYPE).

    Returns:
        Entities as (type, start, end) with ``end`` exclusive.

    Raises:
        ValueError: a tag is not O, B-TYPE or I-TYPE.
    """
    entities: set[Entity] = set()
    current, start = None, 0
    for position, tag in enumerate(tags):
        prefix, kind = _split_tag(tag)
        if current is not None and (prefix != "I" or kind != current):
            entities.add((current, start, position))
            current = None
        if prefix == "B" or (prefix == "I" and current is None):
            current, start = kind, position
    if current is not None:
        entities.add((current, start, len(tags)))
    return entities


@dataclass
class EntityCounts:
    """Entity counts per type, from which every entity-level score follows.

    Attributes:
        true_positives: predicted entities that match a gold one in type, start and end.
        predicted: predicted entities.
        gold: gold entities.
    """

    true_positives: Counter[str] = field(default_factory=Counter)
    predicted: Counter[str] = field(default_factory=Counter)
    gold: Counter[str] = field(default_factory=Counter)

    def add(self, gold_tags: Sequence[str], predicted_tags: Sequence[str]) -> None:
        """Count one sentence."""
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(f"{len(gold_tags)} gold tags but {len(predicted_tags)} predicted tags")
        gold, predicted = extract_entities(gold_tags), extract_entities(predicted_tags)
        self.true_positives.update(kind for kind, _, _ in gold & predicted)
        self.predicted.update(kind for kind, _, _ in predicted)
        self.gold.update(kind for kind, _, _ in gold)


def count_entities(gold_sequences: Iterable[Sequence[str]], pred_sequences: Iterable[Sequence[str]]) -> EntityCounts:
    """Entity counts per type over sentence pairs (gold, predicted) of equal length."""
    counts = EntityCounts()
    for gold, predicted in zip(gold_sequences, pred_sequences, strict=True):
        counts.add(gold, predicted)
    return counts


def _scores(true_positives: int, predicted: int, gold: int) -> dict[str, float | int]:
    # 0 for an empty denominator, as seqeval's default; F1 from P and R in seqeval's order of operations, so the
    # floats agree to the last bit.
    precision = true_positives / predicted if predicted else 0.0
    recall = true_positives / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "support": gold, "predicted": predicted}


def scores_from_counts(counts: EntityCounts) -> dict[str, Any]:
    """Micro-averaged and per-type precision, recall and F1 from entity counts.

    Returns:
        ``precision``, ``recall``, ``f1``, ``support`` (gold entities) and ``predicted`` over all types, and
        ``per_type``: the same five per entity type seen in gold or predictions.
    """
    kinds = sorted(set(counts.gold) | set(counts.predicted))
    overall = _scores(sum(counts.true_positives.values()), sum(counts.predicted.values()), sum(counts.gold.values()))
    per_type = {kind: _scores(counts.true_positives[kind], counts.predicted[kind], counts.gold[kind]) for kind in kinds}
    return {**overall, "per_type": per_type}


def entity_f1(gold_sequences: Iterable[Sequence[str]], pred_sequences: Iterable[Sequence[str]]) -> dict[str, Any]:
    """Entity-level precision, recall and F1 as seqeval computes them by default.

    An entity counts as found only when type, start and end all match. Overall figures are micro averages: totals
    over all types, not a mean of per-type scores. A score is 0 when its denominator is.

    Args:
        gold_sequences: per sentence, gold tags.
        pred_sequences: per sentence, predicted tags, each as long as its gold sentence.

    Returns:
        See :func:`scores_from_counts`.
    """
    return scores_from_counts(count_entities(gold_sequences, pred_sequences))


class EntityF1(Metric):
    """Entity-level micro F1 (seqeval's default) accumulated over batches; equal to :func:`entity_f1` on all of them.

    The state is three count vectors over a fixed list of entity types, summed across processes.

    Args:
        types: the entity types that can occur (see :func:`entity_types`).
        **kwargs: passed to ``torchmetrics.Metric``.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    true_positives: torch.Tensor
    predicted: torch.Tensor
    gold: torch.Tensor

    def __init__(self, types: Sequence[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.types = list(types)
        for name in ("true_positives", "predicted", "gold"):
            self.add_state(name, default=torch.zeros(len(self.types), dtype=torch.long), dist_reduce_fx="sum")

    @classmethod
    def from_labels(cls, labels: Iterable[str], **kwargs: Any) -> EntityF1:
        """A metric over the entity types a label list names."""
        return cls(entity_types(labels), **kwargs)

    def _as_tensor(self, counter: Counter[str]) -> torch.Tensor:
        unknown = sorted(set(counter) - set(self.types))
        if unknown:
            raise ValueError(f"entity types {unknown} are not among the metric's types {self.types}")
        return torch.tensor([counter[kind] for kind in self.types], dtype=torch.long, device=self.gold.device)

    def update(self, gold_sequences: Iterable[Sequence[str]], pred_sequences: Iterable[Sequence[str]]) -> None:
        """Count the entities of a batch of sentences (gold and predicted tag lists)."""
        counts = count_entities(gold_sequences, pred_sequences)
        self.true_positives += self._as_tensor(counts.true_positives)
        self.predicted += self._as_tensor(counts.predicted)
        self.gold += self._as_tensor(counts.gold)

    def _counts(self) -> EntityCounts:
        def counter(values: torch.Tensor) -> Counter[str]:
            return Counter({kind: int(n) for kind, n in zip(self.types, values.tolist(), strict=True) if n})

        return EntityCounts(counter(self.true_positives), counter(self.predicted), counter(self.gold))

    def compute(self) -> torch.Tensor:
        """Overall (micro) entity F1, as a float64 scalar so it equals :func:`entity_f1`'s float exactly."""
        return torch.tensor(scores_from_counts(self._counts())["f1"], dtype=torch.float64)

    def report(self) -> dict[str, Any]:
        """Every figure :func:`entity_f1` gives (overall and per type), from the counts summed over processes."""
        with self.sync_context():
            return scores_from_counts(self._counts())
