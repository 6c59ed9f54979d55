"""Operations around the science core: what runs, places and shows the experiments, none of which the core
imports (``tests/test_architecture.py`` holds it): bvr's saved views in MLflow (:mod:`bvr.ops.views`), ``bvr ui``
(:mod:`bvr.ops.ui`), the browser check (:mod:`bvr.ops.browser`), ``bvr pipeline`` and its DVC stage folder
(:mod:`bvr.ops.dvc`), and ``bvr ablate --launcher local|slurm`` (:mod:`bvr.ops.launch`).
"""
