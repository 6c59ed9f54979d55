"""Reading BLiMP's minimal pairs: one ``PARADIGM.jsonl`` file per paradigm, checked line by line, optionally a fixed
subsample of each paradigm."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bvr.errors import BvrError
from bvr.fs import utf8_lines

SUMMARY_FILE = "models_summary.jsonl"
"""The release's per-paradigm accuracies of the paper's models; not a paradigm file."""

REQUIRED_KEYS = ("sentence_good", "sentence_bad", "field", "linguistics_term", "UID", "pairID")
"""Keys every line of a paradigm file must have (the release's lines carry more, which are ignored)."""


_HINT = "use the BLiMP release's data/*.jsonl files (one JSON object a line)"


@dataclass(frozen=True)
class BlimpPair:
    """One minimal pair of a BLiMP paradigm."""

    uid: str
    """The paradigm (the release's ``UID``), e.g. ``anaphor_gender_agreement``."""
    pair_id: str
    field: str
    """``morphology``, ``syntax``, ``semantics`` or ``syntax_semantics``."""
    term: str
    """The ``linguistics_term`` (13 of them), e.g. ``anaphor_agreement``."""
    good: str
    bad: str


def paradigm_files(folder: Path) -> list[Path]:
    """The paradigm files (``*.jsonl`` but ``models_summary.jsonl``), sorted by name, of a BLiMP folder: theirs, the
    release's (``data/``), or a data folder that holds ``blimp/``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BvrError("no such folder", where=folder, hint="pass the data folder that holds blimp/")
    for candidate in (folder, folder / "data", folder / "blimp" / "data", folder / "blimp"):
        files = sorted(p for p in candidate.glob("*.jsonl") if p.name != SUMMARY_FILE) if candidate.is_dir() else []
        if files:
            return files
    raise BvrError("no BLiMP paradigm files (PARADIGM.jsonl) here, nor in its data/, blimp/data/ or blimp/",
                   where=folder, hint="pass the data folder that holds blimp/data/*.jsonl, or that folder itself")


def json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line; a byte that is not UTF-8, bad JSON or a non-object is an error
    naming ``path:line``."""
    for number, line in utf8_lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise BvrError(f"not valid JSON ({err.msg}, column {err.colno})", where=f"{path}:{number}",
                           hint=_HINT) from err
        if not isinstance(row, dict):
            raise BvrError(f"expected a JSON object, got {type(row).__name__}", where=f"{path}:{number}",
                           hint=_HINT)
        yield number, row


def _pair(row: dict[str, Any], where: str) -> BlimpPair:
    """A :class:`BlimpPair` from one line, every required key present and a non-empty string (pairID: or an int)."""
    missing = [key for key in REQUIRED_KEYS if key not in row]
    if missing:
        raise BvrError(f"missing key{'s' if len(missing) > 1 else ''} {', '.join(missing)}", where=where, hint=_HINT)
    for key in REQUIRED_KEYS:
        value = row[key]
        allowed = (str, int) if key == "pairID" else (str,)
        if isinstance(value, bool) or not isinstance(value, allowed):
            raise BvrError(f"{key} must be a string, got {json.dumps(value)}", where=where, hint=_HINT)
        if not str(value).strip():
            raise BvrError(f"{key} is empty", where=where, hint=_HINT)
    # The release spells one paradigm's field "syntax/semantics" and thirteen others' "syntax_semantics".
    return BlimpPair(uid=row["UID"], pair_id=str(row["pairID"]), field=row["field"].replace("/", "_"),
                     term=row["linguistics_term"], good=row["sentence_good"], bad=row["sentence_bad"])


def _subsample(pairs: list[BlimpPair], n: int, seed: int) -> list[BlimpPair]:
    """The ``n`` pairs with the smallest hashes of (seed, paradigm, pairID), in their original order: the choice
    depends on neither the lines' order nor a generator, and a larger ``n`` keeps every pair a smaller one chose."""
    if n >= len(pairs):
        return pairs

    def rank(index: int) -> bytes:
        key = f"{seed}\0{pairs[index].uid}\0{pairs[index].pair_id}".encode()
        return hashlib.blake2b(key, digest_size=8).digest()

    chosen = sorted(sorted(range(len(pairs)), key=rank)[:n])
    return [pairs[i] for i in chosen]


def load_blimp(folder: Path, per_paradigm: int | None = None, seed: int = 0) -> list[BlimpPair]:
    """Read every BLiMP paradigm file (:func:`paradigm_files`) in order, optionally ``per_paradigm`` pairs of each,
    chosen by ``seed`` and the pairs' identities only: every model sees the same pairs, for paired comparisons."""
    if per_paradigm is not None and per_paradigm < 1:
        raise BvrError(f"must be at least 1, got {per_paradigm}", where="per_paradigm",
                       hint="leave it out to score every pair")
    seen: dict[tuple[str, str], str] = {}  # (paradigm, pairID) -> the file:line it was read at
    by_paradigm: dict[str, list[BlimpPair]] = defaultdict(list)
    for path in paradigm_files(folder):
        pairs = 0
        for number, row in json_lines(path):
            where = f"{path}:{number}"
            pair = _pair(row, where)
            if (key := (pair.uid, pair.pair_id)) in seen:
                raise BvrError(f"pair {pair.pair_id} of paradigm {pair.uid} was already read at {seen[key]}",
                               where=where, hint="remove the duplicate file or line")
            seen[key] = where
            by_paradigm[pair.uid].append(pair)
            pairs += 1
        if not pairs:
            raise BvrError("no pairs in this paradigm file", where=path, hint=_HINT)
    if per_paradigm is None:
        return [pair for pairs in by_paradigm.values() for pair in pairs]
    return [pair for pairs in by_paradigm.values() for pair in _subsample(pairs, per_paradigm, seed)]
