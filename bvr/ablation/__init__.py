"""Ablations declared: experiment files (:mod:`~bvr.ablation.declare`), the :class:`Plan` of units they expand into,
and the :class:`Manifest` of what ran. Nothing here runs a unit: :mod:`bvr.runner` does, a layer above the report,
which reads manifests.
"""

from __future__ import annotations

from bvr.ablation.manifest import MANIFEST_VERSION, Manifest, RunContext, find_manifest, latest_manifests
from bvr.ablation.plan import ArmSeed, Plan, Unit, UnitKind, make_plan
from bvr.ablation.records import EvaluationRecord, FinetuneRecord, PretrainRecord

__all__ = ["MANIFEST_VERSION", "ArmSeed", "EvaluationRecord", "FinetuneRecord", "Manifest", "Plan", "PretrainRecord",
           "RunContext", "Unit", "UnitKind", "find_manifest", "latest_manifests", "make_plan"]
