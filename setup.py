"""The packages of a build, beside pyproject.toml (which holds everything else).

The top-level ``experiments/`` (the shipped experiment files and ``presets/``) stays where it is, the source of truth
that a checkout reads; a wheel carries a copy inside the package as ``bvr/_experiments``, which an installed bvr
reads instead (:func:`bvr.config.loading.shipped_experiments`): without it no command of an installed bvr starts.
The papers' numbers, ``reports/published.yaml``, travel the same way as ``bvr/_reports`` (read by
:mod:`bvr.report.published`), so that an installed bvr renders reports, and the DVC page template,
``.dvc/plots/bvr-page.html``, as ``bvr/_dvc_plots`` (read by :func:`bvr.ops.dvc.plots.page_template`), so that an
installed ``bvr pipeline`` writes it.
"""

from setuptools import find_packages, setup

SHIPPED = {"bvr._experiments": "experiments", "bvr._experiments.presets": "experiments/presets",
           "bvr._reports": "reports", "bvr._dvc_plots": ".dvc/plots"}
"""Package -> the folder it is built from."""
FILES = {"bvr._dvc_plots": ["bvr-page.html"]}
"""Package -> the files it ships, where not its ``*.yaml``."""

setup(
    packages=[*find_packages(include=["bvr", "bvr.*"]), *SHIPPED],
    package_dir=SHIPPED,
    package_data={name: FILES.get(name, ["*.yaml"]) for name in SHIPPED},  # reports/: published.yaml, not the reports
)
