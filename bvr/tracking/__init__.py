"""MLflow bookkeeping. One experiment per ablation (or per command for lone runs, ``bvr-pretrain``); a parent run
per invocation (:func:`parent_run`) with one nested run per arm and stage, named ``ARM/STAGE[/TASK/seedN]``
(:func:`run_name`) and tagged ``bvr.*`` (:func:`run_tags`); metric keys ``split/metric`` (``val/perplexity``), logged
through :func:`bvr.logger.make_logger` (apart, so that reading runs needs no Lightning). The default store is
``mlflow.db`` with artifacts in ``mlartifacts/`` in the working directory (``mlflow ui`` run there browses it);
``MLFLOW_TRACKING_URI`` selects another. Every function passes the store (:func:`tracking_uri`) explicitly: nothing
relies on MLflow's process-wide tracking URI or active run.
"""

import os

# Before `import mlflow`, only where unset: no telemetry (MLflow 3 decides at import; bvr runs offline), no progress
# bar per artifact file, and a tracking server that stops answering retried 4 times (14 s of back-off, 60 s for one
# answer), not MLflow's silent four minutes, then said in one line (bvr.tracking.store.server_failure).
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "4")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")

from bvr.tracking.params import (  # noqa: E402
    MAX_ENTITY_KEY_LENGTH,
    MAX_PARAM_VAL_LENGTH,
    TRUNCATION_MARKER,
    DataInput,
    flatten_params,
    log_artifact_dir,
    log_config,
    log_inputs,
    log_params_batched,
)
from bvr.tracking.runs import (  # noqa: E402
    TAG_ARM,
    TAG_CLOSED,
    TAG_COLLAPSED,
    TAG_DECLARED_PREFIX,
    TAG_GIT_COMMIT,
    TAG_HOST,
    TAG_LABEL,
    TAG_MEASURE,
    TAG_PID,
    TAG_PRETRAIN_SEED,
    TAG_SEED,
    TAG_STAGE,
    TAG_TASK,
    RunContext,
    close_stale_runs,
    closed_on_error,
    end_run,
    end_status,
    git_commit,
    link_model,
    parent_run,
    resume_run,
    run_name,
    run_tags,
    system_metrics,
)
from bvr.tracking.store import (  # noqa: E402
    DEFAULT_DB,
    artifact_location,
    check_store,
    client_for,
    ensure_experiment,
    find_runs,
    server_failure,
    store_client,
    tracking_uri,
)
from bvr.tracking.ui import (  # noqa: E402
    CURVES_VIEW,
    DEFAULT_UI,
    EFFECTS_VIEW,
    SAVED_VIEWS,
    SCORES_VIEW,
    ui_address,
    ui_base,
    view_url,
)

__all__ = [
    "CURVES_VIEW", "DEFAULT_DB", "DEFAULT_UI", "DataInput", "EFFECTS_VIEW", "MAX_ENTITY_KEY_LENGTH",
    "MAX_PARAM_VAL_LENGTH", "RunContext", "SAVED_VIEWS", "SCORES_VIEW", "TAG_ARM", "TAG_CLOSED", "TAG_COLLAPSED",
    "TAG_DECLARED_PREFIX", "TAG_GIT_COMMIT", "TAG_HOST", "TAG_LABEL", "TAG_MEASURE", "TAG_PID", "TAG_PRETRAIN_SEED",
    "TAG_SEED", "TAG_STAGE", "TAG_TASK", "TRUNCATION_MARKER", "artifact_location", "check_store", "client_for",
    "close_stale_runs", "closed_on_error", "end_run", "end_status", "ensure_experiment", "find_runs", "flatten_params",
    "git_commit", "link_model", "log_artifact_dir", "log_config", "log_inputs", "log_params_batched", "parent_run",
    "resume_run", "run_name", "run_tags", "server_failure", "store_client", "system_metrics", "tracking_uri",
    "ui_address", "ui_base", "view_url",
]
