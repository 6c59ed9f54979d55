"""Collection of the package's doctests: a module that needs an optional extra is left out where it is missing.

``bvr/ops/launch/job.py`` is what a SLURM job unpickles and imports submitit at its top (the ``cluster`` extra,
installed only where SLURM is: ``.ci/run``); elsewhere importing it for its doctests fails, and it has none to lose.
"""

from __future__ import annotations

import importlib.util

collect_ignore = [] if importlib.util.find_spec("submitit") else ["ops/launch/job.py"]
