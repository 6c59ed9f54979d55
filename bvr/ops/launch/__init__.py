"""``bvr ablate --launcher local|slurm``: an ablation's units as processes of their own, locally or as SLURM jobs."""
