"""What a tracking URI names, checked before MLflow opens it (:func:`check_uri`): a store MLflow knows, with its
database driver installed, and at an SQLite path a file. MLflow says none of these in a line: an unknown scheme is a
traceback from its store registry, a missing driver a ``ModuleNotFoundError`` from SQLAlchemy, and a folder at
``mlflow.db`` two minutes of retries before SQLAlchemy's traceback.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE

from bvr.errors import BvrError

SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks", "databricks-uc", "uc")
"""The schemes of the stores MLflow logs to (its tracking store registry, less the file store); a database's may
name a driver (``postgresql+psycopg2``)."""
DATABASES = ("postgresql", "mysql", "mssql")
"""The schemes SQLAlchemy opens, through a driver that is a package of its own."""
PACKAGES = {"psycopg": "'psycopg[binary]'", "psycopg2": "psycopg2-binary", "MySQLdb": "mysqlclient",
            "pymysql": "PyMySQL"}
"""The package to install for a driver module whose name is not its package's."""
WHERE = "MLFLOW_TRACKING_URI"
UNSET = "or unset MLFLOW_TRACKING_URI to log to ./mlflow.db"


def check_uri(uri: str) -> None:
    """Refuse, in one line, a store MLflow cannot open: an unknown scheme, a database whose driver is not
    installed, a folder (or device) where an SQLite store's file would be, or a path, which MLflow 3 reads as its
    file store and refuses ("maintenance mode") unless ``MLFLOW_ALLOW_FILE_STORE`` says to use it anyway."""
    scheme = urllib.parse.urlsplit(uri).scheme
    db = sqlite_file(uri)
    if db is not None and db.exists() and not db.is_file():
        kind = "a folder" if db.is_dir() else "a device, pipe or socket"
        raise BvrError(f"the MLflow store is {kind}, not an SQLite database file", where=db,
                       hint="move it away (bvr then starts a new store there) or set MLFLOW_TRACKING_URI to the store "
                            "you mean (sqlite:////ABSOLUTE/PATH/mlflow.db)")
    if scheme in ("", "file"):
        if not MLFLOW_ALLOW_FILE_STORE.get():
            raise BvrError(f"{uri} is a path, which MLflow reads as its file store (a folder of runs) and no longer "
                           "writes to (it is in maintenance mode)", where=WHERE,
                           hint="set it to an SQLite store (sqlite:////ABSOLUTE/PATH/mlflow.db) or a tracking server "
                                "(http://HOST:PORT), or unset it to log to ./mlflow.db; `mlflow migrate-filestore` "
                                "moves the folder's runs into an SQLite store")
    elif scheme.split("+", 1)[0] not in SCHEMES:
        raise BvrError(f"'{shown(uri)}' is not a store MLflow can log to (scheme '{scheme}')", where=WHERE,
                       hint="set it to sqlite:////ABSOLUTE/PATH/mlflow.db, a tracking server (http://HOST:PORT) or a "
                            f"database (postgresql://, mysql://, mssql://), {UNSET}")
    elif scheme.split("+", 1)[0] in DATABASES:
        _check_driver(uri)


def _check_driver(uri: str) -> None:
    """Refuse a database URI whose SQLAlchemy driver is unknown or not installed."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(uri)
        url.get_dialect().import_dbapi()
    except ModuleNotFoundError as err:
        package = PACKAGES.get(err.name or "", err.name)
        raise BvrError(f"the MLflow store {shown(uri)} needs the Python package '{err.name}' (its database driver), "
                       "which is not installed", where=WHERE,
                       hint=f"pip install {package} where bvr runs, name an installed driver (SCHEME+DRIVER://), "
                            f"{UNSET}") from None
    except ArgumentError as err:  # a malformed URL, or a driver SQLAlchemy does not know
        raise BvrError(f"SQLAlchemy cannot open the MLflow store {shown(uri)} ({err})", where=WHERE,
                       hint=f"write it as SCHEME[+DRIVER]://USER:PASSWORD@HOST:PORT/DATABASE, {UNSET}") from None


def shown(uri: str) -> str:
    """``uri`` with its password, if any, as ``***``.

    >>> shown("postgresql://bvr:secret@db:5432/runs"), shown("sqlite:///mlflow.db")
    ('postgresql://bvr:***@db:5432/runs', 'sqlite:///mlflow.db')
    """
    parts = urllib.parse.urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (relative paths resolve against the current directory)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///") :].split("?", 1)[0]
    return Path(path).resolve() if path and path != ":memory:" else None
