"""Cached results sealed: each carries a checksum of its content and of what produced it.

A result file in a cache folder (a fine-tuning seed's ``result.json``, an evaluation's score) is reused by every
later run whose settings name that folder. Reused as found, a file edited by hand, or copied into another folder,
would be reported as measured. :func:`seal` adds a SHA-256 of the content together with the *producer* (the cache
folder's or file's name, whose hash covers everything the result depends on); :func:`unseal` gives the content back
only when the checksum matches, and otherwise says why, so the caller computes the result again and says so.

>>> sealed = seal({"score": 0.5}, "sst2-seed0-abc")
>>> unseal(sealed, "sst2-seed0-abc")
({'score': 0.5}, None)
>>> unseal({**sealed, "score": 0.9}, "sst2-seed0-abc")[1]
'does not match its checksum (edited since it was written, or copied from another cache folder)'
>>> unseal(sealed, "sst2-seed1-def")[1]
'does not match its checksum (edited since it was written, or copied from another cache folder)'
>>> unseal({"score": 0.5}, "x")[1]
'carries no checksum (written before results were sealed)'
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

CHECKSUM_KEY = "checksum"


def _digest(payload: Any, producer: str) -> str:
    text = json.dumps({"producer": producer, "result": payload}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seal(payload: dict[str, Any], producer: str) -> dict[str, Any]:
    """``payload`` as JSON will hold it (numbers as floats, keys as text), with its checksum under
    :data:`CHECKSUM_KEY`."""
    plain = json.loads(json.dumps(payload, default=float))
    return {**plain, CHECKSUM_KEY: _digest(plain, producer)}


def unseal(data: Any, producer: str) -> tuple[dict[str, Any] | None, str | None]:
    """The content of a sealed result and None, or None and why it cannot be trusted."""
    if not isinstance(data, dict) or CHECKSUM_KEY not in data:
        return None, "carries no checksum (written before results were sealed)"
    payload = {key: value for key, value in data.items() if key != CHECKSUM_KEY}
    if data[CHECKSUM_KEY] != _digest(payload, producer):
        return None, "does not match its checksum (edited since it was written, or copied from another cache folder)"
    return payload, None
