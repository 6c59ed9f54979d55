"""What a manifest read from disk is held to: every field of its JSON against the type its dataclass annotates
(:func:`mismatch`; ``jobs.json`` too), and the `bvr ablate` command that repairs one refused (:func:`ablate_command`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shlex
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

_ONE = {str: "a string", int: "an integer", float: "a number", bool: "true or false", type(None): "null"}
_MANY = {str: "strings", int: "integers", float: "numbers", bool: "booleans", type(None): "nulls"}


def conforms(value: Any, hint: Any) -> bool:
    """Whether the parsed JSON ``value`` is of the type ``hint`` (an integer is a number; true is neither)."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(conforms(value, arg) for arg in args)
    if origin is Literal:
        return any(type(value) is type(arg) and value == arg for arg in args)
    if origin is list:
        return isinstance(value, list) and all(conforms(item, args[0]) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(conforms(item, args[1]) for item in value.values())
    if hint in (int, float):
        return isinstance(value, (int, hint)) and not isinstance(value, bool)
    return isinstance(value, hint)


def describe(hint: Any, *, many: bool = False) -> str:
    """The type ``hint`` in the words of JSON: ``a list of strings``, ``an object``, ``a string or null``."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(describe(arg, many=many) for arg in args)
    if origin is Literal:
        return "one of " + ", ".join(json.dumps(arg) for arg in args)
    if origin is list:
        return f"{'lists' if many else 'a list'} of {describe(args[0], many=True)}"
    if origin is dict:
        noun = "objects" if many else "an object"
        return noun if args[1] is Any else f"{noun} of {describe(args[1], many=True)}"
    if hint is Any:
        return "values" if many else "any value"
    return (_MANY if many else _ONE)[hint]


def shown(value: Any) -> str:
    """``value`` as its JSON, cut to 40 characters."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else f"{text[:37]}..."


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def known_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The items of ``data`` that are fields of the dataclass ``cls``."""
    return {key: value for key, value in data.items() if key in _hints(cls)}


def mismatch(cls: type, data: dict[str, Any], *, skip: tuple[str, ...] = ()) -> str | None:
    """The first key of ``data`` that is a field of the dataclass ``cls`` and not of its type, as ``'KEY' must be
    TYPE, got VALUE``; None where every one is. Keys ``cls`` has no field for, and those in ``skip``, pass."""
    hints = _hints(cls)
    for key, value in data.items():
        if key in hints and key not in skip and not conforms(value, hints[key]):
            return f"'{key}' must be {describe(hints[key])}, got {shown(value)}"
    return None


def ablate_command(data: dict[str, Any], path: Path | None = None) -> str:
    """The `bvr ablate` command that picks the plan of the manifest ``data`` again, and so rewrites it: experiment (a
    shipped one by name, also where the recorded file is gone), preset, ``--set`` values, data folder and output
    folder (not ``./outputs``; the one the manifest lies in, given its ``path``, since a copied store keeps the
    recorded one). A value of the wrong type is left out."""
    from bvr.ablation.declare import EXPERIMENTS_DIR

    def text(value: Any) -> str | None:
        return value if isinstance(value, str) and value else None

    name, source = text(data.get("ablation")) or "NAME", text(data.get("source"))
    mine = EXPERIMENTS_DIR / f"{name}.yaml"
    shipped = not source or Path(source).resolve() == mine.resolve() or (not Path(source).is_file() and mine.is_file())
    context = data.get("context") if isinstance(data.get("context"), dict) else {}
    overrides = data.get("overrides") if isinstance(data.get("overrides"), list) else []
    configs = data.get("configs") if isinstance(data.get("configs"), dict) else {}
    data_dir = text(context.get("data_dir")) or next(  # else the arms' configs, which record it too
        (found for config in configs.values() if isinstance(config, dict) and (found := text(config.get("data_dir")))),
        None)
    placed = Path(path).resolve() if path is not None else None
    output_dir = (str(placed.parents[2]) if placed is not None and placed.parent.parent.name == "ablations"
                  else text(context.get("output_dir")))
    args = ["bvr", "ablate", name if shipped else str(source),
            *(["--preset", str(data["preset"])] if text(data.get("preset")) else []),
            *(arg for value in overrides for arg in ("--set", str(value))),
            *(["--data-dir", data_dir] if data_dir else []),
            *(["--output-dir", output_dir] if output_dir and Path(output_dir) != Path("outputs").resolve() else [])]
    return shlex.join(args)
