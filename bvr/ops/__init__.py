"""Operations around the science core, which never imports them (``tests/test_architecture.py``): saved views in
MLflow, ``bvr ui``, the browser check, ``bvr pipeline`` (DVC) and ``bvr ablate --launcher local|slurm``."""
