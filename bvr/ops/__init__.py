"""Operations around the science core: what runs, places and shows the experiments, none of which the core
imports (``tests/test_architecture.py`` holds it).

- :mod:`bvr.ops.views`: bvr's saved views written into MLflow's experiment tags (``mlflow.sharedViewState.*``), and
  the runs a report shows in them;
- :mod:`bvr.ops.ui`: the MLflow UI for a person (``bvr ui``): where to read an ablation in it, and ``mlflow ui``
  started and waited for;
- :mod:`bvr.ops.browser`: a report and its MLflow views checked in headless Chromium;
- :mod:`bvr.ops.dvc`: ``bvr pipeline`` (the ablation as a DVC stage), its plots and the stage folder ``bvr ablate``
  fills;
- :mod:`bvr.ops.launch`: ``bvr ablate --launcher local|slurm``, the units' processes and SLURM jobs.
"""
