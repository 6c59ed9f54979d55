"""Running an ablation that :mod:`bvr.ablation` declared: ``bvr ablate`` (:func:`~bvr.runner.run.run_ablation`).
It sits above the science core and the operations (:mod:`bvr.ops`), and hands the operations what they need: the
saved views' writer to the report, the stage folder's files from each unit.
"""
