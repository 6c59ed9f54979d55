"""The processes of ``bvr ablate --launcher local``'s units, and Ctrl-C and SIGTERM passed on to them.

Each unit runs in a process group of its own, which only the launcher signals. While :func:`forwarding` holds,
SIGTERM or Ctrl-C sent to the launcher goes on to every running unit: each stops as a single ``bvr`` process does
(:mod:`bvr.signals`), the launcher starts nothing more, waits, and raises the signal as :class:`~bvr.signals.Terminated`
(exit status 143) or ``KeyboardInterrupt`` (130). A second signal goes on too (a unit then ends at once).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from rich.console import Console

from bvr.signals import Terminated


class UnitProcesses:
    """The units' processes running now, by unit id, and the signal that stops them (None until one came)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.running: dict[subprocess.Popen[Any], str] = {}
        self.stopping: int | None = None
        self._lock = threading.RLock()  # a second signal may come while the handler holds it

    def start(self, command: list[str], out: IO[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[Any] | None:
        """Start a unit's ``command`` in a process group of its own, output to ``out``; None once stopping."""
        with self._lock:
            if self.stopping is not None:
                return None
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       env=env, cwd=cwd, start_new_session=True)
            self.running[process] = command[-1]
            return process

    def wait(self, process: subprocess.Popen[Any]) -> int:
        """Wait for a unit's process to end; its exit status."""
        code = process.wait()
        with self._lock:
            self.running.pop(process, None)
        return code

    def forward(self, signum: int, _frame: object = None) -> None:
        """The signal handler: pass ``signum`` on to every running unit's process group; say so the first time."""
        with self._lock:
            first, self.stopping = self.stopping is None, self.stopping or signum
            units = {process: unit for process, unit in self.running.items() if process.returncode is None}
            for process in units:
                with suppress(ProcessLookupError):  # it ended meanwhile
                    os.killpg(process.pid, signum)
        if first:
            name = signal.Signals(signum).name
            self.console.print(f"launcher local: {name} received; stopping {len(units)} running unit(s) "
                               f"({', '.join(units.values()) or 'none'}), each saving what it finished",
                               markup=False, highlight=False, soft_wrap=True)

    def raise_stop(self) -> None:
        """Raise the signal that stopped the units, if one did: :class:`Terminated` or ``KeyboardInterrupt``."""
        if self.stopping == signal.SIGTERM:
            raise Terminated
        if self.stopping is not None:
            raise KeyboardInterrupt


@contextmanager
def forwarding(units: UnitProcesses) -> Iterator[None]:
    """SIGTERM and Ctrl-C passed on to ``units`` while the block runs (in the main thread; elsewhere Python delivers
    no signal); the previous handlers after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, units.forward) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
