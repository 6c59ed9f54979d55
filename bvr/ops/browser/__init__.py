"""The browser check (``bvr report NAME --browser-check DIR``): a report and its MLflow views looked at from outside,
as a person would, in headless Chromium (:mod:`bvr.ops.browser.check`; Chromium and ``mlflow ui`` driven by
:mod:`bvr.ops.browser.chromium`). Nothing bvr computes depends on it; the report package never imports it.
"""
