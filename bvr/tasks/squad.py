"""SQuAD v1.1 and v2.0: the JSON reader, an article-level split, sliding windows, span decoding and the metrics.

The pieces, in the order data flows through them:

- :func:`read_squad` reads the official JSON into :class:`SquadExample` s and a :class:`SquadReport`;
  :func:`split_by_article` makes a train/eval split from one file with no article on both sides.
- :func:`encode_squad` puts the question first and the context second (each family's pair template), slides
  windows of ``max_length`` tokens over the context with ``stride`` tokens of overlap, maps every context token to
  its characters and marks the answer's start and end token in each window (the CLS index 0 where the answer is
  not wholly inside, and for impossible questions).
- :func:`decode_predictions` picks the best span over all windows of a question, and for v2.0 decides between
  that span and no answer; :func:`best_threshold` finds the no-answer threshold that scores best.
- :func:`squad_scores` and :class:`SquadMetric` compute exact match and F1 as the official evaluation scripts do.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Encoding, Tokenizer
from torchmetrics import Metric

from bvr.errors import BvrError

CLS_INDEX = 0
"""Where both families put [CLS] / <s>; a window without the answer points its start and end here."""

MAX_LENGTH = 384
DOC_STRIDE = 128
MAX_QUESTION_LENGTH = 64
"""Question tokens kept, as in BERT's run_squad.py, so a long question cannot crowd the context out of a window."""
N_BEST = 20
MAX_ANSWER_LENGTH = 30
VERSIONS = ("1.1", "2.0")

Offsets = list[tuple[int, int] | None]
"""Per token, the (start, end) characters of the context it covers; None for question and special tokens."""


@dataclass(frozen=True)
class SquadExample:
    """One question.

    Attributes:
        id: the question id.
        title: the article's title.
        context: the paragraph.
        question: the question text.
        answers: reference answers as (text, answer_start); empty for an impossible question.
        is_impossible: v2.0's flag: the paragraph does not answer the question.
    """

    id: str
    title: str
    context: str
    question: str
    answers: tuple[tuple[str, int], ...]
    is_impossible: bool = False

    @property
    def answer_texts(self) -> list[str]:
        """The reference texts the metrics compare with; empty means no answer."""
        return [text for text, _ in self.answers]


@dataclass
class SquadReport:
    """What :func:`read_squad` read.

    Attributes:
        path: the file read.
        version: "1.1" or "2.0".
        articles: articles (titles).
        paragraphs: paragraphs (contexts).
        questions: questions.
        answerable: questions with reference answers.
        impossible: v2.0 questions marked ``is_impossible``.
        reference_answers: reference answers over all questions.
        answers_per_question: how many questions have each number of reference answers.
        answer_mismatches: answers whose text differs from the context at ``answer_start``; kept as they are.
    """

    path: str
    version: str = "1.1"
    articles: int = 0
    paragraphs: int = 0
    questions: int = 0
    answerable: int = 0
    impossible: int = 0
    reference_answers: int = 0
    answers_per_question: dict[int, int] = field(default_factory=dict)
    answer_mismatches: int = 0

    def describe(self) -> str:
        """One line for logs and the CLI."""
        spread = ", ".join(f"{n}: {count:,}" for n, count in sorted(self.answers_per_question.items()))
        return (
            f"{self.path}: SQuAD v{self.version}, {self.articles:,} articles, {self.paragraphs:,} paragraphs, "
            f"{self.questions:,} questions ({self.answerable:,} answerable, {self.impossible:,} impossible), "
            f"{self.reference_answers:,} reference answers (questions by answer count {{{spread}}}), "
            f"{self.answer_mismatches:,} answers not found at their answer_start"
        )


# --- reading -------------------------------------------------------------------------------------------------

_FORMAT_HINT = "is this the official SQuAD JSON?"


def _field(record: Any, key: str, kind: type | tuple[type, ...], where: str, what: str = "") -> Any:
    """``record[key]``, refused unless the record is an object holding a value of ``kind`` there."""
    if not isinstance(record, dict) or key not in record:
        raise BvrError(f"{what}missing {key!r}", where=where, hint=_FORMAT_HINT)
    value = record[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise BvrError(f"{what}{key!r} is a {type(value).__name__}", where=where, hint=_FORMAT_HINT)
    return value


def _load_json(path: Path) -> dict:
    if not path.is_file():
        raise BvrError("no such SQuAD file", where=path, hint="check the task's data paths")
    try:
        with path.open(encoding="utf-8") as file:
            content = json.load(file)
    except json.JSONDecodeError as err:
        raise BvrError(f"not valid JSON ({err.msg})", where=f"{path}:{err.lineno}") from err
    if not isinstance(content, dict):
        raise BvrError("the top level is not an object", where=path, hint=_FORMAT_HINT)
    return content


def _read_answers(qa: dict, context: str, where: str, what: str, report: SquadReport) -> tuple[tuple[str, int], ...]:
    answers = []
    for n, answer in enumerate(_field(qa, "answers", list, where, what)):
        text = _field(answer, "text", str, f"{where}.answers[{n}]", what)
        start = _field(answer, "answer_start", int, f"{where}.answers[{n}]", what)
        if not text or start < 0 or start + len(text) > len(context):
            raise BvrError(
                f"{what}answer {text!r} at {start} does not fit the context of {len(context)} characters",
                where=f"{where}.answers[{n}]",
            )
        # Some SQuAD releases hold answers that differ from the context by a character; they stay, and are counted.
        report.answer_mismatches += context[start : start + len(text)] != text
        answers.append((text, start))
    return tuple(answers)


def _read_question(qa: Any, title: str, context: str, where: str, report: SquadReport) -> SquadExample:
    qid = _field(qa, "id", str, where)
    what = f"question {qid!r}: "
    question = _field(qa, "question", str, where, what)
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool):
        raise BvrError(f"{what}'is_impossible' is a {type(impossible).__name__}", where=where)
    answers = _read_answers(qa, context, where, what, report)
    if impossible and answers:
        raise BvrError(f"{what}marked is_impossible but has answers", where=where, hint="v2.0 keeps those apart")
    if not impossible and not answers:
        raise BvrError(f"{what}no answers and not marked is_impossible", where=where)
    return SquadExample(qid, title, context, question, answers, impossible)


def _count(report: SquadReport, example: SquadExample) -> None:
    report.questions += 1
    report.impossible += example.is_impossible
    report.answerable += not example.is_impossible
    report.reference_answers += len(example.answers)
    report.answers_per_question[len(example.answers)] = report.answers_per_question.get(len(example.answers), 0) + 1


def _read_article(article: Any, where: str, report: SquadReport) -> list[SquadExample]:
    title = _field(article, "title", str, where)
    examples = []
    for j, paragraph in enumerate(_field(article, "paragraphs", list, where)):
        place = f"{where}.paragraphs[{j}]"
        context = _field(paragraph, "context", str, place)
        for k, qa in enumerate(_field(paragraph, "qas", list, place)):
            example = _read_question(qa, title, context, f"{place}.qas[{k}]", report)
            _count(report, example)
            examples.append(example)
        report.paragraphs += 1
    report.articles += 1
    return examples


def _version(declared: Any, examples: Iterable[SquadExample]) -> str:
    # v2.0 files say "v2.0"; a file without the field is v2.0 when it holds impossible questions.
    if str(declared).lstrip("v").startswith("2") or any(example.is_impossible for example in examples):
        return "2.0"
    return "1.1"


def read_squad(path: str | Path) -> tuple[list[SquadExample], SquadReport]:
    """Read a SQuAD v1.1 or v2.0 file in the official JSON layout.

    Args:
        path: the file, ``{"version": ..., "data": [{"title", "paragraphs": [{"context", "qas": [...]}]}]}``.

    Returns:
        The questions in file order, and a report of the counts.

    Raises:
        BvrError: the file is missing or not JSON, a field is missing or of the wrong type, an answer does not fit
            its context, an answerable question has no answers (or an impossible one has some), or a question id
            repeats; the message names the question id and the JSON path (``data[3].paragraphs[0].qas[7]``).
    """
    path = Path(path)
    content = _load_json(path)
    report = SquadReport(path=str(path))
    examples: list[SquadExample] = []
    for i, article in enumerate(_field(content, "data", list, str(path))):
        examples.extend(_read_article(article, f"{path}:data[{i}]", report))
    repeated = [qid for qid, n in Counter(example.id for example in examples).items() if n > 1]
    if repeated:
        raise BvrError(f"question ids {repeated[:5]} occur more than once", where=path)
    report.version = _version(content.get("version"), examples)
    return examples, report


def references(examples: Iterable[SquadExample]) -> dict[str, list[str]]:
    """Question id -> reference answer texts (empty for no answer), as the metrics take them."""
    return {example.id: example.answer_texts for example in examples}


# --- article split -------------------------------------------------------------------------------------------


def _article_rank(title: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}\x00{title}".encode()).hexdigest()


def _side(titles: Sequence[str], examples: Sequence[SquadExample]) -> str:
    questions = sum(example.title in set(titles) for example in examples)
    return f"{len(titles)} articles, {questions:,} questions ({', '.join(titles)})"


def split_by_article(
    examples: Sequence[SquadExample], fraction: float, seed: int
) -> tuple[list[SquadExample], list[SquadExample], str]:
    """Split one file's questions into train and eval by article, so no paragraph is seen on both sides.

    Articles are ranked by a hash of (seed, title) and the first ``round(fraction * articles)`` (at least one, and
    never all) go to eval; the split depends only on the titles and the seed, not on file order.

    Args:
        examples: questions of several articles.
        fraction: share of the articles that goes to eval, strictly between 0 and 1.
        seed: changes the hash and so the split.

    Returns:
        Train questions, eval questions (each in file order), and a description naming the articles and the
        number of questions on each side, to be shown with every result measured on the split.

    Raises:
        BvrError: ``fraction`` is not between 0 and 1, or there are fewer than two articles.
    """
    if not 0 < fraction < 1:
        raise BvrError(f"fraction {fraction} is not between 0 and 1", where="fraction")
    titles = list(dict.fromkeys(example.title for example in examples))
    if len(titles) < 2:
        raise BvrError(f"{len(titles)} article(s) cannot be split by article", where="examples")
    n_eval = min(len(titles) - 1, max(1, round(fraction * len(titles))))
    chosen = set(sorted(titles, key=lambda title: _article_rank(title, seed))[:n_eval])
    train = [example for example in examples if example.title not in chosen]
    evaluation = [example for example in examples if example.title in chosen]
    description = (
        f"SQuAD split by article (seed {seed}, eval fraction {fraction}): "
        f"eval {_side([t for t in titles if t in chosen], evaluation)}; "
        f"train {_side([t for t in titles if t not in chosen], train)}"
    )
    return train, evaluation, description


# --- windows -------------------------------------------------------------------------------------------------


def _trim(context: str, start: int, end: int) -> tuple[int, int]:
    """A character span without the whitespace at its ends (byte-level tokens carry the space before a word)."""
    while start < end and context[start].isspace():
        start += 1
    while end > start and context[end - 1].isspace():
        end -= 1
    return start, end


def context_offsets(encoding: Encoding, context: str) -> Offsets:
    """Per token of a (question, context) window, the context characters it covers, trimmed of whitespace."""
    return [
        _trim(context, *offset) if sequence == 1 else None
        for offset, sequence in zip(encoding.offsets, encoding.sequence_ids, strict=True)
    ]


def answer_positions(offsets: Offsets, start_char: int, end_char: int) -> tuple[int, int]:
    """The window's first and last token of the answer at characters ``[start_char, end_char)``.

    Args:
        offsets: the window's :func:`context_offsets`.
        start_char: the answer's first character in the context.
        end_char: one past its last character.

    Returns:
        (start token, end token), or (:data:`CLS_INDEX`, :data:`CLS_INDEX`) when the window does not hold the whole
        answer.
    """
    tokens = [i for i, offset in enumerate(offsets) if offset is not None and offset[1] > offset[0]]
    if not tokens or offsets[tokens[0]][0] > start_char or offsets[tokens[-1]][1] < end_char:
        return CLS_INDEX, CLS_INDEX
    start = next(i for i in tokens if offsets[i][1] > start_char)
    end = next(i for i in reversed(tokens) if offsets[i][0] < end_char)
    return start, end


def _plain_copy(tokenizer: Tokenizer) -> Tokenizer:
    # A copy: truncation is tokenizer state, and the caller's tokenizer should come back as it was.
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_padding()
    copy.no_truncation()
    return copy


def _check_window_args(tokenizer: Tokenizer, max_length: int, stride: int, max_question_length: int) -> None:
    room = max_length - tokenizer.num_special_tokens_to_add(is_pair=True) - max_question_length
    if stride < 0 or room <= stride:
        raise BvrError(
            f"max_length {max_length} leaves {room} context tokens per window, not more than the stride {stride}",
            where="max_length",
            hint="raise max_length or lower the stride or max_question_length",
        )


def _cut_questions(
    tokenizer: Tokenizer, questions: list[str], max_question_length: int
) -> tuple[list[str], list[bool]]:
    """Questions cut after their first ``max_question_length`` tokens, and which were cut."""
    encodings = tokenizer.encode_batch(questions, add_special_tokens=False) if questions else []
    cut, was_cut = [], []
    for question, encoding in zip(questions, encodings, strict=True):
        too_long = len(encoding.ids) > max_question_length
        cut.append(question[: encoding.offsets[max_question_length - 1][1]] if too_long else question)
        was_cut.append(too_long)
    return cut, was_cut


def _labelled_span(example: SquadExample, offsets: Offsets) -> tuple[int, int]:
    if example.is_impossible or not example.answers:
        return CLS_INDEX, CLS_INDEX
    text, start = example.answers[0]  # training uses the first reference answer
    return answer_positions(offsets, *_trim(example.context, start, start + len(text)))


_SQUAD_KEYS = (
    "input_ids",
    "attention_mask",
    "token_type_ids",
    "example_index",
    "example_id",
    "offsets",
    "start_positions",
    "end_positions",
    "question_truncated",
)
"""The lists :func:`encode_squad` returns, one entry per window."""


def _add_window(features: dict[str, list], index: int, example: SquadExample, window: Encoding, cut: bool) -> None:
    offsets = context_offsets(window, example.context)
    start, end = _labelled_span(example, offsets)
    features["input_ids"].append(window.ids)
    features["attention_mask"].append(window.attention_mask)
    features["token_type_ids"].append(window.type_ids)
    features["example_index"].append(index)
    features["example_id"].append(example.id)
    features["offsets"].append(offsets)
    features["start_positions"].append(start)
    features["end_positions"].append(end)
    features["question_truncated"].append(cut)


def encode_squad(
    tokenizer: Tokenizer,
    examples: Sequence[SquadExample],
    *,
    max_length: int = MAX_LENGTH,
    stride: int = DOC_STRIDE,
    max_question_length: int = MAX_QUESTION_LENGTH,
) -> dict[str, list]:
    """Windows of (question, context) token pairs over each example's context, for training and evaluation alike.

    The question comes first, whitespace at its start removed and cut to ``max_question_length`` tokens; the
    context fills the rest of each window, consecutive windows sharing ``stride`` tokens, so every answer shorter
    than the overlap lies whole in some window. The family's pair template adds the specials (BERT:
    ``[CLS] q [SEP] c [SEP]``, token types 0 then 1; RoBERTa: ``<s> q </s></s> c </s>``). Works for both
    families: byte-level offsets that start at the space before a word are trimmed to the word.

    Args:
        tokenizer: a trained tokenizer with its family's post-processor; its own truncation and padding are ignored.
        examples: the questions.
        max_length: tokens per window, specials included.
        stride: tokens shared by consecutive windows (SQuAD's "document stride" of 128).
        max_question_length: question tokens kept.

    Returns:
        Per window: ``input_ids``, ``attention_mask``, ``token_type_ids``, ``example_index`` (into ``examples``),
        ``example_id``, ``offsets`` (:data:`Offsets`), ``start_positions`` and ``end_positions`` (the first
        reference answer's tokens, or :data:`CLS_INDEX` for both when the window lacks the whole answer or the
        question is impossible) and ``question_truncated``. No padding: the collator pads.

    Raises:
        BvrError: the window leaves no more context tokens than the stride.
    """
    _check_window_args(tokenizer, max_length, stride, max_question_length)
    windowed = _plain_copy(tokenizer)
    questions = [example.question.lstrip() for example in examples]
    questions, cut = _cut_questions(windowed, questions, max_question_length)
    windowed.enable_truncation(max_length, stride=stride, strategy="only_second")
    pairs = [(question, example.context) for question, example in zip(questions, examples, strict=True)]
    encodings = windowed.encode_batch(pairs) if pairs else []
    features: dict[str, list] = {key: [] for key in _SQUAD_KEYS}
    for index, (example, encoding) in enumerate(zip(examples, encodings, strict=True)):
        for window in [encoding, *encoding.overflowing]:
            _add_window(features, index, example, window, cut[index])
    return features


def encoding_summary(features: Mapping[str, list]) -> dict[str, int]:
    """Totals of :func:`encode_squad`'s output: windows, questions, cut questions and windows holding an answer."""
    return {
        "windows": len(features["input_ids"]),
        "questions": len(set(features["example_index"])),
        "questions_truncated": len(
            {index for index, cut in zip(features["example_index"], features["question_truncated"], strict=True) if cut}
        ),
        "windows_with_answer": sum(start != CLS_INDEX for start in features["start_positions"]),
    }


# --- decoding ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A candidate answer span.

    Attributes:
        text: the context characters it covers.
        start_char: its first character in the context.
        end_char: one past its last character.
        score: start_logit + end_logit.
        start_logit: the start token's logit.
        end_logit: the end token's logit.
    """

    text: str
    start_char: int
    end_char: int
    score: float
    start_logit: float
    end_logit: float


def _top(logits: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-logits, kind="stable")[:k]


def window_candidates(
    start_logits: Any,
    end_logits: Any,
    offsets: Offsets,
    context: str,
    *,
    n_best: int = N_BEST,
    max_answer_length: int = MAX_ANSWER_LENGTH,
) -> list[Candidate]:
    """Valid spans among the top ``n_best`` start tokens times the top ``n_best`` end tokens of one window.

    A span is valid when both ends are context tokens, end >= start and it is at most ``max_answer_length`` tokens.

    Args:
        start_logits: (seq,) start scores; may be longer than ``offsets`` (padding), which is ignored.
        end_logits: (seq,) end scores.
        offsets: the window's :data:`Offsets`.
        context: the example's context.
        n_best: starts and ends considered.
        max_answer_length: longest span in tokens.

    Returns:
        The valid candidates, unsorted.
    """
    starts = np.asarray(start_logits, dtype=np.float64)[: len(offsets)]
    ends = np.asarray(end_logits, dtype=np.float64)[: len(offsets)]
    candidates = []
    for start in _top(starts, n_best):
        for end in _top(ends, n_best):
            if offsets[start] is None or offsets[end] is None or end < start or end - start + 1 > max_answer_length:
                continue
            first, last = offsets[start][0], offsets[end][1]
            start_logit, end_logit = float(starts[start]), float(ends[end])
            candidates.append(
                Candidate(context[first:last], first, last, start_logit + end_logit, start_logit, end_logit)
            )
    return candidates


def null_score(start_logits: Any, end_logits: Any) -> float:
    """A window's score for "no answer": start and end logits at the CLS token."""
    return float(np.float64(start_logits[CLS_INDEX]) + np.float64(end_logits[CLS_INDEX]))


@dataclass
class SquadPredictions:
    """Decoded answers for a set of questions.

    Attributes:
        predictions: question id -> the answer given ("" for no answer under v2.0).
        best_spans: question id -> the best non-empty span's text ("" when no window had a valid span).
        null_diffs: question id -> null score minus the best span's score (``inf`` when there is no span); v2.0
            answers "" when this exceeds the threshold.
        candidates: question id -> the ``n_best`` best spans over all windows, best first.
    """

    predictions: dict[str, str] = field(default_factory=dict)
    best_spans: dict[str, str] = field(default_factory=dict)
    null_diffs: dict[str, float] = field(default_factory=dict)
    candidates: dict[str, list[Candidate]] = field(default_factory=dict)


def _windows_by_example(features: Mapping[str, list]) -> dict[int, list[int]]:
    windows: dict[int, list[int]] = {}
    for window, index in enumerate(features["example_index"]):
        windows.setdefault(index, []).append(window)
    return windows


def _best_candidates(
    windows: Sequence[tuple[Any, Any, Offsets]], context: str, n_best: int, max_answer_length: int
) -> list[Candidate]:
    """The ``n_best`` best spans over all windows of one question, best first (ties keep window order)."""
    candidates = [
        candidate
        for starts, ends, offsets in windows
        for candidate in window_candidates(
            starts, ends, offsets, context, n_best=n_best, max_answer_length=max_answer_length
        )
    ]
    return sorted(candidates, key=lambda candidate: -candidate.score)[:n_best]


def decode_predictions(
    examples: Sequence[SquadExample],
    features: Mapping[str, list],
    start_logits: Sequence[Any],
    end_logits: Sequence[Any],
    *,
    version_2: bool = False,
    threshold: float = 0.0,
    n_best: int = N_BEST,
    max_answer_length: int = MAX_ANSWER_LENGTH,
) -> SquadPredictions:
    """The answer to each question from its windows' start and end logits.

    The best span over all windows maximises start_logit + end_logit (see :func:`window_candidates`). Under v2.0
    the null score is the smallest CLS score over the question's windows, and the answer is "" when
    ``null score - best span score > threshold``.

    Args:
        examples: the questions ``features`` were made from.
        features: :func:`encode_squad`'s output (``example_index`` and ``offsets`` are used).
        start_logits: per window, (seq,) start scores (rows of a padded array will do).
        end_logits: per window, (seq,) end scores.
        version_2: allow "no answer".
        threshold: the null-score margin above which v2.0 answers "".
        n_best: candidates kept per question, and starts and ends tried per window.
        max_answer_length: longest span in tokens.

    Returns:
        The predictions, best spans, null-score differences and candidates per question id.
    """
    decoded = SquadPredictions()
    for index, windows in _windows_by_example(features).items():
        example = examples[index]
        logits = [(start_logits[w], end_logits[w], features["offsets"][w]) for w in windows]
        candidates = _best_candidates(logits, example.context, n_best, max_answer_length)
        best = candidates[0] if candidates else None
        null = min(null_score(starts, ends) for starts, ends, _ in logits)
        diff = null - best.score if best else math.inf
        decoded.candidates[example.id] = candidates
        decoded.best_spans[example.id] = best.text if best else ""
        decoded.null_diffs[example.id] = diff
        no_answer = best is None or (version_2 and diff > threshold)
        decoded.predictions[example.id] = "" if no_answer else best.text
    return decoded


# --- metrics -------------------------------------------------------------------------------------------------

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", flags=re.UNICODE)


def normalize_answer(text: str) -> str:
    """The official scripts' normalisation: lower case, no ASCII punctuation, no articles, single spaces.

    The steps run in that order, so "The." loses its full stop before "the" is recognised as an article.

    >>> normalize_answer("  The Denver-Broncos,  an NFL team! ")
    'denverbroncos nfl team'
    """
    lowered = text.lower()
    unpunctuated = "".join(char for char in lowered if char not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", unpunctuated).split())


def _check_version(version: str) -> str:
    if version not in VERSIONS:
        raise BvrError(f"unknown SQuAD version {version!r}", where="version", hint=f"use one of {list(VERSIONS)}")
    return version


def _gold(references: Sequence[str], version: str) -> list[str]:
    """The references a prediction is compared with."""
    if version == "1.1":
        if not references:
            raise ValueError("SQuAD v1.1 questions all have reference answers")
        return list(references)
    # v2.0 drops references that normalise to nothing; a question left with none expects the empty answer.
    return [text for text in references if normalize_answer(text)] or [""]


def _token_f1(prediction: str, reference: str, version: str) -> float:
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(reference).split()
    if version == "2.0" and (not predicted or not gold):
        return float(predicted == gold)  # no answer matches only no answer
    shared = sum((Counter(predicted) & Counter(gold)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(gold)
    return (2 * precision * recall) / (precision + recall)


def exact_match(prediction: str, references: Sequence[str], version: str = "2.0") -> float:
    """1.0 when the normalised prediction equals a normalised reference, else 0.0.

    Args:
        prediction: the answer given ("" for no answer).
        references: reference texts; empty means the question has no answer (v2.0 only).
        version: "1.1" or "2.0"; they differ only on references that normalise to nothing.
    """
    normal = normalize_answer(prediction)
    return float(any(normal == normalize_answer(text) for text in _gold(references, _check_version(version))))


def token_f1(prediction: str, references: Sequence[str], version: str = "2.0") -> float:
    """The best bag-of-tokens F1 between the normalised prediction and a normalised reference.

    Under v2.0 an empty prediction or reference scores 1.0 only against an empty counterpart; under v1.1 it
    scores 0.0, as in that script.

    Args:
        prediction: the answer given ("" for no answer).
        references: reference texts; empty means the question has no answer (v2.0 only).
        version: "1.1" or "2.0".
    """
    return max(_token_f1(prediction, text, version) for text in _gold(references, _check_version(version)))


@dataclass
class ScoreSums:
    """Sums of per-question scores, from which the reported percentages follow.

    Attributes:
        exact: sum of exact-match scores, overall, over answerable and over no-answer questions.
        f1: sum of F1 scores, likewise.
        total: questions counted, likewise.
        missing: questions with no prediction (scored 0 under v1.1; left out under v2.0, as in each script).
    """

    exact: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    f1: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    total: list[int] = field(default_factory=lambda: [0, 0, 0])
    missing: int = 0


_GROUPS = ("", "HasAns_", "NoAns_")


def score_sums(
    predictions: Mapping[str, str], references: Mapping[str, Sequence[str]], version: str = "1.1"
) -> ScoreSums:
    """Add up exact match and F1 over the questions in ``references``."""
    _check_version(version)
    sums = ScoreSums()
    for qid, gold in references.items():
        if qid in predictions:
            scores = (exact_match(predictions[qid], gold, version), token_f1(predictions[qid], gold, version))
        else:
            sums.missing += 1
            if version == "2.0":
                continue  # the v2.0 script leaves unanswered questions out of every total
            scores = (0.0, 0.0)  # the v1.1 script scores them 0
        for group in (0, 1 if gold else 2):
            sums.exact[group] += scores[0]
            sums.f1[group] += scores[1]
            sums.total[group] += 1
    return sums


def summarise(sums: ScoreSums, version: str = "1.1") -> dict[str, float]:
    """Percentages from score sums, keyed as the v2.0 script keys them.

    Returns:
        ``exact``, ``f1``, ``total`` and ``missing``; under v2.0 also ``HasAns_exact``, ``HasAns_f1``,
        ``HasAns_total`` and the ``NoAns_`` three, each group only when it has questions (as in the script).
    """
    result: dict[str, float] = {}
    groups = _GROUPS if version == "2.0" else _GROUPS[:1]
    for group, prefix in enumerate(groups):
        if prefix and not sums.total[group]:
            continue
        total = sums.total[group]
        result[f"{prefix}exact"] = 100.0 * sums.exact[group] / total if total else 0.0
        result[f"{prefix}f1"] = 100.0 * sums.f1[group] / total if total else 0.0
        result[f"{prefix}total"] = total
    result["missing"] = sums.missing
    return result


def squad_scores(
    predictions: Mapping[str, str], references: Mapping[str, Sequence[str]], version: str = "1.1"
) -> dict[str, float]:
    """Exact match and F1 in percent, as the official evaluation script of ``version`` reports them.

    Args:
        predictions: question id -> answer ("" for no answer).
        references: question id -> reference texts (see :func:`references`); empty means no answer (v2.0).
        version: "1.1" or "2.0".

    Returns:
        See :func:`summarise`.
    """
    return summarise(score_sums(predictions, references, version), version)


def best_threshold(
    predictions: Mapping[str, str], null_diffs: Mapping[str, float], references: Mapping[str, Sequence[str]]
) -> dict[str, float]:
    """The no-answer thresholds that maximise exact match and F1, searched as the official v2.0 script does.

    Start from answering "" everywhere (every no-answer question right, every answerable one wrong), then switch
    questions to their span in increasing order of null-score difference, keeping the best score seen; the
    threshold is the difference of the question where it was reached (0.0 when answering nothing is best).

    Args:
        predictions: question id -> the best non-empty span (:attr:`SquadPredictions.best_spans`).
        null_diffs: question id -> null score minus span score (:attr:`SquadPredictions.null_diffs`).
        references: question id -> reference texts; empty means no answer.

    Returns:
        ``best_exact``, ``best_exact_thresh``, ``best_f1``, ``best_f1_thresh`` (scores in percent).

    Raises:
        ValueError: a question lacks a prediction or a difference.
    """
    missing = [qid for qid in references if qid not in predictions or qid not in null_diffs]
    if missing:
        raise ValueError(f"{len(missing)} questions lack a prediction or a null-score difference, e.g. {missing[0]}")
    result = {}
    for name, score in (("exact", exact_match), ("f1", token_f1)):
        best, thresh = _threshold_search(predictions, null_diffs, references, score)
        result[f"best_{name}"], result[f"best_{name}_thresh"] = best, thresh
    return result


def _threshold_search(
    predictions: Mapping[str, str],
    null_diffs: Mapping[str, float],
    references: Mapping[str, Sequence[str]],
    score: Any,
) -> tuple[float, float]:
    current = best = sum(not gold for gold in references.values())
    thresh = 0.0
    for qid in sorted(references, key=lambda qid: null_diffs[qid]):
        gold = references[qid]
        if gold:
            current += score(predictions[qid], gold, "2.0")
        elif predictions[qid]:
            current -= 1  # the script checks the raw string: any non-empty span loses the no-answer point
        if current > best:
            best, thresh = current, null_diffs[qid]
    return 100.0 * best / len(references) if references else 0.0, thresh


class SquadMetric(Metric):
    """Exact match and F1 accumulated over batches; equal to :func:`squad_scores` on all of them.

    The state is the sums of per-question scores and counts (overall, answerable, no-answer), summed across
    processes.

    Args:
        version: "1.1" or "2.0".
        **kwargs: passed to ``torchmetrics.Metric``.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    exact: torch.Tensor
    f1: torch.Tensor
    total: torch.Tensor
    missing: torch.Tensor

    def __init__(self, version: str = "1.1", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.version = _check_version(version)
        # float64: per-question F1 values are fractions, and their sum over 10,000 questions should not drift.
        self.add_state("exact", default=torch.zeros(3, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("f1", default=torch.zeros(3, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total", default=torch.zeros(3, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("missing", default=torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def update(self, predictions: Mapping[str, str], references: Mapping[str, Sequence[str]]) -> None:
        """Score a batch: question id -> answer, and question id -> reference texts for the same questions."""
        sums = score_sums(predictions, references, self.version)
        self.exact += torch.tensor(sums.exact, dtype=torch.float64, device=self.exact.device)
        self.f1 += torch.tensor(sums.f1, dtype=torch.float64, device=self.f1.device)
        self.total += torch.tensor(sums.total, dtype=torch.long, device=self.total.device)
        self.missing += sums.missing

    def compute(self) -> dict[str, torch.Tensor]:
        """The :func:`squad_scores` figures, each a float64 scalar tensor."""
        sums = ScoreSums(self.exact.tolist(), self.f1.tolist(), self.total.tolist(), int(self.missing))
        return {key: torch.tensor(value, dtype=torch.float64) for key, value in summarise(sums, self.version).items()}
