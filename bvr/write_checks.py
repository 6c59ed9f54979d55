"""Writes that cannot succeed (a full disk, a read-only or forbidden folder), refused in one line, not a traceback.

Up-front checks before long work (:func:`check_writable`, :func:`check_free_space`), and :func:`write_error`, which
recognises a failed write in any exception and turns it into a :class:`WriteError` naming the path, what is free and
what to do. An ``OSError`` says so by its ``errno``; torch, safetensors, tokenizers and SQLite wrap it in their own
exceptions and only say it in words (``No space left on device (os error 28)``, ``database or disk is full``), so
the words count too, anywhere in the chain of causes. The CLI applies it to every exception that reaches it; the
ablation runner stops on one instead of failing unit after unit.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
from pathlib import Path

from bvr.errors import BvrError
from bvr.formatting import size

_CODES = (("full", {errno.ENOSPC, errno.EDQUOT}), ("too_large", {errno.EFBIG}), ("read_only", {errno.EROFS}),
          ("forbidden", {errno.EACCES, errno.EPERM}))
"""Each kind of write failure and the ``errno`` values that say it, in the order they are looked for."""
_WORDS = {
    "full": re.compile(r"no space left on device|disk quota exceeded|database or disk is full|os error (28|122)\b",
                       re.IGNORECASE),
    "too_large": re.compile(r"file too large|os error 27\b", re.IGNORECASE),
    "read_only": re.compile(r"read-only file system|os error 30\b", re.IGNORECASE),
}
RESUME_HINT = "free space (or choose another --output-dir) and run the same command again: finished stages are reused"
PRETRAIN_RESUME_HINT = ("free space (or choose another --output-dir) and run the same command with --resume: it "
                        "continues from the last checkpoint, if there is one")
"""What bvr pretrain says instead of :data:`RESUME_HINT`: run again without --resume, it refuses the unfinished run."""
_CHECKED: list[Path] = []
"""The folders :func:`check_writable` passed, where a write that failed without naming its file most likely was."""


class WriteError(BvrError):
    """A write failed for want of space or permission: everything after it would fail the same way, so a runner
    that goes on past a failed unit (``bvr ablate``) stops on this one."""


def free_bytes(path: Path) -> int:
    """The bytes free to this user on the file system holding ``path`` (or its nearest existing parent)."""
    return shutil.disk_usage(_existing(Path(path))).free


def tree_bytes(path: Path) -> int:
    """The size of a file, or of every file under a folder (0 when it does not exist)."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def check_writable(folder: Path, what: str) -> Path:
    """Make sure files can be created in ``folder`` (created if missing) before long work writes there; ``what``
    names it in the message (``"output folder (--output-dir)"``)."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _probe(folder)
    except OSError as err:
        error = write_error(err, folder, what=what) or not_a_folder(err, folder, what)
        if error is None:
            raise
        raise error from None
    if folder.resolve() not in _CHECKED:
        _CHECKED.append(folder.resolve())
    return folder


def check_file_target(path: Path, what: str) -> Path:
    """Make sure ``path`` (in a folder that exists) can be written as a file (beside its name, then renamed into
    place) before work writes it. A folder, device or pipe at ``path`` is refused: renaming a file over ``/dev/null``
    would replace the device."""
    path = Path(path)
    if path.exists() and not path.is_file():
        kind = "a folder" if path.is_dir() else "a device, pipe or socket, not a file"
        raise BvrError(f"cannot write the {what} there: it is {kind}", where=path,
                       hint="choose a file's name (a new file, or one bvr wrote)")
    try:
        _probe(path.parent)
    except OSError as err:
        error = write_error(err, path, what=what)
        if error is None and err.errno == errno.ENOENT:
            error = BvrError(f"cannot write the {what}: {_existing(path.parent)} takes no new files ({err.strerror})",
                             where=path, hint="choose a file on a disk")
        if error is None:
            raise
        raise error from None
    return path


def _probe(folder: Path) -> None:
    """Create a file in ``folder`` and remove it: what the file system says to a write there, as an ``OSError``."""
    fd, probe = tempfile.mkstemp(prefix=".bvr-write-check-", dir=folder)
    os.close(fd)
    os.unlink(probe)


NAME_MAX = 255
"""The longest file or folder name, in bytes, of the usual file systems (ext4, XFS, btrfs, APFS, NTFS)."""


def not_a_folder(err: OSError, folder: Path, what: str) -> BvrError | None:
    """The one-line error of a path that ``mkdir`` could not make a folder (``err``), or None for any other error: a
    file or device where the folder (or one above it) would be, a name too long, or a parent that takes no new
    folders (``/proc``: "No such file or directory" for a folder that exists)."""
    if err.errno in (errno.EEXIST, errno.ENOTDIR):
        blocker = _existing(folder)
        found = "it exists" if blocker == folder.absolute() else f"{blocker} exists"
        return BvrError(f"cannot use it as the {what}: {found} and is not a folder", where=folder,
                        hint="choose a folder (a new or an existing one), not a file")
    if err.errno == errno.ENAMETOOLONG:
        reason = name_too_long(folder) or "the path is longer than this system allows"
        return BvrError(f"cannot use it as the {what}: {reason}", where=folder, hint="choose a shorter name")
    if err.errno == errno.ENOENT:
        return BvrError(f"cannot use it as the {what}: {_existing(folder)} takes no new folders ({err.strerror})",
                        where=folder, hint="choose a folder on a disk (a new or an existing one)")
    return None


def name_too_long(path: Path) -> str | None:
    """Why ``path`` cannot exist for a name in it longer than :data:`NAME_MAX` bytes; None when every name fits.

    >>> name_too_long(Path("outputs") / ("x" * 300)), name_too_long(Path("outputs"))
    ('a name in it is 300 bytes long, more than the 255 a file system allows', None)
    """
    longest = max((len(os.fsencode(part)) for part in Path(path).parts), default=0)
    return f"a name in it is {longest:,} bytes long, more than the {NAME_MAX} a file system allows" \
        if longest > NAME_MAX else None


def check_free_space(folder: Path, needed: float, what: str) -> None:
    """Refuse to start ``what`` when the disk of ``folder`` has less than ``needed`` bytes free (an estimate, a
    lower bound: the check must not refuse what would fit)."""
    free = free_bytes(folder)
    if free < needed:
        raise WriteError(f"{what} needs about {size(needed)} of disk, but only {size(free)} is free there",
                         where=folder, hint="free space or choose another --output-dir, then run the same command")


def write_error(err: BaseException, path: Path | None = None, *, what: str | None = None,
                hint: str = RESUME_HINT) -> WriteError | None:
    """The one-line error of a write that failed for want of space or permission (``err`` itself when it is a
    :class:`WriteError` already), or None for any other error; ``err``'s causes and contexts are searched too.
    ``path``: what was being written, when the exception does not say; ``hint``: what to do about a full disk."""
    found = _find(err)
    if found is None:
        return None
    if isinstance(found[1], WriteError):
        return found[1]
    kind, cause = found
    named = getattr(cause, "filename", None) or getattr(cause, "filename2", None)
    target = Path(os.fsdecode(named)) if named else path
    if target is None:
        target = min(_CHECKED, key=free_bytes) if _CHECKED else Path.cwd()
    subject = f"the {what}" if what else "it"
    if kind == "full":
        return WriteError(f"cannot write {subject}: the disk is full ({size(free_bytes(target))} free)",
                          where=target, hint=hint)
    if kind == "too_large":
        return WriteError(f"cannot write {subject}: the file is larger than this file system or the process's "
                          "file size limit (ulimit -f) allows", where=target,
                          hint="raise the limit or choose another --output-dir, then run the same command again")
    folder = _existing(target)
    reason = "is on a read-only file system" if kind == "read_only" else "is not writable by this user"
    return WriteError(f"cannot write {subject}: {folder} {reason}", where=target,
                      hint="make it writable or choose another folder (--output-dir, or run bvr from a writable "
                           "working folder)")


def _find(err: BaseException) -> tuple[str, BaseException] | None:
    """The kind of write failure found in ``err``, its causes and contexts, with the exception that says it; an
    ``errno`` counts before words."""
    chain: list[BaseException] = []  # err and the exceptions it was raised from or while handling, nearest first
    todo: list[BaseException | None] = [err]
    while todo and len(chain) < 20:
        current = todo.pop(0)
        if current is not None and all(current is not seen for seen in chain):
            chain.append(current)
            todo.extend([current.__cause__, current.__context__])
    for current in chain:
        if isinstance(current, WriteError):
            return "written", current
        if isinstance(current, OSError) and current.errno is not None:
            for kind, codes in _CODES:
                if current.errno in codes:
                    return kind, current
    for current in chain:
        for kind, words in _WORDS.items():
            if words.search(str(current)):
                return kind, current
    return None


def _existing(path: Path) -> Path:
    """``path`` if it exists, else its nearest existing parent."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
