"""An ablation as a DVC pipeline: ``bvr pipeline`` (:mod:`~bvr.ops.dvc.pipeline`), its plots
(:mod:`~bvr.ops.dvc.plots`) and the stage folder ``bvr ablate`` fills (:mod:`~bvr.ops.dvc.stage_folder`)."""
