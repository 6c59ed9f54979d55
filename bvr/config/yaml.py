"""THE YAML reader of bvr: strict parsing with the file and line of every key.

Every YAML file bvr reads (presets, config files, experiment files, the published-results file) goes through
:func:`parse_yaml`, so each refuses the same things with the same one-line :class:`~bvr.errors.BvrError` naming the
file and line: a missing file, bytes that are not UTF-8, invalid YAML and a key given twice in one mapping (which
PyYAML would resolve silently to the later value). :func:`read_yaml` also refuses a top level that is not a mapping
and returns, beside the data, a map from each dotted key to ``file:line``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bvr.errors import BvrError


def parse_yaml(path: Path, what: str = "config file") -> tuple[Any, yaml.Node | None]:
    """Parse a YAML file into data and its node tree (which knows the line of every key).

    Raises:
        BvrError: the file is missing (named as ``what``), not UTF-8, not valid YAML, or gives a key twice in one
            mapping (each with the line).
    """
    path = Path(path)
    if not path.is_file():
        raise BvrError(f"{what} not found", where=path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise BvrError(f"not UTF-8 text (byte 0x{raw[err.start]:02x})", where=f"{path}:{line}") from None
    try:
        data, node = yaml.safe_load(text), yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        raise BvrError(f"not valid YAML ({getattr(err, 'problem', err)})", where=where) from None
    if node is not None:
        _refuse_repeated_keys(node, path)
    return data, node


def _refuse_repeated_keys(node: yaml.Node, path: Path, prefix: str = "") -> None:
    """Refuse a key given twice in one mapping."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            if key in seen:
                raise BvrError(f"key '{key}' is given twice", where=f"{path}:{key_node.start_mark.line + 1}")
            seen.add(key)
            _refuse_repeated_keys(value_node, path, key)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _refuse_repeated_keys(item, path, f"{prefix}[{i}]")


def node_lines(node: yaml.Node, prefix: str = "") -> dict[str, int]:
    """Map each key path (``tables[1].arms.static.values``; ``''`` is the top) to its 1-based line."""
    lines = {prefix: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            path = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            lines.update(node_lines(value_node, path))
            lines[path] = key_node.start_mark.line + 1  # the key's line, where a block value starts below it
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines.update(node_lines(item, f"{prefix}[{i}]"))
    return lines


def read_yaml(path: Path, what: str = "config file") -> tuple[dict[str, Any], dict[str, str]]:
    """Read a YAML mapping and the ``file:line`` of each of its dotted keys (an empty file is an empty mapping).

    Raises:
        BvrError: as :func:`parse_yaml`, or the top level is not a mapping.
    """
    data, node = parse_yaml(path, what)
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise BvrError(f"expected a mapping of keys at the top level, got {type(data).__name__}",
                       where=f"{path}:{node.start_mark.line + 1}")
    return data, {key: f"{path}:{line}" for key, line in node_lines(node).items() if key}
