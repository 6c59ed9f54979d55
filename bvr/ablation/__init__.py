"""Ablations: declared in experiment files, laid out as a plan of units, run, and exported as a DVC pipeline.

- :mod:`bvr.ablation.declare`: ``experiments/NAME.yaml`` parsed into one config per arm;
- :mod:`bvr.ablation.plan`: the :class:`Plan` of an ablation at a preset and its :class:`Unit` s;
- :mod:`bvr.ablation.manifest`: the :class:`Manifest` that records every unit's status and MLflow runs;
- :mod:`bvr.ablation.run`: ``bvr ablate`` (:func:`run_ablation`), with one handler per kind of unit
  (:mod:`bvr.ablation.units`), the DVC stage folder (:mod:`bvr.ablation.stages`) and the hardware probe
  (:mod:`bvr.ablation.hardware`);
- :mod:`bvr.ablation.dvc`: ``bvr pipeline`` (:func:`render_pipeline`).

Importing this package loads only the plan and the manifest (the report reads manifests without the runner);
the runner's and the pipeline's names load on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from bvr.ablation.manifest import (
    MANIFEST_VERSION,
    EvaluationRecord,
    FinetuneRecord,
    Manifest,
    PretrainRecord,
    RunContext,
    find_manifest,
    latest_manifests,
)
from bvr.ablation.plan import Arm, Plan, Unit, UnitKind, make_plan

_LAZY = {"run_ablation": "bvr.ablation.run", "AblationResult": "bvr.ablation.run",
         "pipeline_spec": "bvr.ablation.dvc", "render_pipeline": "bvr.ablation.dvc",
         "hardware": "bvr.ablation.hardware"}

__all__ = ["MANIFEST_VERSION", "AblationResult", "Arm", "EvaluationRecord", "FinetuneRecord", "Manifest", "Plan",
           "PretrainRecord", "RunContext", "Unit", "UnitKind", "find_manifest", "hardware", "latest_manifests",
           "make_plan", "pipeline_spec", "render_pipeline", "run_ablation"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bvr.ablation' has no attribute '{name}'")
