"""Read GLUE's TSV files (and the same tasks from the Hugging Face hub) into :class:`Example` lists.

The files are parsed by splitting each line on tabs, never with CSV quoting: MRPC, QQP and MNLI have fields
with unbalanced double quotes that a CSV reader would run together. Columns are found by header name, except in
CoLA's headerless train and dev files, whose names come from the task spec. A leading UTF-8 byte-order mark
(MRPC), a missing final newline (CoLA dev), Windows line ends and spaces around fields (SST-2) are tolerated.

Rows that cannot be parsed (blank, too few or too many columns) are skipped and counted in a :class:`ReadReport`
with the first few line numbers; more than ``max_skipped_share`` of them fails the read. A label that is not
one of the task's label names or ids always fails, naming the file and line: it means a wrong file or task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bvr.errors import BvrError
from bvr.tasks.registry import TaskSpec

MAX_SKIPPED_SHARE = 0.01
"""Largest share of a file's rows that may be skipped before the read fails: a few broken rows are expected in
crowd-sourced data (QQP), many mean the file is not what the task expects."""

FIRST_LINES_KEPT = 5
"""Line numbers kept per skip reason, for the report."""

_DATA_HINT = "pass --data-dir (or set BVR_DATA_DIR) to a folder holding glue/"


@dataclass(frozen=True)
class Example:
    """One labelled example of a sentence or sentence-pair task.

    Attributes:
        text_a: the first (or only) text.
        text_b: the second text of a pair task, else None.
        label: class id for classification, the score for regression.
        line: where it came from: the 1-based line in the file, or the 1-based row of a hub split.
    """

    text_a: str
    text_b: str | None
    label: int | float
    line: int


@dataclass
class ReadReport:
    """What a read kept and what it skipped, for the caller to show; JSON-serialisable with ``asdict``.

    Attributes:
        source: the file (or ``hub_id/config:split``) read.
        rows: data rows seen (header excluded).
        read: examples kept.
        skipped: rows skipped.
        reasons: skipped rows per reason.
        first_lines: the first few line numbers skipped for each reason.
    """

    source: str
    rows: int = 0
    read: int = 0
    skipped: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    first_lines: dict[str, list[int]] = field(default_factory=dict)

    def skip(self, reason: str, line: int) -> None:
        """Count one skipped row."""
        self.skipped += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        lines = self.first_lines.setdefault(reason, [])
        if len(lines) < FIRST_LINES_KEPT:
            lines.append(line)

    def summary(self) -> str:
        """One line for a person: rows read and skipped, and why.

        >>> report = ReadReport("dev.tsv", rows=3, read=2)
        >>> report.skip("fewer than 4 columns", 7)
        >>> report.summary()
        'dev.tsv: read 2 of 3 rows, skipped 1 (fewer than 4 columns: 1 at line 7)'
        """
        text = f"{self.source}: read {self.read:,} of {self.rows:,} rows, skipped {self.skipped:,}"
        return f"{text} ({self.details()})" if self.skipped else text

    def details(self) -> str:
        """Each skip reason with its count and first line numbers, '; '-separated."""
        parts = []
        for reason, count in self.reasons.items():
            lines = self.first_lines[reason]
            where = f"line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}"
            parts.append(f"{reason}: {count:,} at {where}{', ...' if count > len(lines) else ''}")
        return "; ".join(parts)


@dataclass(frozen=True)
class _Layout:
    """Where a file's fields are: column indices and the number of columns every row must have."""

    text_columns: tuple[int, ...]
    label_column: int
    width: int


# ---------------------------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------------------------


def read_glue(
    spec: TaskSpec, path: Path, *, max_skipped_share: float = MAX_SKIPPED_SHARE
) -> tuple[list[Example], ReadReport]:
    """Read one labelled GLUE TSV file (train or dev) of task ``spec``.

    Args:
        spec: the task; gives the text and label columns, label names, and column names for headerless files.
        path: the TSV file.
        max_skipped_share: fail when more than this share of the rows had to be skipped.

    Returns:
        The examples in file order, and what was read and skipped.

    Raises:
        BvrError: the file is missing, not UTF-8, lacks a needed column, has an unknown label (``file:line``), or
            has too many rows that cannot be parsed.
    """
    lines = _read_lines(path)
    header, first = _header(spec, lines)
    layout = _layout(spec, header, f"{path}:1")
    labels = _LabelParser(spec)
    report = ReadReport(str(path))
    examples: list[Example] = []
    for number, line in enumerate(lines[first:], start=first + 1):
        report.rows += 1
        example = _parse_row(line, number, layout, labels, report, path)
        if example is not None:
            examples.append(example)
    report.read = len(examples)
    _check_skipped(report, max_skipped_share)
    return examples, report


def _read_lines(path: Path) -> list[str]:
    """The file's lines without line ends, BOM or the empty string after a final newline."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BvrError("no such file", where=path, hint=_DATA_HINT) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise BvrError(f"not UTF-8 (byte {exc.start})", where=f"{path}:{line}") from None
    # Split on "\n" only: str.splitlines would also break at \x0b, \x1c, \x85 or \u2028 inside a sentence.
    lines = [line.removesuffix("\r") for line in text.removeprefix("\ufeff").split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise BvrError("the file is empty", where=path)
    return lines


def _header(spec: TaskSpec, lines: list[str]) -> tuple[list[str], int]:
    """The column names and the index of the first data line."""
    if spec.columns is not None:
        return list(spec.columns), 0
    return [name.strip() for name in lines[0].split("\t")], 1


def _layout(spec: TaskSpec, header: list[str], where: str) -> _Layout:
    """Find the task's text and label columns in ``header``."""
    missing = [name for name in (*spec.text_fields, spec.label_field) if name not in header]
    if missing:
        raise BvrError(
            f"no column {', '.join(map(repr, missing))} for task {spec.name!r} in the header ({', '.join(header)})",
            where=where, hint="check that the file belongs to this task and is a labelled train or dev file",
        )
    texts = tuple(header.index(name) for name in spec.text_fields)
    return _Layout(texts, header.index(spec.label_field), len(header))


def _parse_row(
    line: str, number: int, layout: _Layout, labels: _LabelParser, report: ReadReport, path: Path
) -> Example | None:
    """One row as an Example, or None (counted in ``report``) when it cannot be parsed."""
    if not line.strip():
        report.skip("blank line", number)
        return None
    cells = line.split("\t")
    if len(cells) != layout.width:
        report.skip(f"{'fewer' if len(cells) < layout.width else 'more'} than {layout.width} columns", number)
        return None
    texts = [cells[column].strip() for column in layout.text_columns]
    label = labels.parse(cells[layout.label_column].strip(), f"{path}:{number}")
    return Example(texts[0], texts[1] if len(texts) > 1 else None, label, number)


def _check_skipped(report: ReadReport, max_share: float) -> None:
    """Fail when nothing was read, or when more than ``max_share`` of the rows were skipped."""
    if report.read == 0:
        raise BvrError(f"no examples could be read ({report.summary()})", where=report.source)
    if report.skipped > max_share * report.rows:
        raise BvrError(
            f"{report.skipped:,} of {report.rows:,} rows could not be parsed, more than {max_share:.0%} "
            f"({report.details()})", where=report.source, hint="is this a GLUE TSV file of the right task?",
        )


class _LabelParser:
    """Turns a label cell into a class id (from a label word or a numeric id) or a regression score."""

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec
        names = spec.label_names or ()
        # Words and ids both map to the id: GLUE files use words (RTE, MNLI) or numbers (CoLA, SST-2, MRPC, QQP).
        self.ids = {name: index for index, name in enumerate(names)} | {str(i): i for i in range(len(names))}

    def parse(self, raw: str, where: str) -> int | float:
        """The label in ``raw``; anything else is a BvrError at ``where``."""
        if self.spec.label_names is None:
            return self._score(raw, where)
        if raw not in self.ids:
            names = ", ".join(self.spec.label_names)
            raise BvrError(f"unknown label {raw!r} for task {self.spec.name!r}", where=where,
                           hint=f"expected one of: {names} (or their ids 0 to {len(self.spec.label_names) - 1})")
        return self.ids[raw]

    def _score(self, raw: str, where: str) -> float:
        """A regression label: a finite number inside the task's range."""
        try:
            score = float(raw)
        except ValueError:
            raise BvrError(f"label {raw!r} is not a number", where=where) from None
        low, high = self.spec.label_range or (-math.inf, math.inf)
        if not (math.isfinite(score) and low <= score <= high):
            raise BvrError(f"label {raw!r} is outside [{low:g}, {high:g}]", where=where)
        return score


# ---------------------------------------------------------------------------------------------------------------
# Splits: the data folder, else the hub
# ---------------------------------------------------------------------------------------------------------------


def load_task_split(spec: TaskSpec, split: str, data_dir: Path | None) -> tuple[list[Example], ReadReport]:
    """Read split ``split`` of a GLUE task from the data folder, or from the Hugging Face hub when there is none.

    Args:
        spec: a classification or regression task.
        split: one of the task's split names ('train', 'dev', 'dev_matched', ...).
        data_dir: the data folder (``--data-dir`` / ``BVR_DATA_DIR``); the file is ``data_dir/folder/file``.

    Returns:
        The examples and the read report.

    Raises:
        BvrError: the split is unknown, the file cannot be read, or there is no data folder and the hub cannot be
            reached.
    """
    if spec.kind not in ("classification", "regression"):
        raise BvrError(f"task {spec.name!r} is a {spec.kind} task, not a GLUE-style sentence task", where=spec.name)
    split_spec = spec.split(split)
    if data_dir is not None:
        return read_glue(spec, Path(data_dir) / spec.folder / split_spec.file)
    return _from_hub(spec, split_spec.hub_split)


def _from_hub(spec: TaskSpec, hub_split: str) -> tuple[list[Example], ReadReport]:
    """The split as Examples from the hub dataset (rows without a label, id -1, are skipped and counted)."""
    rows = _load_hub(spec, hub_split)
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
    _check_skipped(report, MAX_SKIPPED_SHARE)
    return examples, report


def _load_hub(spec: TaskSpec, hub_split: str) -> Any:
    """The hub split as a ``datasets.Dataset``; any failure to reach it becomes a BvrError."""
    # Imported here: datasets is slow to import and only the no-data-folder path needs it.
    import datasets

    try:
        return datasets.load_dataset(spec.hub_id, spec.hub_config, split=hub_split)
    except (OSError, ValueError) as exc:  # ConnectionError (offline) and FileNotFoundError are OSErrors
        raise BvrError(
            f"no data folder was given and {spec.hub_id} ({spec.hub_config}) could not be loaded from the Hugging "
            f"Face hub ({exc})", where=spec.name, hint=_DATA_HINT,
        ) from exc
