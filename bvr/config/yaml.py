"""THE YAML reader of bvr: strict parsing with the file and line of every key.

Every YAML file bvr reads (presets, config files, experiment files, the published-results file) goes through
:func:`parse_yaml`, so each refuses the same things with the same one-line :class:`~bvr.errors.BvrError` naming the
file and line; :func:`read_yaml` also refuses a top level that is not a mapping and maps each dotted key to
``file:line``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bvr.errors import BvrError

MAX_VALUES = 100_000
"""Most values (mappings, lists and scalars) a YAML file may hold once every alias is expanded where it is used.
bvr's own files hold a few hundred; nine aliases of nine aliases, nine levels deep, expand to 9**9 (a "billion
laughs" file), which every walk of the data (key lines, validation, hashing) would take hours over."""


def parse_yaml(path: Path, what: str = "config file") -> tuple[Any, yaml.Node | None]:
    """Parse a YAML file into data and its node tree (which knows the line of every key). A missing file is named
    as ``what``; bytes that are not UTF-8, invalid YAML, a key given twice in one mapping (which PyYAML would resolve
    silently to the later value), an alias loop (``a: &a [*a]``), aliases that expand past :data:`MAX_VALUES` (a
    "billion laughs" file) and nesting too deep for Python's recursion limit are errors, each with its line."""
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
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is None:
            return None, None
        _expanded_size(node, path, {}, set())  # before anything walks the values as a tree
        node_lines(node, path=path)  # refuses a key given twice
        return yaml.safe_load(text), node
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        raise BvrError(f"not valid YAML ({getattr(err, 'problem', err)})", where=where) from None
    except RecursionError:
        raise BvrError("values nested too deeply to read (lists or mappings inside one another, hundreds of levels "
                       "down)", where=path, hint="write the file with fewer levels") from None


def _expanded_size(node: yaml.Node, path: Path, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """How many values ``node`` holds with every alias expanded, each node counted once (``sizes``, by ``id``) so
    this is quick whatever the aliases expand to; meeting one of ``open_nodes``, those being counted, means a loop."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    where = f"{path}:{node.start_mark.line + 1}"
    if key in open_nodes:
        raise BvrError("an alias refers to the value that holds it (a loop, such as a: &a [*a])", where=where,
                       hint="write the value out instead of the alias")
    open_nodes.add(key)
    if isinstance(node, yaml.MappingNode):
        children = [child for pair in node.value for child in pair]
    else:
        children = node.value if isinstance(node, yaml.SequenceNode) else []
    total = 1 + sum(_expanded_size(child, path, sizes, open_nodes) for child in children)
    open_nodes.discard(key)
    if total > MAX_VALUES:
        raise BvrError(f"its aliases expand this value to more than {MAX_VALUES:,} values (aliases of aliases)",
                       where=where, hint="write the values out, or nest fewer aliases")
    sizes[key] = total
    return total


def node_lines(node: yaml.Node, prefix: str = "", path: Path | None = None) -> dict[str, int]:
    """Map each key path (``tables[1].arms.static.values``; ``''`` is the top) to its 1-based line; given the file's
    ``path``, a key given twice in one mapping is refused (PyYAML would keep the later value silently)."""
    lines = {prefix: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            if path is not None and key in seen:
                raise BvrError(f"key '{key}' is given twice", where=f"{path}:{key_node.start_mark.line + 1}")
            seen.add(key)
            lines.update(node_lines(value_node, key, path))
            lines[key] = key_node.start_mark.line + 1  # the key's line, where a block value starts below it
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines.update(node_lines(item, f"{prefix}[{i}]", path))
    return lines


def read_yaml(path: Path, what: str = "config file") -> tuple[dict[str, Any], dict[str, str]]:
    """Read a YAML mapping and the ``file:line`` of each of its dotted keys (an empty file is an empty mapping)."""
    data, node = parse_yaml(path, what)
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise BvrError(f"expected a mapping of keys at the top level, got {type(data).__name__}",
                       where=f"{path}:{node.start_mark.line + 1}")
    return data, {key: f"{path}:{line}" for key, line in node_lines(node).items() if key}
