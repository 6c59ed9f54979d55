"""Files and folders that are either whole or absent: written beside their final place, then renamed over it.

A reader never sees a half-written file or folder, and a write that fails or is killed leaves the previous version
(plus, at worst, a hidden ``.NAME.tmp-PID`` sibling that the next write of the same process replaces). Text files
read line by line go through :func:`utf8_lines`, which refuses a byte that is not UTF-8 at its line.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from bvr.errors import BvrError

UTF8_HINT = "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"


def not_utf8(err: UnicodeDecodeError, path: Path, line: int, line_start: int = 0) -> BvrError:
    """The one-line error of a byte that is not UTF-8, at its (1-based) line and its byte in the line; ``err`` was
    raised decoding one line or the whole file, ``line_start`` is where that line starts in the bytes decoded."""
    return BvrError(f"not UTF-8 ({err.reason} at byte {err.start - line_start + 1} of the line)",
                    where=f"{path}:{line}", hint=UTF8_HINT)


def utf8_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 text file, each line with its line end, decoded one at a time so that a
    byte that is not UTF-8 is reported at its line, not as a ``UnicodeDecodeError`` traceback."""
    with Path(path).open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise not_utf8(err, path, number) from None


def temp_sibling(path: Path) -> Path:
    """The hidden sibling ``.NAME.tmp-PID`` of ``path``, on the same file system so a rename onto ``path`` is atomic.

    >>> temp_sibling(Path("out/metrics.json")).name == f".metrics.json.tmp-{os.getpid()}"
    True
    """
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def refuse_link(path: Path) -> Path:
    """``path``, unless a symbolic link (dangling or not) sits at its name: bvr replaces the files it writes and never
    writes through a link or over one, so the file a link points to stays whole. Folders above ``path`` may be links.
    """
    path = Path(path)
    if path.is_symlink():
        raise BvrError(f"a symbolic link (to {os.readlink(path)}) where bvr writes; bvr does not write through "
                       "links or over them", where=path, hint="remove the link or choose another path")
    return path


@contextmanager
def atomic_path(path: Path, *, fsync: bool = False) -> Iterator[Path]:
    """A new, empty temporary sibling of ``path`` for writers that take a file name (safetensors, matplotlib,
    pandas); renamed over ``path`` when the block ends without error (an error removes it and leaves ``path`` as it
    was). A symbolic link at ``path`` is refused (:func:`refuse_link`); ``fsync`` flushes the file to disk before
    the rename and the folder after it, so the write survives a crash. The temporary file is created without
    following a link: a link planted at its name is removed, never written through.
    """
    path = refuse_link(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    tmp.unlink(missing_ok=True)  # a leftover of this process, or a link: O_EXCL below creates the file anew
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666))
        yield tmp
        if fsync:
            _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        _fsync(path.parent)  # the rename made durable: a crash right after must not bring the old file back


@contextmanager
def atomic_open(path: Path, mode: str = "w", *, fsync: bool = False) -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path`` for writing; rename it over ``path`` when the block ends without error
    (:func:`atomic_path`). ``mode`` ``"w"``: UTF-8 text; ``"wb"``: bytes."""
    encoding = None if "b" in mode else "utf-8"
    with (atomic_path(path, fsync=fsync) as tmp,
          os.fdopen(os.open(tmp, os.O_WRONLY | os.O_NOFOLLOW), mode, encoding=encoding) as file):
        yield file


def readable_by_all(path: Path) -> Path:
    """Give ``path`` the mode a plain ``open`` would have (0666 less the umask): writers that go through a private
    temporary file (safetensors' ``save_file``) leave 0600, which other users of a shared model folder cannot read."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)
    return Path(path)


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; return ``path``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     target = write_text(Path(folder) / "a" / "b.txt", "hello")
    ...     target.read_text(), sorted(p.name for p in target.parent.iterdir())
    ('hello', ['b.txt'])
    """
    with atomic_open(path) as file:
        file.write(text)
    return Path(path)


def _fsync(path: Path) -> None:
    """Flush a file's or folder's content to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_dir(built: Path, target: Path) -> None:
    """Move the finished folder ``built`` to ``target``, replacing what is there with two renames: the old ``target``
    goes to a hidden ``.NAME.old-XXXXXXXX`` sibling, removed once ``built`` is in place (as are such siblings left by
    a replace killed between its renames). A symbolic link at ``target`` is refused (:func:`refuse_link`)."""
    built, target = Path(built), refuse_link(target)
    for stale in target.parent.glob(f".{target.name}.old-*"):
        shutil.rmtree(stale, ignore_errors=True)
    old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
    if target.exists():
        target.rename(old)
    built.rename(target)
    shutil.rmtree(old, ignore_errors=True)


WRITTEN = ".bvr-written"
"""The file bvr keeps in a folder it writes into beside files that may be the user's (``bvr export``'s folder): the
names of the files bvr wrote there, one a line. A file not named in it is not bvr's to replace."""


def written_by_bvr(folder: Path) -> set[str]:
    """The names :data:`WRITTEN` in ``folder`` lists (none when it is missing or a link)."""
    marker = Path(folder) / WRITTEN
    if marker.is_symlink() or not marker.is_file():
        return set()
    lines = marker.read_text(encoding="utf-8", errors="replace").splitlines()
    return {line for line in lines if line and not line.startswith("#")}


def not_written_by_bvr(folder: Path) -> list[str]:
    """The names in ``folder`` (a folder or nothing) that bvr did not write there, sorted: all but those
    :data:`WRITTEN` lists and itself."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    ours = written_by_bvr(folder) | {WRITTEN}
    return sorted(entry.name for entry in folder.iterdir() if entry.name not in ours)


def claim(folder: Path, names: list[str], by: str) -> None:
    """Record in ``folder``'s :data:`WRITTEN` that bvr writes ``names`` there; called before writing them, so a
    write cut short leaves them bvr's. ``by`` names the command on the file's first line (``"bvr export"``)."""
    listed = sorted(written_by_bvr(folder) | set(names))
    write_text(Path(folder) / WRITTEN, f"# Files {by} wrote in this folder; it replaces only these without --force.\n"
               + "".join(f"{name}\n" for name in listed))
