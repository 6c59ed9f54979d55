"""What an ablation has done, is doing and has left: ``bvr status NAME`` and the top of a partial report, one row
per stage and measure (``pretrain``, ``blimp``, ``probe/TASK``, ``finetune/TASK``), read from the manifest, and the
runs in progress, read from MLflow."""

from __future__ import annotations

import datetime
import socket
from dataclasses import dataclass, field
from pathlib import Path

from bvr.ablation.manifest import Manifest
from bvr.ablation.records import EvaluationRecord, FinetuneRecord, Record
from bvr.locks import process_alive


@dataclass
class StageProgress:
    """One stage's or measure's units: planned, done, failed, and the labels (``ARM-pSEED``) still missing."""

    stage: str
    planned: int = 0
    done: int = 0
    failed: int = 0
    missing_labels: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def left(self) -> int:
        return self.planned - self.done - self.failed


def _stage(record: Record) -> str:
    if isinstance(record, FinetuneRecord):
        return f"finetune/{record.task}"
    if isinstance(record, EvaluationRecord):
        return record.kind if record.task is None else f"{record.kind}/{record.task}"
    return "pretrain"


def progress(manifest: Manifest) -> list[StageProgress]:
    """The stages of ``manifest`` in the order they run, each with its counts (a fine-tuning unit is one seed)."""
    stages: dict[str, StageProgress] = {}
    for record in manifest.records():
        entry = stages.setdefault(_stage(record), StageProgress(_stage(record)))
        entry.planned += 1
        if record.status == "done":
            entry.done += 1
        elif record.status == "failed":
            entry.failed += 1
            if record.error:
                entry.errors.append(f"{record.label}: {record.error}")
        if record.status != "done" and record.label not in entry.missing_labels:
            entry.missing_labels.append(record.label)
    return list(stages.values())


def progress_rows(manifest: Manifest) -> list[list[str]]:
    """:func:`progress` as table rows: stage, done / planned, failed, left, models not done yet."""
    rows = []
    for s in progress(manifest):
        more = len(s.missing_labels) - 6
        missing = ", ".join(s.missing_labels[:6]) + (f" and {more} more" if more > 0 else "")
        rows.append([s.stage, f"{s.done} / {s.planned}", str(s.failed), str(s.left), missing or "—"])
    return rows


PROGRESS_HEADER = ["stage", "done / planned", "failed", "left", "models not done"]


@dataclass
class Running:
    """A run of the ablation that MLflow has as RUNNING and whose process is alive here."""

    name: str
    run_id: str
    experiment_id: str
    pid: int
    started: str


def running_now(manifest: Manifest, workdir: Path | None = None) -> list[Running]:
    """The ablation's runs in state RUNNING whose process (``bvr.pid`` on this host) is alive."""
    from bvr.tracking import TAG_HOST, TAG_PID, store_client, tracking_uri

    client = store_client(tracking_uri(workdir))
    experiment = client.get_experiment_by_name(manifest.experiment_name)
    if experiment is None:
        return []
    host = socket.gethostname()
    runs = client.search_runs([experiment.experiment_id],
                              f"attributes.status = 'RUNNING' and tags.`{TAG_HOST}` = '{host}'", max_results=1000)
    found = []
    for run in runs:
        pid = run.data.tags.get(TAG_PID, "")
        if pid.isdigit() and process_alive(int(pid)):
            started = datetime.datetime.fromtimestamp(run.info.start_time / 1000).strftime("%Y-%m-%d %H:%M:%S")
            found.append(Running(run.info.run_name or run.info.run_id, run.info.run_id, experiment.experiment_id,
                                 int(pid), started))
    return sorted(found, key=lambda r: r.started)
