"""Layers of settings merged into typed dataclasses: coercion, did-you-mean, the ``--set`` grammar, error locations.

A *layer* is a nested mapping of settings and, per dotted key, where it was set (``file:line`` or ``--set ...``).
Layers are deep-merged in order (:func:`merge_layer`) and built into a dataclass (:func:`build_dataclass`) that
refuses unknown keys (naming the closest known one, or what an old key became) and values of the wrong type; an
error is located at the layer that set the key (:func:`locate_error`).

>>> parse_override("masking.split=[0.8, 0.2, 0]")
({'masking': {'split': [0.8, 0.2, 0]}}, 'masking.split')
>>> flatten({"a": {"b": 1, "c": [2]}, "d": {}})
{'a.b': 1, 'a.c': [2], 'd': {}}
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

import yaml

from bvr.errors import BvrError, check

Layer = tuple[dict[str, Any], dict[str, str]]
"""A config layer: nested values and the ``file:line`` (or ``--set``) of each dotted key."""


def check_finite(values: dict[str, float], prefix: str) -> None:
    """Refuse ``inf`` and ``nan`` (YAML's ``.inf``, ``.nan``) in float keys, before their range checks: ``inf``
    passes a lower bound (``> 0``) and would train to nan or not at all, and ``nan`` fails every comparison, so a
    range check alone would name it with the wrong reason.

    >>> check_finite({"learning_rate": float("inf")}, "training.")
    Traceback (most recent call last):
    bvr.errors.BvrError: training.learning_rate: must be a finite number, got inf
    """
    for key, value in values.items():
        check(math.isfinite(value), f"{prefix}{key}", f"must be a finite number, got {value}")


def coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; return it (ints widen to float). Raise BvrError at ``key``."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(tp):
            return None
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        listed = [a for a in inner if typing.get_origin(a) is list]
        if listed and isinstance(value, (list, tuple)):  # ``float | list[float]``: a list takes the list's type
            return coerce(value, listed[0], key)
        return coerce(value, inner[0], key)
    if origin is list:
        check(isinstance(value, (list, tuple)), key, f"expected a list, got {value!r}")
        (item,) = typing.get_args(tp)
        return [coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        check(value is None or isinstance(value, dict), key, f"expected a mapping, got {value!r}")
        _, item = typing.get_args(tp)
        return {k: coerce(v, item, f"{key}.{k}") for k, v in (value or {}).items()}
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):
        # PyYAML (YAML 1.1) reads "3e-4" (no dot) as a string; accept any text Python reads as a number.
        try:
            return float(value)
        except ValueError:
            pass
    if tp is int and isinstance(value, bool) or not isinstance(value, tp):
        name = getattr(tp, "__name__", str(tp)).replace("NoneType", "null")
        raise BvrError(f"expected {name}, got {value!r} ({type(value).__name__})", where=key)
    return value


def unknown_key(path: str, key: str, names: list[str], prefix: str,
                old_keys: Mapping[str, str] | None = None) -> BvrError:
    """The error for an unknown key: what an old key became, else the closest known key, else the known keys."""
    if old_keys and path in old_keys:
        return BvrError(old_keys[path], where=path)
    close = difflib.get_close_matches(str(key), names, n=1)
    hint = f"did you mean '{prefix}{close[0]}'?" if close else f"known keys: {', '.join(names)}"
    return BvrError("unknown key", where=path, hint=hint)


def build_dataclass(cls: type, data: dict[str, Any], prefix: str, old_keys: Mapping[str, str] | None = None) -> Any:
    """Construct dataclass ``cls`` from ``data``, refusing unknown keys and wrong types.

    Args:
        old_keys: dotted key -> the one-line message that says what to write instead (a renamed or moved key, or a
            section given an old non-mapping form such as ``evaluate.blimp: false``).
    """
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in names:
            raise unknown_key(path, key, names, prefix, old_keys)
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict) and old_keys and path in old_keys:
                raise BvrError(old_keys[path], where=path)
            check(isinstance(value, dict), path, f"expected a mapping of {tp.__name__} keys, got {value!r}")
            kwargs[key] = build_dataclass(tp, value, f"{path}.", old_keys)
        else:
            kwargs[key] = coerce(value, tp, path)
    return cls(**kwargs)


def merge_layer(base: dict, extra: dict, origins: dict[str, str], extra_origins: dict[str, str],
                prefix: str = "") -> None:
    """Deep-merge ``extra`` into ``base`` in place, keeping where each key came from."""
    for key, value in extra.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge_layer(base[key], value, origins, extra_origins, f"{path}.")
        else:
            base[key] = value
        origins.update({k: v for k, v in extra_origins.items() if k == path or k.startswith(f"{path}.")})


def parse_override(text: str) -> tuple[dict[str, Any], str]:
    """THE ``--set`` grammar: ``a.b.c=VALUE`` -> a nested dict and the dotted key; the value is parsed as YAML."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise BvrError(f"--set expects KEY=VALUE with a dotted key such as masking.mask_prob=0.2, got '{text}'")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    nested: dict[str, Any] = {}
    parts = key.split(".")
    cursor = nested
    for part in parts[:-1]:
        cursor = cursor.setdefault(part, {})
    cursor[parts[-1]] = value
    return nested, key


def override_layer(text: str) -> Layer:
    """One ``--set`` as a layer located at itself."""
    nested, key = parse_override(text)
    return nested, {key: f"--set {text}"}


def locate_error(err: BvrError, origins: dict[str, str]) -> BvrError:
    """Prefix the error's key with the file and line (or --set) that set it."""
    key = err.where or ""
    base = key.split("[")[0]
    origin = origins.get(base)
    while origin is None and "." in base:
        base = base.rsplit(".", 1)[0]
        origin = origins.get(base)
    where = f"{origin}: {key}" if origin and key else (key or origin)
    return BvrError(err.message, where=where, hint=err.hint)


def at(origins: dict[str, str], key: str) -> str:
    """``file:line: key`` for a key of a file (just ``key`` when its line is unknown)."""
    return f"{origins[key]}: {key}" if key in origins else key


def mapping(value: Any, key: str, origins: dict[str, str], what: str) -> dict[str, Any]:
    """``value`` if it is a mapping (None counts as empty), else a BvrError at the key's line."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BvrError(f"expected a mapping of {what}, got {value!r}", where=at(origins, key))
    return value


def sub_origins(origins: dict[str, str], prefix: str) -> dict[str, str]:
    """The ``file:line`` of the keys under ``prefix``, with the prefix removed (config-relative keys)."""
    return {k[len(prefix):]: v for k, v in origins.items() if k.startswith(prefix)}


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> ``{dotted.key: leaf}``; lists and empty mappings are leaves."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{path}."))
        else:
            out[path] = value
    return out
