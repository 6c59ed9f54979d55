"""Read GLUE's TSV files (format ``tsv``) into :class:`~bvr.tasks.readers.common.Example` lists.

Lines are split on tabs, never with CSV quoting: MRPC, QQP and MNLI have fields with unbalanced double quotes that a
CSV reader would run together. Columns are found by header name (in CoLA's headerless files, by the spec's names).
A UTF-8 byte-order mark (MRPC), a missing final newline (CoLA dev), Windows line ends and spaces around fields
(SST-2) are tolerated. Unparsable rows and rows without a label (a blank label cell, or a row that ends where its
last-column label would start) are skipped and counted, and rows with an empty sentence kept and counted, under the
shared policies of :mod:`bvr.tasks.readers.common`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bvr.errors import BvrError
from bvr.tasks.readers.common import MAX_SKIPPED_SHARE, Example, LabelParser, ReadReport, read_lines, read_rows
from bvr.tasks.registry import TaskSpec

_FORMAT_HINT = "is this a GLUE TSV file of the right task?"


@dataclass(frozen=True)
class _Layout:
    """Where a file's fields are: column indices and the number of columns every row must have."""

    text_columns: tuple[int, ...]
    label_column: int
    width: int


def read_tsv(spec: TaskSpec, path: Path, *,
             max_skipped_share: float = MAX_SKIPPED_SHARE) -> tuple[list[Example], ReadReport]:
    """Read one labelled GLUE TSV file (train or dev) of task ``spec``: the examples in file order, and what was
    read and skipped (failing past ``max_skipped_share``)."""
    lines = read_lines(path, spec)
    # The column names and the first data line: CoLA's files have no header, the spec names their columns.
    header, first = ((list(spec.columns), 0) if spec.columns is not None else
                     ([name.strip() for name in lines[0].split("\t")], 1))
    layout = _layout(spec, header, f"{path}:1")
    labels = LabelParser(spec)
    parse = partial(_parse_row, layout=layout, labels=labels, path=path)
    return read_rows(path, lines, first, parse, max_skipped_share, _FORMAT_HINT, spec.text_fields)


def _layout(spec: TaskSpec, header: list[str], where: str) -> _Layout:
    """Find the task's text and label columns in ``header``."""
    missing = [name for name in (*spec.text_fields, spec.label_field) if name not in header]
    if missing:
        raise BvrError(f"no column {', '.join(map(repr, missing))} for task {spec.name!r} in the header "
                       f"({', '.join(header)})", where=where,
                       hint="check that the file belongs to this task and is a labelled train or dev file")
    texts = tuple(header.index(name) for name in spec.text_fields)
    return _Layout(texts, header.index(spec.label_field), len(header))


def _label_missing(cells: list[str], layout: _Layout) -> bool:
    """Whether a row has everything but its label: the label cell is blank, or it is the last column and the row
    ends before it (SST-2's ``sentence`` with no tab and label after it)."""
    if len(cells) == layout.width:
        return not cells[layout.label_column].strip()
    return len(cells) == layout.width - 1 and layout.label_column == layout.width - 1


def _parse_row(line: str, number: int, report: ReadReport, *, layout: _Layout, labels: LabelParser,
               path: Path) -> Example | None:
    """One row as an Example, or None (counted in ``report``) when it cannot be parsed."""
    cells = line.split("\t")
    if _label_missing(cells, layout):
        report.skip_unlabelled(number)
        return None
    if len(cells) != layout.width:
        report.skip(f"{'fewer' if len(cells) < layout.width else 'more'} than {layout.width} columns", number)
        return None
    texts = [cells[column].strip() for column in layout.text_columns]
    label = labels.parse(cells[layout.label_column].strip(), f"{path}:{number}")
    return Example(texts[0], texts[1] if len(texts) > 1 else None, label, number)
