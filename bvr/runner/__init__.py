"""``bvr ablate`` (:func:`~bvr.runner.run.run_ablation`), above the science core and the operations: it hands the
operations what they need (the saved views' writer to the report, the stage folder's files from each unit)."""
