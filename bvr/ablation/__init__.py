"""Ablations declared: experiment files, the plan of units they expand into, and the manifest of what ran.

- :mod:`bvr.ablation.declare`: ``experiments/NAME.yaml`` parsed into one config per arm (read by
  :mod:`bvr.ablation.loading`, its arms checked by :mod:`bvr.ablation.arms`);
- :mod:`bvr.ablation.plan`: the :class:`Plan` of an ablation at a preset and its :class:`Unit` s;
- :mod:`bvr.ablation.manifest`: the :class:`Manifest` that records every unit's status and MLflow runs, in
  :mod:`bvr.ablation.records`;
- :mod:`bvr.ablation.status`: an ablation's progress per stage (``bvr status``).

Nothing here runs a unit: running one is :mod:`bvr.runner`, a layer above the report, which reads manifests.
"""

from __future__ import annotations

from bvr.ablation.manifest import MANIFEST_VERSION, Manifest, RunContext, find_manifest, latest_manifests
from bvr.ablation.plan import ArmSeed, Plan, Unit, UnitKind, make_plan
from bvr.ablation.records import EvaluationRecord, FinetuneRecord, PretrainRecord

__all__ = ["MANIFEST_VERSION", "ArmSeed", "EvaluationRecord", "FinetuneRecord", "Manifest", "Plan", "PretrainRecord",
           "RunContext", "Unit", "UnitKind", "find_manifest", "latest_manifests", "make_plan"]
