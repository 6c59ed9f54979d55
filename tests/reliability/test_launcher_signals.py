"""SIGTERM and Ctrl-C sent to ``bvr ablate --launcher local`` reach its units: each unit runs in a process group of
its own, the launcher passes the signal on, says so in one line, waits for the units to save and exits 143 (SIGTERM)
or 130 (Ctrl-C)."""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from bvr.ablation.manifest import Manifest
from bvr.ops.launch.processes import UnitProcesses, forwarding
from bvr.signals import Terminated
from tests.test_ablate import FIXTURES, bvr_env
from tests.test_launch import SMALL
from tests.test_prepare import write_wiki_corpus

UNIT = """\
import signal, sys, time
signal.signal(signal.SIGINT, lambda *args: (print("stopped", flush=True), sys.exit(130)))
print("ready", flush=True)
time.sleep(60)
"""
"""A unit that says when it is ready and, on Ctrl-C, that it stopped (exit 130)."""

LONG = ["--set", "training.max_steps=100000", "--set", "training.checkpoint_every_steps=2",
        "--set", "training.val_every_steps=1000", "--set", "training.log_every_steps=2"]
"""Pretraining that would run for hours unless stopped, saving a checkpoint every 2 steps."""


def _await(check, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_the_launcher_passes_ctrl_c_to_a_unit_in_a_process_group_of_its_own_and_starts_nothing_after(tmp_path):
    said = io.StringIO()
    units = UnitProcesses(Console(file=said, width=200))
    with (tmp_path / "unit.log").open("w") as out:
        process = units.start([sys.executable, "-c", UNIT, "unit:a"], out, dict(os.environ), tmp_path)
        assert process is not None and os.getpgid(process.pid) == process.pid != os.getpgid(0)
        _await(lambda: "ready" in (tmp_path / "unit.log").read_text(), 30, "the unit did not start")
        with forwarding(units):
            os.kill(os.getpid(), signal.SIGINT)  # as a terminal's Ctrl-C reaches the launcher only
            assert units.wait(process) == 130
        assert units.start([sys.executable, "-c", "pass", "unit:b"], out, dict(os.environ), tmp_path) is None
    assert (tmp_path / "unit.log").read_text() == "ready\nstopped\n"
    assert said.getvalue() == "launcher local: SIGINT received; stopping 1 running unit(s) (unit:a), each saving " \
                              "what it finished\n"
    with pytest.raises(KeyboardInterrupt):
        units.raise_stop()


def test_sigterm_to_the_launcher_with_no_unit_running_is_raised_as_terminated():
    units = UnitProcesses(Console(file=io.StringIO()))
    before = signal.getsignal(signal.SIGTERM)
    with forwarding(units):
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before
    with pytest.raises(Terminated):
        units.raise_stop()


def _kill_left(marker: str) -> None:
    """SIGKILL every process whose command line holds ``marker`` (this test's folder): what a failed run left."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


@pytest.mark.slow
def test_sigterm_to_the_local_launcher_stops_the_running_pretraining_and_exits_143(tmp_path):
    data = write_wiki_corpus(tmp_path / "data", documents=60)
    shutil.copytree(FIXTURES / "glue", data / "glue")
    (tmp_path / "exp.yaml").write_text(SMALL)
    command = [sys.executable, "-m", "bvr.cli", "ablate", "exp.yaml", "--data-dir", str(data), *LONG,
               "--launcher", "local", "--jobs", "1"]
    launcher = subprocess.Popen(command, cwd=tmp_path, env=bvr_env(), text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    try:
        _await(lambda: launcher.poll() is not None or list(tmp_path.glob("outputs/runs/*/checkpoints/last.ckpt")),
               300, "pretraining did not start")
        assert launcher.poll() is None, launcher.communicate()
        launcher.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        out, err = launcher.communicate(timeout=120)  # the unit's whole run: hours
        waited = time.monotonic() - sent
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        _kill_left(str(tmp_path))
    assert launcher.returncode == 143, out[-2000:] + err[-3000:]
    stopping = re.search(r"launcher local: SIGTERM received; stopping 1 running unit\(s\) \((pretrain:\w+)\), each "
                         r"saving what it finished", out)
    assert stopping, out
    assert err.strip().endswith("terminated (SIGTERM) before the run finished; run the same command again to "
                                "continue from the finished stages"), err[-3000:]
    assert waited < 60 and "Traceback" not in err
    unit = stopping.group(1)
    (folder,) = (tmp_path / "outputs" / "ablations").glob("exp-default-*")
    log = (folder / "logs" / f"{unit.replace(':', '-')}.log").read_text()
    assert "terminated (SIGTERM)" in log, log[-3000:]  # the unit got the signal, and said so, as a single bvr does
    record = Manifest.load(folder / "manifest.json").pretrain_record(unit.split(":")[1])
    assert record.status != "done"  # left for the same command to resume from its checkpoint
