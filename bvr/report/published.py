"""The papers' numbers, read from ``reports/published.yaml`` into one row per (ablation, arm, task, metric).

The file keeps each published table in the paper's layout (columns, then a line of values per row) so a reader can
check it against the page; :func:`load_published` checks every key and flattens it into :data:`COLUMNS`, values as
printed (points; a report scales bvr's fractions before it compares). :func:`published_effect` gives the published
``b - a`` that a comparison's ``agreement`` (:mod:`bvr.report.analysis`) sets against a measured one.

>>> df = load_published()
>>> round(published_effect(df, "masking", "static", "dynamic", "squad_v2", "dev/f1"), 6)
0.4
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, NoReturn

import pandas as pd
import yaml

from bvr.ablation.declare import PUBLISHED_TABLES
from bvr.config import node_lines, parse_yaml
from bvr.errors import BvrError

_CHECKOUT_PATH = Path(__file__).resolve().parents[2] / "reports" / "published.yaml"
DEFAULT_PATH = (_CHECKOUT_PATH if _CHECKOUT_PATH.is_file() else
                Path(__file__).resolve().parents[1] / "_reports" / "published.yaml")
"""The file shipped with bvr: a checkout's ``reports/published.yaml``, else the copy a wheel carries (``setup.py``)."""

ABLATIONS = PUBLISHED_TABLES
"""The ablations a published table may inform."""

COLUMNS = ("ablation", "arm", "arm_label", "task", "metric", "metric_label", "value", "higher_is_better", "source",
           "setting", "note")
"""Columns of :func:`load_published`'s frame. A finding stated in words has no task, metric or value."""

# Keys allowed at each level of the file; True marks a required one.
_TOP_KEYS = {"tables": True}
_TABLE_KEYS = {"ablation": True, "source": True, "setting": True, "columns": False, "arms": True}
_COLUMN_KEYS = {"task": True, "metric": True, "higher_is_better": True, "label": False, "note": False}
_ARM_KEYS = {"label": True, "values": False, "note": False}

# Arm ids name reports' rows and join with experiment arms, so they stay plain: 'segment-pair', '2k'.
_ARM_ID = re.compile(r"[a-z0-9][a-z0-9-]*")


class _Source:
    """The file being read and the line of each key in it, so every error can say where."""

    def __init__(self, path: Path, root: yaml.Node) -> None:
        self.path = path
        self.lines = node_lines(root)

    def fail(self, key: str, message: str, hint: str | None = None) -> NoReturn:
        """Raise a BvrError at ``key``'s line, or its nearest enclosing key's line when it has none."""
        probe = key
        while probe and probe not in self.lines:
            probe = re.sub(r"(\.[^.\[]*|\[\d+\])$", "", probe)  # drop the last '.key' or '[i]'
        raise BvrError(message, where=f"{self.path}:{self.lines.get(probe, 1)}", hint=hint)


def load_published(path: str | Path | None = None) -> pd.DataFrame:
    """Read the published numbers (default :data:`DEFAULT_PATH`), one row per (ablation, arm, task, metric):
    ``value`` NaN where the paper prints a dash or states a finding in words, ``higher_is_better`` a nullable
    boolean. Every error names the file, the line and the key."""
    path = Path(path) if path is not None else DEFAULT_PATH
    data, root = parse_yaml(path, "published-results file")  # refuses a key given twice, with its line
    if root is None:
        raise BvrError("the file is empty; expected a 'tables' list", where=path)
    source = _Source(path, root)
    _check_keys(source, data, "", _TOP_KEYS)
    tables = data["tables"]
    if not isinstance(tables, list) or not tables:
        source.fail("tables", "'tables' must be a non-empty list of published tables")
    rows: list[dict[str, Any]] = []
    seen: set[tuple] = set()  # one row per (ablation, table, arm, task, metric), or a published effect is ambiguous
    for i, table in enumerate(tables):
        key = f"tables[{i}]"
        for row in _table_rows(source, table, key):
            ident = (row["ablation"], row["source"], row["arm"], row["task"], row["metric"])
            if ident in seen:
                source.fail(key, f"'{key}' repeats arm '{row['arm']}' of ablation '{row['ablation']}' "
                                 f"({row['source']}) on task '{row['task']}', metric '{row['metric']}'")
            seen.add(ident)
            rows.append(row)
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["value"] = frame["value"].astype(float)
    frame["higher_is_better"] = frame["higher_is_better"].astype("boolean")
    return frame


def published_effect(df: pd.DataFrame, ablation: str, arm_a: str, arm_b: str, task: str,
                     metric: str | None) -> float | None:
    """The published difference ``b - a`` on one task and metric, or None where either value is not published.

    An effect is read within one table (rows of two tables differ in setting, as SpanBERT's masking-scheme and
    auxiliary-objective tables): the first, in file order, that prints both arms on the column, in the paper's units.
    ``task`` may be ``probe/TASK`` for a feature-based column; ``metric`` None matches the task's one published metric.

    >>> df = load_published()
    >>> round(published_effect(df, "span-masking", "token", "span", "squad_v2", "dev/f1"), 6)  # Table 6
    1.6
    >>> round(published_effect(df, "span-masking", "span", "span-sbo", "squad_v2", "dev/f1"), 6)  # Table 7
    0.1
    >>> published_effect(df, "span-masking", "token", "span-sbo", "squad_v2", "dev/f1") is None  # no common table
    True
    """
    rows = df[(df["ablation"] == ablation) & (df["task"] == task)]
    if metric is not None:
        rows = rows[rows["metric"] == metric]
    for _, table in rows.groupby("source", sort=False):
        if table["metric"].nunique() != 1:
            continue  # several metrics for this task and none named: ambiguous
        a, b = _published_value(table, arm_a), _published_value(table, arm_b)
        if a is not None and b is not None:
            return b - a
    return None


def _published_value(table: pd.DataFrame, arm: str) -> float | None:
    """One arm's value in one table's column, or None when the arm is absent or the paper prints a dash."""
    hit = table.loc[table["arm"] == arm, "value"]
    return None if hit.empty or math.isnan(hit.iloc[0]) else float(hit.iloc[0])


def _check_keys(source: _Source, data: Any, key: str, allowed: dict[str, bool]) -> None:
    """Refuse a non-mapping, an unknown key or a missing required key at ``key``."""
    what = f"'{key}'" if key else "the top level"
    if not isinstance(data, dict):
        source.fail(key, f"{what} must be a mapping with keys {', '.join(allowed)}")
    for name in data:
        if name not in allowed:
            source.fail(_join(key, name), f"unknown key '{_join(key, name)}'", hint=f"known keys: {', '.join(allowed)}")
    for name, required in allowed.items():
        if required and data.get(name) is None:
            source.fail(key, f"missing key '{_join(key, name)}'")


def _join(key: str, name: Any) -> str:
    return f"{key}.{name}" if key else str(name)


def _text(source: _Source, data: dict, key: str, name: str) -> str | None:
    """A string value (None when absent); an empty or non-string value is refused."""
    value = data.get(name)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        source.fail(_join(key, name), f"'{_join(key, name)}' must be non-empty text, got {value!r}")
    return value


def _table_rows(source: _Source, table: Any, key: str) -> list[dict[str, Any]]:
    _check_keys(source, table, key, _TABLE_KEYS)
    ablation = _text(source, table, key, "ablation")
    if ablation not in ABLATIONS:
        source.fail(f"{key}.ablation", f"unknown ablation '{ablation}'", hint=f"choose one of: {', '.join(ABLATIONS)}")
    base = {"ablation": ablation, "source": _text(source, table, key, "source"),
            "setting": _text(source, table, key, "setting")}
    columns = table.get("columns") or []
    if not isinstance(columns, list):
        source.fail(f"{key}.columns", f"'{key}.columns' must be a list")
    columns = [_column(source, column, f"{key}.columns[{i}]") for i, column in enumerate(columns)]
    arms = table["arms"]
    if not isinstance(arms, dict) or not arms:
        source.fail(f"{key}.arms", f"'{key}.arms' must be a non-empty mapping of arm ids")
    return [row for arm, spec in arms.items() for row in _arm_rows(source, str(arm), spec, f"{key}.arms.{arm}",
                                                                    columns, base)]


def _column(source: _Source, column: Any, key: str) -> dict[str, Any]:
    """One result column: task, metric, direction, the paper's heading and a note."""
    _check_keys(source, column, key, _COLUMN_KEYS)
    if not isinstance(column["higher_is_better"], bool):
        source.fail(f"{key}.higher_is_better", f"'{key}.higher_is_better' must be true or false")
    return {"task": _text(source, column, key, "task"), "metric": _text(source, column, key, "metric"),
            "higher_is_better": column["higher_is_better"], "metric_label": _text(source, column, key, "label"),
            "column_note": _text(source, column, key, "note")}


def _arm_rows(source: _Source, arm: str, spec: Any, key: str, columns: list[dict], base: dict) -> list[dict[str, Any]]:
    """One arm's rows: a value per column, or a single row stating a finding in words when there are no columns."""
    if not _ARM_ID.fullmatch(arm):
        source.fail(key, f"arm id '{arm}' must be lower-case letters, digits and '-'")
    _check_keys(source, spec, key, _ARM_KEYS)
    label, note = _text(source, spec, key, "label"), _text(source, spec, key, "note")
    head = {**base, "arm": arm, "arm_label": label}
    if not columns:
        if "values" in spec or note is None:
            source.fail(key, f"'{key}' belongs to a table without columns: give a note and no values")
        return [{**head, "task": None, "metric": None, "metric_label": None, "value": math.nan,
                 "higher_is_better": None, "note": note}]
    values = _values(source, spec.get("values"), f"{key}.values", len(columns))
    return [{**head, **{k: v for k, v in column.items() if k != "column_note"}, "value": value,
             "note": "; ".join(text for text in (column["column_note"], note) if text) or None}
            for column, value in zip(columns, values, strict=True)]


def _values(source: _Source, values: Any, key: str, n: int) -> list[float]:
    """A row's values: ``n`` numbers, null (NaN) where the paper prints a dash."""
    if not isinstance(values, list) or len(values) != n:
        source.fail(key, f"'{key}' must list {n} values, one per column, got {values!r}")
    for value in values:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            source.fail(key, f"'{key}' holds {value!r}, which is not a number (write null for a dash)")
    return [math.nan if value is None else float(value) for value in values]

