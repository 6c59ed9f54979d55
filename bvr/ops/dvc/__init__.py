"""An ablation as a DVC pipeline.

- :mod:`bvr.ops.dvc.pipeline`: ``bvr pipeline`` (:func:`~bvr.ops.dvc.pipeline.render_pipeline`), the ablation as one
  DVC stage;
- :mod:`bvr.ops.dvc.plots`: its ``dvc plots`` entries and templates;
- :mod:`bvr.ops.dvc.stage_folder`: what each unit of ``bvr ablate`` writes in the stage folder.
"""
