"""The ablations under an output folder (``OUTPUT/ablations/NAME-PRESET-HASH/manifest.json``), found by the name
and preset each manifest records: never by a prefix of the folder's name, which ``NAME-*`` shares with another
ablation (``sentence-*`` matches ``sentence-objective-tiny-…``). Manifests are only peeked at here (their JSON's
``ablation``, ``preset`` and ``version``); :mod:`bvr.ablation.manifest` reads them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any


def manifests_of(name: str, output_dir: Path, preset: str | None = None) -> list[Path]:
    """The manifests of ablation ``name`` under ``output_dir`` (of ``preset``, ``default`` for none, if given), the
    most recently updated first."""
    found = [path for path in (Path(output_dir) / "ablations").glob("*/manifest.json")
             if path.is_file() and _is_of(path, name, preset)]
    return sorted(found, key=lambda path: path.stat().st_mtime, reverse=True)


def _peek(path: Path) -> dict[str, Any] | None:
    """The manifest ``path`` as JSON, where it is a mapping that names its ablation; else None."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("ablation"), str) else None


def _recorded(path: Path) -> tuple[str, str] | None:
    """The ablation and preset (``default`` for none) the manifest ``path`` records; None where it cannot say."""
    data = _peek(path)
    return None if data is None else (data["ablation"], str(data.get("preset") or "default"))


def manifest_version(folder: Path, ablation: str) -> Any:
    """The ``version`` the manifest in the plan folder ``folder`` records where it is ``ablation``'s, else None."""
    data = _peek(folder / "manifest.json")
    return data.get("version") if data is not None and data["ablation"] == ablation else None


def _is_of(path: Path, name: str, preset: str | None) -> bool:
    """Whether the manifest ``path`` is of ablation ``name`` (and ``preset`` if given), as it records; a damaged one
    (found, so that reading it says how to repair it) as its folder's name ``NAME-PRESET-HASH`` says, its preset
    without a '-' where none is given."""
    recorded = _recorded(path)
    if recorded is not None:
        return recorded[0] == name and preset in (None, recorded[1])
    shape = re.escape(preset) if preset else "[^-]+"
    return re.fullmatch(rf"{re.escape(name)}-{shape}-[0-9a-f]+", path.parent.name) is not None


def with_runs(output_dir: Path) -> str:
    """The ablations with a manifest under ``output_dir``, each with its presets, as prose for an error."""
    presets: dict[str, set[str]] = {}
    for path in (Path(output_dir) / "ablations").glob("*/manifest.json"):
        if (recorded := _recorded(path)) is not None:
            presets.setdefault(recorded[0], set()).add(recorded[1])
    if not presets:
        return "no ablation has runs there"
    return "runs there: " + ", ".join(f"{name} (preset {', '.join(sorted(presets[name]))})" for name in sorted(presets))
