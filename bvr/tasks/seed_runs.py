"""Each cached fine-tuning seed's MLflow run, in the experiment that asks for it (see :mod:`bvr.tracking.placed`).

A seed's cache folder is keyed by content, so a second ablation in the same output folder (the shared control)
finds seeds whose runs live in the first one's experiment: those runs are copied into this one, never left out of
its report. A seed folder deleted or damaged since is read back from the ``result.json`` its run logged here, not
trained and logged twice; a cached seed whose run was deleted from the store is trained again.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient

from bvr.cache import build_once, is_done
from bvr.tasks.results import SeedResult, TaskInfo, read_seed_result, seed_result_problem
from bvr.tracking.placed import download, finished, logged_run

RESULT_FILE = "result.json"

Cached = dict[int, tuple[SeedResult, TaskInfo]]
"""Seed -> its cached result and the task's information."""


def place_seeds(client: MlflowClient, experiment_id: str, dirs: dict[int, Path]) -> tuple[Cached, Cached]:
    """The seeds whose results are cached in ``dirs``, by where their runs are: FINISHED in this experiment (the
    seed's ``run_id`` is that run), or in another experiment of the store (to copy here). A missing or damaged folder
    is rebuilt from this experiment's run of it; one whose run is gone is removed, so that the seed is trained again;
    each folder not reused as it was is named in one line on stderr, saying what happens to it."""
    here: Cached = {}
    elsewhere: Cached = {}
    for seed, folder in dirs.items():
        problem = seed_result_problem(folder) if is_done(folder) else "missing" if not folder.exists() else None
        if problem is not None and not _restore(client, experiment_id, folder, problem):
            continue
        if not is_done(folder):
            continue  # never finished (a killed build): trained now
        result, info = read_seed_result(folder)
        if finished(client, result.run_id, experiment_id):
            here[seed] = (result, info)
        elif found := logged_run(client, experiment_id, folder.name):
            here[seed] = (dataclasses.replace(result, run_id=found), info)
        elif finished(client, result.run_id):
            elsewhere[seed] = (result, info)
        else:
            print(f"{folder}: its MLflow run {result.run_id} is not in the store (deleted?); this seed is trained "
                  "again", file=sys.stderr, flush=True)
            shutil.rmtree(folder)
    return here, elsewhere


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
