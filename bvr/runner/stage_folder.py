"""The DVC stage folder (``--stage-dir pipeline/NAME``): what each unit writes there, and reading it back.

Each DVC stage is one unit (:mod:`bvr.runner.dvc`), and writes its products under the stage folder for DVC
to track: the exported model of each arm (``ARM/model``), ``ARM/pretrain.json``, ``ARM/blimp.json``,
``ARM/probe-TASK.json``, ``ARM/finetune-TASK.json``, the data statistics and the tokenizers.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from bvr.ablation.manifest import Manifest
from bvr.ablation.records import FinetuneRecord
from bvr.fs import replace_dir, temp_sibling


def evaluation_file(kind: str, task: str | None) -> str:
    """The file an evaluation writes in its model's stage folder.

    >>> evaluation_file("blimp", None), evaluation_file("probe", "sst2")
    ('blimp.json', 'probe-sst2.json')
    """
    return f"{kind}-{task}.json" if task else f"{kind}.json"


def copy_tree(source: Path, target: Path) -> None:
    """Replace ``target`` with a copy of ``source`` (hard links where the file system allows)."""
    tmp = temp_sibling(target)
    if tmp.exists():
        shutil.rmtree(tmp)

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, tmp, copy_function=link)
    replace_dir(tmp, target)


def finetune_summary(result: Any, task: str, label: str, records: list[FinetuneRecord]) -> dict[str, Any]:
    """``ARM/finetune-TASK.json``: a fine-tuning result (:func:`bvr.tasks.run.finetune`'s) over every seed."""
    return {"task": task, "arm": label, "main_key": result.main_key, **result.summary(),
            "collapsed": sum(seed.collapsed for seed in result.seeds), "baseline": result.info.baseline,
            "parent_run_id": records[0].parent_run_id if records else None,
            "seeds": [{"seed": s.seed, "score": s.scores[result.main_key], "collapsed": s.collapsed,
                       "run_id": s.run_id, "seconds": s.seconds} for s in result.seeds]}


def adopt_stage_records(manifest: Manifest, stage_dir: Path) -> None:
    """Fill the units ``manifest`` lacks from the DVC stage folder.

    DVC skips a stage whose inputs did not change, so after ``dvc exp run -S`` (a new plan, a new manifest)
    the untouched stages never record themselves; their outputs, which DVC keeps current, say what they hold.
    """
    for pretrained in manifest.pretrain:
        path = stage_dir / pretrained.label / "pretrain.json"
        if pretrained.status != "done" and path.is_file():
            record = json.loads(path.read_text())
            pretrained.update(status="done", error=None, run_id=record.get("run_id"), run_dir=record.get("run_dir"),
                              metrics=record.get("metrics", {}))
    for evaluation in manifest.evaluations:
        path = stage_dir / evaluation.label / evaluation_file(evaluation.kind, evaluation.task)
        if evaluation.status != "done" and path.is_file():
            record = json.loads(path.read_text())
            evaluation.update(**{k: record.get(k) for k in ("run_id", "main_key", "score", "seeds", "baseline",
                                                            "seconds")}, status="done", error=None)
    for finetuned in manifest.finetune:
        path = stage_dir / finetuned.label / f"finetune-{finetuned.task}.json"
        if finetuned.status == "done" or not path.is_file():
            continue
        record = json.loads(path.read_text())
        seed = next((s for s in record.get("seeds", []) if s.get("seed") == finetuned.seed), None)
        if seed is not None:
            finetuned.update(status="done", error=None, run_id=seed.get("run_id"), main_key=record.get("main_key"),
                             parent_run_id=record.get("parent_run_id"), score=seed.get("score"),
                             collapsed=seed.get("collapsed"), seconds=seed.get("seconds"),
                             baseline=record.get("baseline", {}))
