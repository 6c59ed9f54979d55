"""Read SQuAD v1.1 and v2.0 files (format ``squad-json``, the official JSON) into :class:`SquadExample` s
(:func:`read_squad`); :func:`split_by_article` makes a train/eval split from one file with no article on both sides,
for when only the dev file is at hand.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bvr.errors import BvrError
from bvr.tasks.readers.common import MAX_EMPTY_SHARE


@dataclass(frozen=True)
class SquadExample:
    """One question of an article's paragraph (``context``), with its reference answers as (text, answer_start);
    none for a v2.0 question the paragraph does not answer (``is_impossible``)."""

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
    """What :func:`read_squad` read: counts of articles, paragraphs, questions and answers; ``answers_per_question``,
    how many questions have each number of reference answers; ``answer_mismatches``, answers whose text differs from
    the context at ``answer_start`` (kept as they are); ``empty_questions``, questions whose text is empty or blank
    (kept up to :data:`~bvr.tasks.readers.common.MAX_EMPTY_SHARE` of them, as GLUE's empty texts), the first of them
    at ``first_empty`` (``data[3].paragraphs[0].qas[7]``)."""

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
    empty_questions: int = 0
    first_empty: str | None = None

    def describe(self) -> str:
        """One line for logs and the CLI."""
        spread = ", ".join(f"{n}: {count:,}" for n, count in sorted(self.answers_per_question.items()))
        empty = (f"; kept {self.empty_questions:,} empty questions (the first at {self.first_empty})"
                 if self.empty_questions else "")
        return (f"{self.path}: SQuAD v{self.version}, {self.articles:,} articles, {self.paragraphs:,} paragraphs, "
                f"{self.questions:,} questions ({self.answerable:,} answerable, {self.impossible:,} impossible), "
                f"{self.reference_answers:,} reference answers (questions by answer count {{{spread}}}), "
                f"{self.answer_mismatches:,} answers not found at their answer_start{empty}")


_FORMAT_HINT = "is this the official SQuAD JSON?"


def _field(record: Any, key: str, kind: type | tuple[type, ...], where: str, what: str = "") -> Any:
    """``record[key]``, refused unless the record is an object holding a value of ``kind`` there."""
    if not isinstance(record, dict) or key not in record:
        raise BvrError(f"{what}missing {key!r}", where=where, hint=_FORMAT_HINT)
    value = record[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise BvrError(f"{what}{key!r} is a {type(value).__name__}", where=where, hint=_FORMAT_HINT)
    return value


MAX_MISMATCH_SHARE = 0.01
"""Answers whose text differs from the context at answer_start are kept and counted up to this share (releases hold
a few off by a character); beyond it the offsets are wrong and the file is refused."""


def _load_json(path: Path) -> dict:
    if not path.is_file():
        raise BvrError("no such SQuAD file", where=path, hint="check the task's data paths")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise BvrError(f"not UTF-8 ({err.reason})", where=f"{path}:{line}",
                       hint="SQuAD files are UTF-8 JSON; convert the file (e.g. iconv -f latin1 -t utf-8)") from None
    try:
        content = json.loads(text)
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
            raise BvrError(f"{what}answer {text!r} at {start} does not fit the context of {len(context)} characters",
                           where=f"{where}.answers[{n}]")
        # Some SQuAD releases hold answers that differ from the context by a character; they stay, and are counted.
        report.answer_mismatches += context[start : start + len(text)] != text
        answers.append((text, start))
    return tuple(answers)


def _read_question(qa: Any, title: str, context: str, where: str, report: SquadReport) -> SquadExample:
    """The question at ``where`` (``path:data[3].paragraphs[0].qas[7]``), checked and counted in ``report``."""
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
    if not question.strip():
        report.empty_questions += 1
        report.first_empty = report.first_empty or where.rsplit(":", 1)[-1]
    report.questions += 1
    report.impossible += impossible
    report.answerable += not impossible
    report.reference_answers += len(answers)
    report.answers_per_question[len(answers)] = report.answers_per_question.get(len(answers), 0) + 1
    return SquadExample(qid, title, context, question, answers, impossible)


def _read_article(article: Any, where: str, report: SquadReport) -> list[SquadExample]:
    title = _field(article, "title", str, where)
    examples = []
    for j, paragraph in enumerate(_field(article, "paragraphs", list, where)):
        place = f"{where}.paragraphs[{j}]"
        context = _field(paragraph, "context", str, place)
        for k, qa in enumerate(_field(paragraph, "qas", list, place)):
            examples.append(_read_question(qa, title, context, f"{place}.qas[{k}]", report))
        report.paragraphs += 1
    report.articles += 1
    return examples


def squad_version(examples: Iterable[SquadExample], declared: Any = None) -> str:
    """'2.0' when ``declared`` says so (v2.0 files say "v2.0") or any question is unanswerable, else '1.1'."""
    if str(declared).lstrip("v").startswith("2") or any(example.is_impossible for example in examples):
        return "2.0"
    return "1.1"


def read_squad(path: str | Path) -> tuple[list[SquadExample], SquadReport]:
    """Read a SQuAD v1.1 or v2.0 file in the official JSON layout
    (``{"version": ..., "data": [{"title", "paragraphs": [{"context", "qas": [...]}]}]}``): the questions in file
    order, and a report of the counts. Refuses a file with more than 1% of its questions empty or 1% of its answers
    not at their ``answer_start``, an answer that does not fit its context, an answerable question without answers
    (or an impossible one with some), or a repeated question id; each message names the question id and the JSON
    path (``data[3].paragraphs[0].qas[7]``).
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
    report.version = squad_version(examples, content.get("version"))
    if report.empty_questions > MAX_EMPTY_SHARE * report.questions:
        raise BvrError(f"{report.empty_questions:,} of {report.questions:,} questions are empty (the first at "
                       f"{report.first_empty}), more than {MAX_EMPTY_SHARE:.0%}", where=path,
                       hint="the file looks damaged: download the task's files again")
    if report.answer_mismatches > MAX_MISMATCH_SHARE * max(report.reference_answers, 1):
        raise BvrError(
            f"{report.answer_mismatches:,} of {report.reference_answers:,} answers are not at their answer_start "
            "in the context", where=path,
            hint="answer_start counts characters of the context from 0; a file whose offsets are bytes, tokens or "
                 "shifted trains a model on the wrong spans. Fix the offsets (the official files have none wrong)")
    return examples, report


def references(examples: Iterable[SquadExample]) -> dict[str, list[str]]:
    """Question id -> reference answer texts (empty for no answer), as the metrics take them."""
    return {example.id: example.answer_texts for example in examples}


# --- article split -------------------------------------------------------------------------------------------


def _side(titles: Sequence[str], examples: Sequence[SquadExample]) -> str:
    questions = sum(example.title in set(titles) for example in examples)
    return f"{len(titles)} articles, {questions:,} questions ({', '.join(titles)})"


def split_by_article(examples: Sequence[SquadExample], fraction: float,
                     seed: int) -> tuple[list[SquadExample], list[SquadExample], str]:
    """Split one file's questions into train and eval by article, so no paragraph is seen on both sides.

    Articles are ranked by a hash of (seed, title) and the first ``round(fraction * articles)`` (at least one, and
    never all) go to eval; the split depends only on the titles and the seed, not on file order. Returns the train
    and the eval questions (each in file order), and a description naming the articles and the number of questions
    on each side, to be shown with every result measured on the split.
    """
    if not 0 < fraction < 1:
        raise BvrError(f"fraction {fraction} is not between 0 and 1", where="fraction")
    titles = list(dict.fromkeys(example.title for example in examples))
    if len(titles) < 2:
        raise BvrError(f"{len(titles)} article(s) cannot be split by article", where="examples")
    n_eval = min(len(titles) - 1, max(1, round(fraction * len(titles))))
    chosen = set(sorted(titles, key=lambda title: hashlib.sha256(f"{seed}\x00{title}".encode()).hexdigest())[:n_eval])
    train = [example for example in examples if example.title not in chosen]
    evaluation = [example for example in examples if example.title in chosen]
    description = (f"SQuAD split by article (seed {seed}, eval fraction {fraction}): "
                   f"eval {_side([t for t in titles if t in chosen], evaluation)}; "
                   f"train {_side([t for t in titles if t not in chosen], train)}")
    return train, evaluation, description
