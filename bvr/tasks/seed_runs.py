"""Each cached fine-tuning seed's MLflow run, in the experiment that asks for it (see :mod:`bvr.tracking.placed`).

A seed's cache folder is keyed by content, so a second ablation in the same output folder (the shared
no-pretraining control) finds seeds whose runs live in the first ablation's experiment: those runs are copied into
this one under this call's parent run, never left out of its report. A seed folder deleted or damaged since is read
back from the run that logged it here (its ``result.json`` is an artifact of the seed's run) instead of being trained
and logged twice; a cached seed whose run was deleted from the store is trained again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from bvr.cache import build_once, is_done
from bvr.tasks.results import SeedResult, TaskInfo, read_seed_result, seed_result_problem
from bvr.tracking import parent_run
from bvr.tracking.placed import download, finished, logged_run

RESULT_FILE = "result.json"


@dataclass
class Placed:
    """The cached seeds of one call, by where their runs are."""

    # Cached, with a FINISHED run in this experiment (the seed's ``run_id`` is that run).
    here: dict[int, tuple[SeedResult, TaskInfo]] = field(default_factory=dict)
    # Cached, with its run in another experiment of the store: to copy here.
    elsewhere: dict[int, tuple[SeedResult, TaskInfo]] = field(default_factory=dict)

    @property
    def cached(self) -> dict[int, tuple[SeedResult, TaskInfo]]:
        return {**self.here, **self.elsewhere}


def place_seeds(client: MlflowClient, experiment_id: str, dirs: dict[int, Path]) -> Placed:
    """Sort the seeds whose results are cached in ``dirs`` by where their runs are; rebuild a missing or damaged
    folder from this experiment's run of it; remove a folder whose run is gone, so that the seed is trained again.
    Each folder not reused as it was is named in one line on stderr, saying what happens to it."""
    placed = Placed()
    for seed, folder in dirs.items():
        problem = seed_result_problem(folder) if is_done(folder) else "missing" if not folder.exists() else None
        if problem is not None and not _restore(client, experiment_id, folder, problem):
            continue
        if not is_done(folder):
            continue  # never finished (a killed build): trained now
        result, info = read_seed_result(folder)
        if finished(client, result.run_id, experiment_id):
            placed.here[seed] = (result, info)
        elif found := logged_run(client, experiment_id, folder.name):
            placed.here[seed] = (dataclasses.replace(result, run_id=found), info)
        elif finished(client, result.run_id):
            placed.elsewhere[seed] = (result, info)
        else:
            print(f"{folder}: its MLflow run {result.run_id} is not in the store (deleted?); this seed is trained "
                  "again", file=sys.stderr, flush=True)
            shutil.rmtree(folder)
    return placed


def _restore(client: MlflowClient, experiment_id: str, folder: Path, problem: str) -> bool:
    """Rebuild ``folder`` from the result.json its run in this experiment logged; say what happens in one line.
    A damaged folder that cannot be rebuilt is removed (the seed is trained again)."""
    run_id = logged_run(client, experiment_id, folder.name)
    restored = False
    if run_id is not None:
        with tempfile.TemporaryDirectory(prefix="bvr-seed-") as tmp:
            logged = download(client, run_id, RESULT_FILE, Path(tmp))
            if logged is not None and seed_result_problem(logged.parent, producer=folder.name) is None:
                if folder.exists():
                    shutil.rmtree(folder)
                build_once(folder, lambda out: shutil.copy2(logged, out / RESULT_FILE), {"read_back_from_run": run_id})
                restored = True
    if restored:
        print(f"{folder / RESULT_FILE}: {problem}; read back from its MLflow run {run_id}, not trained again",
              file=sys.stderr, flush=True)
    elif problem != "missing":
        print(f"{folder / RESULT_FILE}: {problem}; this seed is trained again", file=sys.stderr, flush=True)
        shutil.rmtree(folder, ignore_errors=True)
    return restored


class TaskParent:
    """The call's parent run ``ARM/finetune/TASK`` (or a grid point's, under it), started with the first seed this
    process logs (trains or copies): where another process trained every seed meanwhile (twin invocations wait on
    each seed's lock), none is started, so each seed is logged once."""

    def __init__(self, stack: contextlib.ExitStack, experiment: str, name: str, tags: dict[str, str],
                 nest_under: Callable[[], str] | None = None) -> None:
        self.stack, self.experiment, self.name, self.tags = stack, experiment, name, tags
        # The id of the run to nest under, asked for when this run starts (it starts that one in turn).
        self.nest_under = nest_under
        self.run_id: str | None = None

    @property
    def started(self) -> bool:
        return self.run_id is not None

    def id(self) -> str:
        if self.run_id is None:
            tags = {**self.tags, **({MLFLOW_PARENT_RUN_ID: self.nest_under()} if self.nest_under else {})}
            self.run_id = self.stack.enter_context(parent_run(self.experiment, self.name, workdir=Path.cwd(),
                                                              tags=tags)).info.run_id
        return self.run_id
