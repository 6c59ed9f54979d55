"""MLflow bookkeeping: where runs are stored, how they are named, tagged and nested, and how configs are logged.

Conventions:

- one experiment per ablation, or per command for lone runs (``bvr-pretrain``);
- a parent run per invocation (:func:`parent_run`), and under it one nested run per arm and stage, named
  ``ARM/STAGE[/TASK/seedN]`` (:func:`run_name`) and tagged ``bvr.*`` (:func:`run_tags`);
- metric keys ``split/metric`` (``train/mlm_loss``, ``val/perplexity``), logged through a Lightning
  :class:`~lightning.pytorch.loggers.MLFlowLogger` (:func:`bvr.logger.make_logger`, kept apart so that
  reading runs needs no Lightning);
- the default store is ``mlflow.db`` (SQLite) with artifacts in ``mlartifacts/``, both in the working directory,
  so ``mlflow ui`` run there browses it with no server. ``MLFLOW_TRACKING_URI`` selects another store.

Every function takes the store from :func:`tracking_uri` and passes it explicitly: nothing here relies on
MLflow's process-wide "current" tracking URI or active run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

# Must precede `import mlflow`: MLflow 3 decides at import time whether to start its telemetry client (which
# writes an installation id under ~/.config and posts usage events). bvr runs offline; a user can opt back in
# by setting the variable to "false".
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import mlflow
import pandas as pd
import yaml
from mlflow.entities import Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode
from mlflow.tracking import MlflowClient
from mlflow.tracking.context.registry import resolve_tags
from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_RUN_NOTE

from bvr.errors import BvrError
from bvr.locks import file_lock, lock_path

try:  # the limits MLflow enforces; mlflow.utils is not public API, so fall back to the values of MLflow 2.x and 3.x
    from mlflow.utils.validation import MAX_ENTITY_KEY_LENGTH, MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH
except ImportError:  # pragma: no cover
    MAX_ENTITY_KEY_LENGTH, MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH = 250, 6000, 100

DEFAULT_DB = "mlflow.db"
DEFAULT_ARTIFACTS = "mlartifacts"

TAG_ABLATION = "bvr.ablation"
TAG_ARM = "bvr.arm"
TAG_STAGE = "bvr.stage"
TAG_TASK = "bvr.task"
TAG_SEED = "bvr.seed"
TAG_COLLAPSED = "bvr.collapsed"
"""Set (``"true"``/``"false"``) on fine-tuning runs once it is known whether the run collapsed."""
TAG_GIT_COMMIT = "bvr.git_commit"

TRUNCATION_MARKER = "...[truncated]"
# MLflow accepts word characters, '.', '-', ' ', '/' (and ':' except on Windows) in keys. '/' is left out too:
# a key must also read as a normalised path, and config keys never need one.
_BAD_KEY_CHARS = re.compile(r"[^\w. -]")
_PACKAGE_DIR = Path(__file__).resolve().parent
_OPENED: set[str] = set()
"""The SQLite stores this process has opened (see :func:`store_client`)."""


# ---------------------------------------------------------------------------------------------------------------
# Where runs are stored


def tracking_uri(workdir: Path | None = None) -> str:
    """The store runs go to: ``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<abs workdir>/mlflow.db``.

    Args:
        workdir: folder of the default store (None: the current directory).
    """
    env = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if env:
        return env
    return f"sqlite:///{(Path(workdir or Path.cwd()) / DEFAULT_DB).resolve()}"


def store_client(uri: str) -> MlflowClient:
    """A client of the store ``uri``: every bvr use of a store starts here, so that its first use is serialised.

    MLflow creates and migrates an SQLite store's tables when a process first opens it; several processes doing
    that at once on a new store crash, and can leave it broken. The first opening in each process therefore holds
    a file lock beside the database (``.mlflow.db.lock``); MLflow keeps the opened store for the process after that.
    """
    db = _sqlite_file(uri)
    if db is None or uri in _OPENED:
        return MlflowClient(uri)
    db.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(lock_path(db)):
        client = MlflowClient(uri)  # opens the store: creates or migrates its tables
    _OPENED.add(uri)
    return client


def _client(workdir: Path | None) -> MlflowClient:
    return store_client(tracking_uri(workdir))


def _sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (relative paths resolve against the current directory)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///") :].split("?", 1)[0]
    return Path(path).resolve() if path and path != ":memory:" else None


def _slug(name: str) -> str:
    """A folder name for ``name``; a hash keeps names that differ only in odd characters apart."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "experiment"
    return slug if slug == name else f"{slug}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def artifact_location(experiment: str, uri: str) -> str | None:
    """Where a new experiment keeps its artifacts: ``mlartifacts/<name>`` beside an SQLite store.

    The folder is named after the experiment, not its id, because the location must be given before MLflow
    assigns the id. For any other store (a server, a file store) None lets the store choose.
    """
    db = _sqlite_file(uri)
    return (db.parent / DEFAULT_ARTIFACTS / _slug(experiment)).as_uri() if db else None


def ensure_experiment(name: str, workdir: Path | None = None) -> str:
    """Get or create the experiment ``name``; return its id.

    Raises:
        BvrError: if an experiment of that name was deleted (MLflow keeps the name until it is restored or
            garbage-collected).
    """
    client = _client(workdir)
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        uri = tracking_uri(workdir)
        try:
            return client.create_experiment(name, artifact_location=artifact_location(name, uri))
        except MlflowException as err:
            # Another process (a DDP rank, a parallel arm) created it between our look-up and create.
            if err.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
                raise
            experiment = client.get_experiment_by_name(name)
    if experiment.lifecycle_stage == "deleted":
        raise BvrError(f"MLflow experiment '{name}' was deleted", where=tracking_uri(workdir),
                       hint=f"restore it (mlflow experiments restore --experiment-id {experiment.experiment_id}) "
                            "or choose another experiment name")
    return experiment.experiment_id


# ---------------------------------------------------------------------------------------------------------------
# Params


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
    """Flatten a nested config into MLflow params with dotted keys.

    Strings are kept as they are; everything else is written as JSON (lists, ``true``, ``null``). Values longer
    than MLflow's limit are cut and end with :data:`TRUNCATION_MARKER`; characters MLflow refuses in keys
    become ``_``. A dataclass is accepted in place of a dict.

    Args:
        config: a (nested) mapping of config values.
        prefix: a key to put in front of every key (joined with ``.``).

    Example:
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
    """Log params in batches of MLflow's per-call limit (100).

    Re-logging a param with the same value is accepted (a resumed run logs its config again); a different value
    for an existing key is refused by MLflow.
    """
    items = [Param(key, str(value)) for key, value in params.items()]
    for start in range(0, len(items), MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, params=items[start : start + MAX_PARAMS_TAGS_PER_BATCH])


def _log_tags_batched(client: MlflowClient, run_id: str, tags: Mapping[str, str]) -> None:
    items = [RunTag(key, str(value)) for key, value in tags.items()]
    for start in range(0, len(items), MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, tags=items[start : start + MAX_PARAMS_TAGS_PER_BATCH])


def _plain(config: Any) -> Any:
    """The config as plain YAML-safe data (tuples become lists, paths strings)."""
    return json.loads(json.dumps(_as_dict(config), default=str))


def log_config(
    logger_or_client: Any,
    run_id: str | None,
    config: Mapping[str, Any],
    *,
    artifact_name: str = "config.yaml",
) -> None:
    """Log a resolved config as flattened params and as a YAML artifact.

    Args:
        logger_or_client: an MLFlowLogger (its run is used when ``run_id`` is None) or an MlflowClient.
        run_id: the run to log to.
        config: the resolved config (a mapping or a dataclass).
        artifact_name: file name of the YAML artifact.
    """
    if not isinstance(logger_or_client, MlflowClient):  # a Lightning MLFlowLogger
        client, run_id = logger_or_client.experiment, run_id or logger_or_client.run_id
    else:
        client = logger_or_client
    if run_id is None:
        raise ValueError("log_config needs a run_id when given an MlflowClient")
    log_params_batched(client, run_id, flatten_params(config))
    client.log_text(run_id, yaml.safe_dump(_plain(config), sort_keys=False), artifact_name)


def log_artifact_dir(client: MlflowClient, run_id: str, path: Path, artifact_path: str) -> None:
    """Copy the folder ``path`` (a tokenizer, an exported model) into the run's artifacts under ``artifact_path``."""
    if not Path(path).is_dir():
        raise BvrError("folder to log as an MLflow artifact not found", where=path)
    client.log_artifacts(run_id, str(path), artifact_path)


# ---------------------------------------------------------------------------------------------------------------
# Names and tags


def _git(repo: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):  # no git on PATH, or it hung
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit(repo: Path | None = None) -> str | None:
    """The commit checked out at ``repo``, with ``-dirty`` if tracked files changed; None outside git.

    Untracked files do not count (as with ``git describe --dirty``).

    Args:
        repo: any folder inside the work tree (None: the folder of the bvr package, i.e. the code that runs).
    """
    repo = Path(repo or _PACKAGE_DIR)
    commit = _git(repo, "rev-parse", "--verify", "HEAD")
    if not commit:
        return None
    changes = _git(repo, "status", "--porcelain", "--untracked-files=no")
    return f"{commit}-dirty" if changes else commit


def run_name(arm: str, stage: str, task: str | None = None, seed: int | None = None) -> str:
    """The name of a nested run: ``ARM/STAGE[/TASK][/seedN]``.

    Example:
        >>> run_name("roberta", "pretrain")
        'roberta/pretrain'
        >>> run_name("bert", "finetune", "mnli", 3)
        'bert/finetune/mnli/seed3'
    """
    parts = [arm, stage, *([task] if task else []), *([f"seed{seed}"] if seed is not None else [])]
    return "/".join(parts)


def _tag_value(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def run_tags(
    *,
    ablation: str | None,
    arm: str | None,
    stage: str,
    task: str | None = None,
    seed: int | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The ``bvr.*`` tags of a run, and the git commit where known.

    Tags whose value is None are left out, so that ``tags.bvr.task = 'mnli'`` filters only runs that have one.
    Booleans are written ``true``/``false``.

    Args:
        ablation: the ablation (None for a lone run).
        arm: the arm within the ablation.
        stage: ``pretrain``, ``finetune``, ...
        task: the fine-tuning task.
        seed: the fine-tuning seed.
        extra: more tags (``{TAG_COLLAPSED: False}``); they win over the ones above.
    """
    values = {TAG_ABLATION: ablation, TAG_ARM: arm, TAG_STAGE: stage, TAG_TASK: task, TAG_SEED: seed}
    tags = {key: _tag_value(value) for key, value in values.items() if value is not None}
    commit = git_commit()
    if commit:
        tags[TAG_GIT_COMMIT] = commit
        tags[MLFLOW_GIT_COMMIT] = commit.removesuffix("-dirty")  # MLflow's UI links this one; it must be a sha
    tags.update({key: _tag_value(value) for key, value in (extra or {}).items()})
    return tags


# ---------------------------------------------------------------------------------------------------------------
# Runs


def _resume(client: MlflowClient, run_id: str, experiment: str) -> None:
    """Mark an existing run as running again (as ``mlflow.start_run(run_id=...)`` does), after checking it."""
    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise BvrError(f"no MLflow run '{run_id}' in {client.tracking_uri}", where="--resume") from None
    found = client.get_experiment(run.info.experiment_id).name
    if found != experiment:
        raise BvrError(f"MLflow run '{run_id}' belongs to experiment '{found}', not '{experiment}'", where="--resume")
    client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))


@contextlib.contextmanager
def parent_run(
    experiment: str,
    name: str,
    *,
    workdir: Path | None = None,
    tags: Mapping[str, str] | None = None,
    description: str | None = None,
    resume_run_id: str | None = None,
) -> Iterator[mlflow.entities.Run]:
    """Start (or resume) the parent run of one invocation; end it FINISHED, FAILED or KILLED.

    Args:
        experiment: experiment name (created if missing).
        name: run name.
        workdir: folder of the default store.
        tags: run tags (:func:`run_tags`); MLflow's own context tags (user, source) are added.
        description: shown as the run's description in the UI (``mlflow.note.content``).
        resume_run_id: continue this run instead of starting one; its tags are updated with ``tags``.

    Yields:
        The run as it was when started.
    """
    experiment_id = ensure_experiment(experiment, workdir)
    client = _client(workdir)
    tags = dict(tags or {})
    if description is not None:
        tags[MLFLOW_RUN_NOTE] = description
    if resume_run_id:
        _resume(client, resume_run_id, experiment)
        _log_tags_batched(client, resume_run_id, tags)
        run_id = resume_run_id
    else:
        run_id = client.create_run(experiment_id, run_name=name, tags=resolve_tags(tags)).info.run_id
    try:
        yield client.get_run(run_id)
    except KeyboardInterrupt:
        client.set_terminated(run_id, RunStatus.to_string(RunStatus.KILLED))
        raise
    except BaseException:
        client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
        raise
    client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED))


# ---------------------------------------------------------------------------------------------------------------
# Reading back


def _run_row(run: mlflow.entities.Run) -> dict[str, Any]:
    """One row in the layout of ``mlflow.search_runs``: info columns, then metrics.*, params.*, tags.*."""
    info = run.info
    row: dict[str, Any] = {
        "run_id": info.run_id,
        "experiment_id": info.experiment_id,
        "status": info.status,
        "artifact_uri": info.artifact_uri,
        "start_time": pd.to_datetime(info.start_time, unit="ms", utc=True),
        "end_time": pd.to_datetime(info.end_time, unit="ms", utc=True),
    }
    for kind in ("metrics", "params", "tags"):
        row.update({f"{kind}.{key}": value for key, value in getattr(run.data, kind).items()})
    return row


def find_runs(experiment: str, *, filter_string: str = "", workdir: Path | None = None) -> pd.DataFrame:
    """The runs of an experiment as a DataFrame, in the layout of ``mlflow.search_runs`` (newest first).

    Unlike ``mlflow.search_runs`` it reads the bvr store without changing MLflow's process-wide tracking URI.

    Args:
        experiment: experiment name; an unknown name gives an empty frame.
        filter_string: an MLflow search filter (``"tags.`bvr.stage` = 'pretrain'"``).
        workdir: folder of the default store.
    """
    client = _client(workdir)
    found = client.get_experiment_by_name(experiment)
    runs: list[mlflow.entities.Run] = []
    token = None
    while found is not None:
        page = client.search_runs([found.experiment_id], filter_string, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    columns = ["run_id", "experiment_id", "status", "artifact_uri", "start_time", "end_time"]
    frame = pd.DataFrame([_run_row(run) for run in runs], columns=None if runs else columns)
    rest = sorted(c for c in frame.columns if c not in columns)
    return frame[columns + rest]
