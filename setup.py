"""The packages of a build, beside pyproject.toml (which holds everything else).

The top-level ``experiments/`` (the shipped experiment files and ``presets/``) stays where it is, the source of truth
that a checkout reads; a wheel carries a copy inside the package as ``bvr/_experiments``, which an installed bvr
reads instead (:func:`bvr.config.loading.shipped_experiments`): without it no command of an installed bvr starts.
The papers' numbers, ``reports/published.yaml``, travel the same way as ``bvr/_reports`` (read by
:mod:`bvr.report.published`), so that an installed bvr renders reports.
"""

from setuptools import find_packages, setup

SHIPPED = {"bvr._experiments": "experiments", "bvr._experiments.presets": "experiments/presets",
           "bvr._reports": "reports"}
"""Package -> the folder it is built from."""

setup(
    packages=[*find_packages(include=["bvr", "bvr.*"]), *SHIPPED],
    package_dir=SHIPPED,
    package_data={name: ["*.yaml"] for name in SHIPPED},  # reports/: published.yaml, not the reports written there
)
