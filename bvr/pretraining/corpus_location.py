"""Where the corpus is read from (:func:`resolve_corpus`): an absolute path, the data folder, the working directory,
or the Hugging Face hub when it can be reached."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from bvr.config import Config
from bvr.errors import BvrError


@dataclass(frozen=True)
class CorpusLocation:
    """Where the corpus is read from, once the data folder and the network have been taken into account."""

    source: str
    path: str
    hf_config: str | None = None


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false"):
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def resolve_corpus(cfg: Config) -> CorpusLocation:
    """Decide where the corpus comes from: an absolute path, the data folder, the working directory or the hub."""
    corpus = cfg.corpus
    path = Path(corpus.path).expanduser()
    if path.is_absolute():
        candidate = path
    elif cfg.data_dir:
        candidate = Path(cfg.data_dir).expanduser() / path
    elif path.exists():
        candidate = path
    elif corpus.source == "hf":
        return CorpusLocation("hf", corpus.path, corpus.hub_config)
    elif _hub_reachable():
        return CorpusLocation("hf", corpus.hub_id, corpus.hub_config)
    else:
        raise BvrError(
            "no data folder is set and the Hugging Face hub cannot be reached",
            where="data_dir",
            hint="pass --data-dir PATH or set BVR_DATA_DIR to a folder holding "
            f"{corpus.path}",
        )
    if not candidate.exists() and not (corpus.source == "hf" and not path.is_absolute() and not cfg.data_dir):
        raise BvrError(f"{candidate} does not exist", where="corpus.path", hint="check --data-dir / BVR_DATA_DIR")
    return CorpusLocation(corpus.source, str(candidate.resolve()), corpus.hub_config if corpus.source == "hf" else None)
