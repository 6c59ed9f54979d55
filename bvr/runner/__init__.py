"""Running an ablation that :mod:`bvr.ablation` declared: ``bvr ablate``.

- :mod:`bvr.runner.run`: ``bvr ablate`` (:func:`~bvr.runner.run.run_ablation`): the runner, which keeps the
  manifest, the MLflow parent run and the DVC stage folder (:mod:`bvr.ops.dvc.stage_folder`);
- :mod:`bvr.runner.units`: one handler per kind of unit, which runs it and returns what it built and recorded;
- :mod:`bvr.runner.opening`: what ``bvr ablate`` says first;
- :mod:`bvr.runner.hardware`: the machine the manifest records.

The runner sits above the science core and the operations (:mod:`bvr.ops`), and hands the operations what they
need: the saved views' writer to the report, the stage folder's files from each unit.
"""
