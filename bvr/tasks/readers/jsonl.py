"""Read JSON Lines files (format ``jsonl``: one JSON object per line, as SuperGLUE ships them) into
:class:`~bvr.tasks.readers.common.Example` lists.

The spec names the fields (``text_fields``, ``label_field``; others, such as ``idx``, are ignored); a label is mapped
by the spec's ``label_values`` (BoolQ: ``false``/``true`` -> 0/1), else read as in TSV files. Lines that cannot be
parsed (blank, malformed JSON, not an object, a missing or non-text field, no label field) are skipped and counted
under the shared policy of :mod:`bvr.tasks.readers.common`; an unknown label always fails at its ``file:line``.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

from bvr.tasks.readers.common import MAX_SKIPPED_SHARE, Example, LabelParser, ReadReport, read_lines, read_rows
from bvr.tasks.registry import TaskSpec

_FORMAT_HINT = "is this a JSON Lines file (one object per line) of the right task?"


def read_jsonl(spec: TaskSpec, path: Path, *,
               max_skipped_share: float = MAX_SKIPPED_SHARE) -> tuple[list[Example], ReadReport]:
    """Read one labelled JSONL file (train or dev) of task ``spec``: the examples in file order, and what was read
    and skipped (failing past ``max_skipped_share``)."""
    parse = partial(_parse_line, spec=spec, labels=LabelParser(spec), path=path)
    return read_rows(path, read_lines(path, spec), 0, parse, max_skipped_share, _FORMAT_HINT, spec.text_fields)


def _parse_line(line: str, number: int, report: ReadReport, *, spec: TaskSpec, labels: LabelParser,
                path: Path) -> Example | None:
    """One line as an Example, or None (counted in ``report``) when it cannot be parsed."""
    try:
        record: Any = json.loads(line)
    except json.JSONDecodeError:
        report.skip("malformed JSON", number)
        return None
    if not isinstance(record, dict):
        report.skip("not a JSON object", number)
        return None
    missing = [name for name in (*spec.text_fields, spec.label_field) if name not in record]
    if missing == [spec.label_field]:  # the texts are there: a row without a label, as a TSV row without one
        report.skip_unlabelled(number)
        return None
    if missing:
        report.skip(f"no field {', '.join(map(repr, missing))}", number)
        return None
    texts = [record[name] for name in spec.text_fields]
    if not all(isinstance(text, str) for text in texts):
        report.skip("a text field is not a string", number)
        return None
    label = labels.parse_value(record[spec.label_field], f"{path}:{number}")
    return Example(texts[0].strip(), texts[1].strip() if len(texts) > 1 else None, label, number)
