"""``bvr ablate --launcher local|slurm``: an ablation's units as processes of their own (:mod:`~bvr.ops.launch.launch`,
:mod:`~bvr.ops.launch.processes`), SLURM's commands (:mod:`~bvr.ops.launch.slurm`) and what one SLURM job runs
(:mod:`~bvr.ops.launch.job`, which imports nothing but submitit)."""
