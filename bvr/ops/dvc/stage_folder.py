"""The DVC stage folder (``--stage-dir pipeline/NAME``): what each unit writes there.

With ``--stage-dir`` (what the DVC stage of :mod:`bvr.ops.dvc.pipeline` passes) each unit writes its products under the
stage folder for DVC to track: the exported model of each arm (``ARM/model``), ``ARM/pretrain.json``,
``ARM/blimp.json``, ``ARM/probe-TASK.json``, ``ARM/finetune-TASK.json``, the data statistics and the tokenizers.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

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
            **({"selection": result.selection} if result.selection else {}),
            "seeds": [{"seed": s.seed, "score": s.scores[result.main_key], "collapsed": s.collapsed,
                       "run_id": s.run_id, "seconds": s.seconds} for s in result.seeds]}
