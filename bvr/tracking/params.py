"""Configs logged as MLflow params: flattened to dotted keys MLflow accepts, long values truncated, in batches."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from mlflow.entities import Dataset, DatasetInput, InputTag, Param
from mlflow.tracking import MlflowClient

from bvr.errors import BvrError

try:  # the limits MLflow enforces; mlflow.utils is not public API, so fall back to the values of MLflow 2.x and 3.x
    from mlflow.utils.validation import MAX_ENTITY_KEY_LENGTH, MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH
except ImportError:  # pragma: no cover
    MAX_ENTITY_KEY_LENGTH, MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH = 250, 6000, 100


TRUNCATION_MARKER = "...[truncated]"
# MLflow accepts word characters, '.', '-', ' ', '/' (and ':' except on Windows) in keys. '/' is left out too:
# a key must also read as a normalised path, and config keys never need one.
_BAD_KEY_CHARS = re.compile(r"[^\w. -]")


def _param_key(name: str) -> str:
    key = _BAD_KEY_CHARS.sub("_", name)
    if not key or key.startswith("."):  # MLflow refuses keys that read as '.', '..' or a parent path
        key = f"_{key}"
    if len(key) > MAX_ENTITY_KEY_LENGTH:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        key = f"{key[: MAX_ENTITY_KEY_LENGTH - 9]}_{digest}"
    return key


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if len(text) > MAX_PARAM_VAL_LENGTH:
        text = text[: MAX_PARAM_VAL_LENGTH - len(TRUNCATION_MARKER)] + TRUNCATION_MARKER
    return text


def _as_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)


def flatten_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten a nested config (dicts or dataclasses) into MLflow params with dotted keys: strings as they are, the
    rest as JSON; values over MLflow's limit are cut and end with :data:`TRUNCATION_MARKER`; characters MLflow
    refuses in keys become ``_``.

    >>> flatten_params({"masking": {"mask_prob": 0.15, "split": [0.8, 0.1, 0.1]}, "path": None})
    {'masking.mask_prob': '0.15', 'masking.split': '[0.8, 0.1, 0.1]', 'path': 'null'}
    >>> flatten_params({"a b:c": True}, prefix="cfg")
    {'cfg.a b_c': 'true'}
    """
    out: dict[str, str] = {}
    for key, value in _as_dict(config).items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if (isinstance(value, Mapping) or dataclasses.is_dataclass(value)) and _as_dict(value):
            out.update(flatten_params(value, name))
            continue
        param = _param_key(name)
        if param in out:  # two keys became one after cleaning: keep both apart
            param = _param_key(f"{param}_{hashlib.sha1(name.encode()).hexdigest()[:8]}")
        out[param] = _param_value(value)
    return out


def log_params_batched(client: MlflowClient, run_id: str, params: Mapping[str, str]) -> None:
    """Log params in batches of MLflow's per-call limit (100); MLflow accepts a param logged again with the same value
    (a resumed run logs its config again), and refuses another value for an existing key."""
    log_batched(client, run_id, "params", [Param(key, str(value)) for key, value in params.items()])


def log_batched(client: MlflowClient, run_id: str, kind: str, items: list[Any],
                 size: int = MAX_PARAMS_TAGS_PER_BATCH) -> None:
    """``client.log_batch`` of ``items`` as ``kind`` (``params``, ``tags``, ``metrics``), ``size`` at a time."""
    for start in range(0, len(items), size):
        client.log_batch(run_id, **{kind: items[start : start + size]})


@dataclasses.dataclass(frozen=True)
class DataInput:
    """A dataset a run read, as MLflow's Dataset column shows it: a name, its content fingerprint, where it lies,
    and what the run used it for (``train``, ``eval``)."""

    name: str
    digest: str
    source: str
    context: str = "train"


def log_inputs(client: MlflowClient, run_id: str, inputs: Sequence[DataInput]) -> None:
    """Log ``inputs`` as the run's datasets (``mlflow.log_input`` for a run we do not hold as active)."""
    client.log_inputs(run_id, datasets=[
        DatasetInput(Dataset(name=i.name, digest=i.digest[:36], source_type="local",
                             source=json.dumps({"uri": i.source})),
                     tags=[InputTag(key="mlflow.data.context", value=i.context)])
        for i in inputs])


def log_config(logger_or_client: Any, run_id: str | None, config: Mapping[str, Any]) -> None:
    """Log a resolved config (a mapping or a dataclass) as flattened params and as the artifact ``config.yaml``, to
    ``run_id`` or, given a Lightning MLFlowLogger and None, the logger's run."""
    if not isinstance(logger_or_client, MlflowClient):  # a Lightning MLFlowLogger
        client, run_id = logger_or_client.experiment, run_id or logger_or_client.run_id
    else:
        client = logger_or_client
    if run_id is None:
        raise ValueError("log_config needs a run_id when given an MlflowClient")
    log_params_batched(client, run_id, flatten_params(config))
    plain = json.loads(json.dumps(_as_dict(config), default=str))  # YAML-safe: tuples become lists, paths strings
    client.log_text(run_id, yaml.safe_dump(plain, sort_keys=False), "config.yaml")


def log_artifact_dir(client: MlflowClient, run_id: str, path: Path, artifact_path: str) -> None:
    """Copy the folder ``path`` (a tokenizer, an exported model) into the run's artifacts under ``artifact_path``."""
    if not Path(path).is_dir():
        raise BvrError("folder to log as an MLflow artifact not found", where=path)
    client.log_artifacts(run_id, str(path), artifact_path)
