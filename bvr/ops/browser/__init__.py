"""The browser check (``bvr report NAME --browser-check DIR``): a report and its MLflow views looked at from outside
in headless Chromium. Nothing bvr computes depends on it; the report package never imports it."""
