"""The one error type that reaches a user.

Anything a user can fix (a config key, a file, a value) raises :class:`BvrError` with what was wrong and where;
the CLI prints it on one line and exits non-zero. Programming errors stay ordinary exceptions.
"""

from __future__ import annotations

from pathlib import Path


class BvrError(Exception):
    """A problem with the user's input, reported as one line: ``where: what. hint``; ``where`` is the file,
    ``file:line`` or config key it was found at."""

    def __init__(self, message: str, *, where: str | Path | None = None, hint: str | None = None) -> None:
        self.message = message
        self.where = str(where) if where is not None else None
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        return f"{text}. {self.hint}" if self.hint else text


def check(ok: bool, key: str, message: str) -> None:
    """Raise a BvrError located at ``key`` (a dotted config key) unless ``ok``."""
    if not ok:
        raise BvrError(message, where=key)


def check_choice(value: str, choices: tuple[str, ...], key: str) -> None:
    """Raise a BvrError at ``key`` unless ``value`` is one of ``choices`` (which the message lists)."""
    check(value in choices, key, f"'{value}' is not one of {', '.join(choices)}")
