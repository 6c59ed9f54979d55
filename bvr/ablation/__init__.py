"""Ablations declared: experiment files (:mod:`~bvr.ablation.declare`), the :class:`~bvr.ablation.plan.Plan` of units
they expand into, and the :class:`~bvr.ablation.manifest.Manifest` of what ran. Nothing here runs a unit:
:mod:`bvr.runner` does, a layer above the report, which reads manifests.
"""
