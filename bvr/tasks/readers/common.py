"""What every reader shares: the sentence :class:`Example`, the :class:`ReadReport` of rows read and skipped, the
skipped-row and empty-text policies (:func:`read_rows`), label parsing (:class:`LabelParser`: a label that is not one
of the task's always fails, naming the file and line, as it means a wrong file or task) and a task's
:class:`ReadResult`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bvr.errors import BvrError
from bvr.fs import not_utf8
from bvr.tasks.registry import TaskSpec

MAX_SKIPPED_SHARE = 0.01
"""Largest share of a file's rows that may be skipped before the read fails: a few broken rows are expected in
crowd-sourced data (QQP), many mean the file is not what the task expects."""

MAX_EMPTY_SHARE = 0.01
"""Largest share of a file's rows that may have an empty text field: GLUE has a handful (QQP), a file with many
was damaged on the way (a bad export, a column cut away) and would train on nothing but the label."""

NO_LABEL = "no label"
"""The skip reason of a row that has its text but no label: counted in the summary with its first line numbers,
never dropped without a word."""

FIRST_LINES_KEPT = 5
"""Line numbers kept per skip reason, for the report."""


@dataclass
class ReadResult:
    """Every split of a task as read (split name -> examples and one line saying what was read), and how its parts
    were drawn when they share a file."""

    splits: dict[str, tuple[list[Any], str]]
    note: str | None = None


def data_hint(spec: TaskSpec) -> str:
    """What to do when a task's file is missing."""
    return f"pass --data-dir (or set BVR_DATA_DIR) to a folder holding {spec.folder.split('/')[0]}/"


@dataclass(frozen=True)
class Example:
    """One labelled example of a sentence or sentence-pair task (``text_b`` None for a single sentence); ``label``
    is a class id, or the score for regression; ``line`` the 1-based line in the file, or row of a hub split."""

    text_a: str
    text_b: str | None
    label: int | float
    line: int


@dataclass
class ReadReport:
    """What a read of a file (or ``hub_id/config:split``) kept and what it skipped, for the caller to show; rows
    skipped per reason and kept rows with an empty text field per field, each with its first few line numbers."""

    source: str
    rows: int = 0
    read: int = 0
    skipped: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    first_lines: dict[str, list[int]] = field(default_factory=dict)
    empty: dict[str, int] = field(default_factory=dict)
    first_empty: dict[str, list[int]] = field(default_factory=dict)

    def skip(self, reason: str, line: int) -> None:
        self.skipped += 1
        _tally(self.reasons, self.first_lines, reason, line)

    def skip_unlabelled(self, line: int) -> None:
        """Count one skipped row that has its text but no label (reason :data:`NO_LABEL`)."""
        self.skip(NO_LABEL, line)

    def summary(self) -> str:
        """One line for a person: rows read and skipped, and why.

        >>> report = ReadReport("dev.tsv", rows=3, read=2)
        >>> report.skip("fewer than 4 columns", 7)
        >>> report.summary()
        'dev.tsv: read 2 of 3 rows, skipped 1 (fewer than 4 columns: 1 at line 7)'
        """
        text = f"{self.source}: read {self.read:,} of {self.rows:,} rows, skipped {self.skipped:,}"
        text = f"{text} ({self.details()})" if self.skipped else text
        for name, count in self.empty.items():
            text += f"; kept {count:,} with an empty {name} ({_at_lines(self.first_empty[name], count)})"
        return text

    describe = summary  # the one line every reader's report gives (CoNLL's and SQuAD's reports have their own)

    def details(self) -> str:
        """Each skip reason with its count and first line numbers, '; '-separated."""
        return "; ".join(f"{reason}: {count:,} at {_at_lines(self.first_lines[reason], count)}"
                         for reason, count in self.reasons.items())


def _tally(counts: dict[str, int], first_lines: dict[str, list[int]], key: str, line: int) -> None:
    """One more row under ``key``, its line kept among the first :data:`FIRST_LINES_KEPT`."""
    counts[key] = counts.get(key, 0) + 1
    lines = first_lines.setdefault(key, [])
    if len(lines) < FIRST_LINES_KEPT:
        lines.append(line)


def _at_lines(lines: list[int], count: int) -> str:
    """``line 7`` or ``lines 2, 4, ...``: the first line numbers of ``count`` rows."""
    return f"line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}{', ...' if count > len(lines) else ''}"


def read_lines(path: Path, spec: TaskSpec) -> list[str]:
    """The file's lines without line ends, BOM or the empty string after a final newline."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BvrError("no such file", where=path, hint=data_hint(spec)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise not_utf8(exc, path, line, raw.rfind(b"\n", 0, exc.start) + 1) from None
    # Split on "\n" only: str.splitlines would also break at \x0b, \x1c, \x85 or \u2028 inside a sentence.
    lines = [line.removesuffix("\r") for line in text.removeprefix("\ufeff").split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise BvrError("the file is empty", where=path)
    return lines


def read_rows(path: Path, lines: list[str], first: int, parse: Callable[[str, int, ReadReport], Example | None],
              max_share: float, hint: str, text_fields: tuple[str, ...]) -> tuple[list[Example], ReadReport]:
    """Parse ``lines[first:]`` (1-based line numbers) with ``parse``, which returns None for a row it skipped and
    counted (blank lines are skipped before it); then apply the skipped-share policy (:func:`check_skipped`) and
    count the kept rows with an empty text (``text_fields`` names ``text_a`` and ``text_b``), failing when more than
    :data:`MAX_EMPTY_SHARE` of the rows have one."""
    report = ReadReport(str(path))
    examples: list[Example] = []
    for number, line in enumerate(lines[first:], start=first + 1):
        report.rows += 1
        if not line.strip():
            report.skip("blank line", number)
        elif (example := parse(line, number, report)) is not None:
            examples.append(example)
    report.read = len(examples)
    check_skipped(report, max_share, hint)
    for example in examples:
        for name, text in zip(text_fields, (example.text_a, example.text_b), strict=False):
            if not text:
                _tally(report.empty, report.first_empty, name, example.line)
    for name, count in report.empty.items():
        if count > MAX_EMPTY_SHARE * report.rows:
            raise BvrError(f"{count:,} of {report.rows:,} rows have an empty {name} (the first at line "
                           f"{report.first_empty[name][0]}), more than {MAX_EMPTY_SHARE:.0%}", where=report.source,
                           hint="the file looks damaged: download the task's files again")
    return examples, report


def check_skipped(report: ReadReport, max_share: float, hint: str) -> None:
    """Fail when nothing was read, or when more than ``max_share`` of the rows were skipped (``hint`` says why)."""
    if report.read == 0:
        raise BvrError(f"no examples could be read ({report.summary()})", where=report.source)
    if report.skipped > max_share * report.rows:
        raise BvrError(f"{report.skipped:,} of {report.rows:,} rows could not be parsed, more than {max_share:.0%} "
                       f"({report.details()})", where=report.source, hint=hint)


class LabelParser:
    """Turns a label into a class id (from a label word, a numeric id or a JSON value) or a regression score."""

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec
        names = spec.label_names or ()
        # Words and ids both map to the id: GLUE files use words (RTE, MNLI) or numbers (CoLA, SST-2, MRPC, QQP).
        self.ids = {name: index for index, name in enumerate(names)} | {str(i): i for i in range(len(names))}

    def parse(self, raw: str, where: str) -> int | float:
        """The label in ``raw``; anything else is a BvrError at ``where``."""
        if self.spec.label_names is None:  # regression: a finite number inside the task's range
            try:
                score = float(raw)
            except ValueError:
                raise BvrError(f"label {raw!r} is not a number", where=where) from None
            low, high = self.spec.label_range or (-math.inf, math.inf)
            if not (math.isfinite(score) and low <= score <= high):
                raise BvrError(f"label {raw!r} is outside [{low:g}, {high:g}]", where=where)
            return score
        if raw not in self.ids:
            names = ", ".join(self.spec.label_names)
            raise BvrError(f"unknown label {raw!r} for task {self.spec.name!r}", where=where,
                           hint=f"expected one of: {names} (or their ids 0 to {len(self.spec.label_names) - 1})")
        return self.ids[raw]

    def parse_value(self, value: Any, where: str) -> int | float:
        """A JSON label: one of the spec's ``label_values`` (same type and value), else as :meth:`parse` reads it.

        >>> from bvr.tasks.registry import get_task
        >>> LabelParser(get_task("boolq")).parse_value(True, "x:1")
        1
        """
        values = self.spec.label_values
        if values is not None:
            for index, known in enumerate(values):
                if type(known) is type(value) and known == value:
                    return index
            raise BvrError(f"unknown label {json.dumps(value)} for task {self.spec.name!r}", where=where,
                           hint=f"expected one of: {', '.join(map(json.dumps, values))}")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise BvrError(f"unknown label {json.dumps(value)} for task {self.spec.name!r}", where=where)
        return self.parse(value if isinstance(value, str) else repr(value), where)
