"""A local store that moved: its artifact folders re-rooted beside it, so that a moved or copied clone still works.

MLflow records the artifact folders of experiments, runs and logged models as absolute ``file://`` URIs; after
``mv`` or ``cp -r`` of the folder they name the old place, where ``bvr report`` would log (or fail to) and the UI
would look. :func:`reroot_artifacts` rewrites them the first time a process opens the store
(:func:`bvr.tracking.store.store_client`).
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

ARTIFACTS = "mlartifacts"
"""The folder beside ``mlflow.db`` that holds bvr's experiments' artifacts."""

COLUMNS = (("experiments", "artifact_location"), ("runs", "artifact_uri"), ("logged_models", "artifact_location"))
"""The tables and columns of an MLflow SQLite store that hold an artifact URI."""

_ROOT = re.compile(rf"^(file://.*/{ARTIFACTS}/)[^/]+/?$")
"""An experiment folder bvr made: ``file:///OLD/ROOT/mlartifacts/<experiment>``; group 1 is the root."""


def artifact_root(location: str) -> str | None:
    """The ``.../mlartifacts/`` root of an experiment folder bvr made, or None for any other location.

    >>> artifact_root("file:///old/clone/mlartifacts/masking"), artifact_root("/old/clone/mlruns/0")
    ('file:///old/clone/mlartifacts/', None)
    """
    match = _ROOT.match(location or "")
    return match.group(1) if match else None


def reroot_artifacts(db: Path) -> int:
    """Rewrite the artifact URIs of a moved SQLite store to its folder's ``mlartifacts/`` (which must exist); return
    the rows changed. Only the experiments bvr laid out (:func:`artifact_root`) move, with their runs and logged
    models. A store that cannot be written, or is locked, is left for the next opening."""
    folder = db.resolve().parent
    if not (folder / ARTIFACTS).is_dir() or not db.is_file():
        return 0
    here = (folder / ARTIFACTS).as_uri() + "/"
    connection = sqlite3.connect(db, timeout=10, isolation_level=None)
    try:
        tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "experiments" not in tables:
            return 0  # a new store: MLflow has not made its tables yet
        roots = {artifact_root(location) for (location,) in connection.execute(
            "SELECT artifact_location FROM experiments")} - {None, here}
        if not roots:
            return 0
        return _rewrite(connection, tables, sorted(roots), here)  # type: ignore[arg-type]
    except sqlite3.OperationalError:  # read-only or locked: nothing is lost by leaving the old URIs a while
        return 0
    finally:
        connection.close()


def _rewrite(connection: sqlite3.Connection, tables: set[str], roots: list[str], here: str) -> int:
    """Replace each old root at the start of every artifact URI by ``here``, in one transaction."""
    changed = 0
    connection.execute("BEGIN IMMEDIATE")
    try:
        for table, column in COLUMNS:
            if table not in tables:
                continue
            for old in roots:
                changed += connection.execute(
                    f"UPDATE {table} SET {column} = ? || substr({column}, ?) WHERE substr({column}, 1, ?) = ?",
                    (here, len(old) + 1, len(old), old)).rowcount
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return changed
