"""The browser check: what bvr made looked at from outside, as a person would; nothing bvr computes depends on them.

- :mod:`bvr.ops.browser.check`: a report and its MLflow views checked in headless Chromium (``bvr report NAME
  --browser-check DIR``): images that load, tables that fit, links into the MLflow UI that resolve, views that open
  as saved, numbers rounded as the report rounds them;
- :mod:`bvr.ops.browser.chromium`: headless Chromium driven with no browser-driver library, and ``mlflow ui``
  served for it to open.

This package reads the report's files and the MLflow UI (addresses and saved views from :mod:`bvr.tracking`); the
report package never imports it.
"""
