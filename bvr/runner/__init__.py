"""Running an ablation that :mod:`bvr.ablation` declared: ``bvr ablate`` and ``bvr pipeline``.

- :mod:`bvr.runner.run`: ``bvr ablate`` (:func:`~bvr.runner.run.run_ablation`): the runner, which keeps the
  manifest, the MLflow parent run and the DVC stage folder;
- :mod:`bvr.runner.units`: one handler per kind of unit, which runs it and returns what it built and recorded;
- :mod:`bvr.runner.stage_folder`: what each unit writes in the DVC stage folder;
- :mod:`bvr.runner.dvc`: ``bvr pipeline`` (:func:`~bvr.runner.dvc.render_pipeline`), the ablation as a DVC stage;
- :mod:`bvr.runner.hardware`: the machine the manifest records.
"""
