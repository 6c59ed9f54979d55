"""``bvr ablate --launcher local|slurm``: an ablation's units as processes of their own.

- :mod:`bvr.ops.launch.launch`: the launchers, and the jobs they record (``jobs.json``);
- :mod:`bvr.ops.launch.processes`: the local units' processes, and the Ctrl-C and SIGTERM passed on to them;
- :mod:`bvr.ops.launch.slurm`: SLURM's own commands;
- :mod:`bvr.ops.launch.job`: what one SLURM job runs (it imports nothing but submitit).
"""
